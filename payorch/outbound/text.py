"""Text from a receiver made fit to store and to show: what PostgreSQL's `text` and JSON accept.

A receiver's answer is arbitrary bytes, and an error message may quote what the receiver sent. A
`text` column refuses NUL and anything that is not valid UTF-8 (a lone surrogate encodes to none),
so each is replaced by U+FFFD REPLACEMENT CHARACTER before it is stored.
"""

from __future__ import annotations

import codecs
import re

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
