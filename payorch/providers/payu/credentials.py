"""A PayU account's credentials: the four values of one point of sale (POS) in PayU's panel and the
environment they belong to, checked for form, sealed as one JSON document, fingerprinted.

PayU's panel (Online payments > My shops > the shop > Points of sale > the POS, "Configuration
keys") shows: the POS id (`pos_id`, digits), the second key (MD5) that signs PayU's notifications
(32 hexadecimal characters), and the OAuth `client_id` (digits, usually the POS id) and
`client_secret` (32 hexadecimal characters). The sandbox (https://merch-prod.snd.payu.com) has POSes
and keys of its own: `environment` says which PayU they are for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from payorch.providers.base import Credentials, CredentialsRejected

Environment = Literal["sandbox", "production"]

_DIGITS: Final = re.compile(r"[0-9]{1,20}")
_HEX_KEY: Final = re.compile(r"[0-9a-fA-F]{32}")

# The linking request's credential fields, with their form as the console shows it.
CREDENTIAL_FIELDS: Final[Mapping[str, str]] = {
    "posId": "The POS id (pos_id) of the point of sale in PayU's panel: digits, e.g. 300746.",
    "clientId": "OAuth client_id of the same POS: digits, usually the POS id.",
    "clientSecret": "OAuth client_secret of the same POS: 32 hexadecimal characters.",
    "secondKey": "Second key (MD5) of the same POS, which signs PayU's notifications: 32 hexadecimal "
    "characters.",
    "environment": 'Which PayU the POS is at: "sandbox" (secure.snd.payu.com) or "production" '
    "(secure.payu.com).",
}


@dataclass(frozen=True)
class PayuAccount:
    """One POS's credentials, opened for a call. Never logged, never in an error message."""

    pos_id: str
    client_id: str
    client_secret: str
    second_key: str
    environment: Environment

    def __repr__(self) -> str:  # a stray log line shows which POS, never a secret
        return f"PayuAccount(pos_id={self.pos_id!r}, environment={self.environment!r})"

    def sealed_form(self) -> Credentials:
        """The one `Credentials` payorch seals for the account: its fields as canonical JSON."""
        document = {
            "posId": self.pos_id,
            "clientId": self.client_id,
            "clientSecret": self.client_secret,
            "secondKey": self.second_key,
            "environment": self.environment,
        }
        return Credentials(api_key=json.dumps(document, sort_keys=True, separators=(",", ":")))

    def fingerprint(self) -> str:
        """The POS id (shown in PayU's panel) and the last four characters of the client secret."""
        return f"pos {self.pos_id}...{self.client_secret[-4:]}"


def account_from_fields(fields: Mapping[str, str]) -> PayuAccount:
    """The account the linking request's `credentials` describe; `CredentialsRejected` naming every
    field that is missing or not of PayU's form."""
    problems: list[str] = []
    bad: list[str] = []

    def take(name: str, pattern: re.Pattern[str] | None, form: str) -> str:
        value = fields.get(name)
        if not isinstance(value, str) or not value:
            problems.append(f"{name} is required")
            bad.append(name)
            return ""
        if pattern is not None and pattern.fullmatch(value) is None:
            problems.append(f"{name} must be {form}")
            bad.append(name)
        return value

    pos_id = take("posId", _DIGITS, "digits")
    client_id = take("clientId", _DIGITS, "digits")
    client_secret = take("clientSecret", _HEX_KEY, "32 hexadecimal characters")
    second_key = take("secondKey", _HEX_KEY, "32 hexadecimal characters")
    environment = take("environment", None, "")
    if environment and environment not in ("sandbox", "production"):
        problems.append('environment must be "sandbox" or "production"')
        bad.append("environment")
    if problems:
        raise CredentialsRejected("; ".join(problems), fields=tuple(bad))
    return PayuAccount(
        pos_id=pos_id,
        client_id=client_id,
        client_secret=client_secret,
        second_key=second_key,
        environment="sandbox" if environment == "sandbox" else "production",
    )


def opened(credentials: Credentials) -> PayuAccount:
    """The account sealed as `PayuAccount.sealed_form`; `ValueError` for anything else."""
    try:
        document = json.loads(credentials.api_key)
    except ValueError:
        raise ValueError("the stored credentials are not a PayU account") from None
    if not isinstance(document, dict):
        raise ValueError("the stored credentials are not a PayU account")
    try:
        return account_from_fields(document)
    except CredentialsRejected:
        raise ValueError("the stored credentials are not a PayU account") from None
