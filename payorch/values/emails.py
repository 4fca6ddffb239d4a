"""E-mail addresses in request bodies: `Email`, accepted, refused and normalised exactly as pydantic's
`EmailStr` does (the `email_validator` package, without a deliverability check), at a fraction of
its cost for the addresses most bodies carry.

`email_validator` walks the address character by character (Unicode categories, IDNA mapping of the
domain) whatever it holds. Most addresses are plain ASCII: a dot-atom before the `@`, host-name
labels after it, a top-level domain ending in a letter. For such an address (`_PLAIN`, within the
lengths below, no `--` in its domain, not under a special-use domain) every one of those checks
passes, and what it normalises to is known: the domain in lower case, the part before the `@` as it
is (in lower case for the mailbox names RFC 2142 makes case-insensitive). Every other address,
valid or not, goes through `EmailStr`'s own validation, so its answer and its error are the same.
"""

from __future__ import annotations

import re
from typing import Annotated

import email_validator
from email_validator.rfc_constants import CASE_INSENSITIVE_MAILBOX_NAMES
from pydantic import AfterValidator, WithJsonSchema
from pydantic.networks import validate_email

_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# The last label (the top-level domain) ends with a letter, as `email_validator` requires.
_TOP_LABEL = r"(?:[A-Za-z0-9][A-Za-z0-9-]{0,61})?[A-Za-z]"
_PLAIN = re.compile(rf"({_ATOM}(?:\.{_ATOM})*)@((?:{_LABEL}\.)+{_TOP_LABEL})")
# `email_validator`'s limits: the whole address, and (only checked when strict, kept here anyway)
# the part before the `@`.
_MAX_ADDRESS = 254
_MAX_LOCAL = 64
_CASE_INSENSITIVE = frozenset(CASE_INSENSITIVE_MAILBOX_NAMES)


def normalized_email(value: str) -> str:
    """`value` as `EmailStr` normalises it, or `EmailStr`'s `PydanticCustomError` when it is not a
    valid address."""
    plain = _PLAIN.fullmatch(value)
    if plain is not None and len(value) <= _MAX_ADDRESS:
        local, domain = plain.group(1), plain.group(2).lower()
        if len(local) <= _MAX_LOCAL and "--" not in domain and not _is_special_use(domain):
            if local.lower() in _CASE_INSENSITIVE:
                local = local.lower()
            return f"{local}@{domain}"
    return validate_email(value)[1]


def _is_special_use(domain: str) -> bool:
    """Whether `domain` is, or is under, a name `email_validator` refuses as special-use or reserved."""
    return any(
        domain == name or domain.endswith("." + name) for name in email_validator.SPECIAL_USE_DOMAIN_NAMES
    )


# A field holding an e-mail address: what pydantic's `EmailStr` is (a string validated after it is
# read as one, its JSON schema `format: email`), validated by `normalized_email`.
Email = Annotated[
    str, AfterValidator(normalized_email), WithJsonSchema({"type": "string", "format": "email"})
]
