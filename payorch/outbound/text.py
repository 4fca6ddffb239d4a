"""Text from a receiver made fit to store and to show: what PostgreSQL's `text` and JSON accept.

A receiver's answer is arbitrary bytes, and an error message may quote what the receiver sent. A
`text` column refuses NUL and anything that is not valid UTF-8 (a lone surrogate encodes to none),
so each is replaced by U+FFFD REPLACEMENT CHARACTER before it is stored. A receiver's headers are
kept within bounds too (`storable_headers`): however many it sends, and however long.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable

REPLACEMENT = "\ufffd"
# Surrogate code points: in a Python str they are never a valid character (UTF-8 has no encoding
# for them), paired or not.
_NOT_STORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str, limit: int | None = None) -> str:
    """`text` (cut to `limit` characters) with NUL and lone surrogates replaced by U+FFFD."""
    if limit is not None:
        text = text[:limit]
    return _NOT_STORABLE.sub(REPLACEMENT, text)


def storable_excerpt(data: bytes) -> str:
    """The first bytes of a body as text: UTF-8 with every invalid sequence replaced by U+FFFD, a
    character cut in two at the end left out, and NUL replaced too."""
    # An incremental decoder not told the input is final keeps an incomplete last character back.
    decoded = codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)
    return decoded.replace("\x00", REPLACEMENT)


# A receiver's headers as kept: at most so many, each name and value cut to so many characters, and
# no more characters in all (names and values) than `HEADERS_TOTAL`; the rest is left out.
MAX_HEADERS = 50
HEADER_NAME_LENGTH = 100
HEADER_VALUE_LENGTH = 1000
HEADERS_TOTAL = 8192


def storable_headers(raw: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[str, str], ...]:
    """Headers as they arrived (raw name and value bytes, in order, repeats kept), bounded: the first
    `MAX_HEADERS`, each name cut to `HEADER_NAME_LENGTH` and each value to `HEADER_VALUE_LENGTH`
    characters, none past `HEADERS_TOTAL` characters in all. Names are lowercased; bytes are read
    as Latin-1 (as HTTP has them), made fit to store."""
    kept: list[tuple[str, str]] = []
    total = 0
    for name, value in raw:
        if len(kept) == MAX_HEADERS:
            break
        pair = (
            storable_text(name.decode("latin-1").lower(), HEADER_NAME_LENGTH),
            storable_text(value.decode("latin-1"), HEADER_VALUE_LENGTH),
        )
        total += len(pair[0]) + len(pair[1])
        if total > HEADERS_TOTAL:
            break
        kept.append(pair)
    return tuple(kept)
