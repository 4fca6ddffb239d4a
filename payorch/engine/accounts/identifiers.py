"""Identifiers people type (e-mail addresses, company registration numbers) in one canonical form,
so that two spellings a reader cannot tell apart are one identifier.
"""

from __future__ import annotations

import unicodedata


def _is_format_character(character: str) -> bool:
    # Unicode category Cf: zero-width space and joiners, the byte-order mark, word joiner, soft
    # hyphen, bidirectional controls. They change the text without changing what anyone sees.
    return unicodedata.category(character) == "Cf"


def canonical_identifier(text: str) -> str:
    """`text` without format characters (Unicode category Cf), in Unicode NFKC, without surrounding
    white space.

    Promises: `canonical_identifier(canonical_identifier(t)) == canonical_identifier(t)`; spellings
    that differ only by invisible characters, compatibility forms (full-width letters and digits, a
    no-break space, ligatures) or composed and decomposed accents have the same canonical form.
    Letter case is kept: comparisons that ignore it do so themselves.
    """
    visible = "".join(character for character in text if not _is_format_character(character))
    # Removing format characters first lets NFKC compose what they separated (e + ZWJ + U+0301);
    # NFKC of text without format characters never produces one.
    return unicodedata.normalize("NFKC", visible).strip()
