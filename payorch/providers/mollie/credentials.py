"""A Mollie account's credentials: its API key (`live_...` or `test_...`), which takes payments and
refunds, and optionally an organization access token (`access_...`), which reads the organization's
settlements for reconciliation (`settlements`): Mollie's Settlements API takes no API key.

The token is optional: an account linked with its API key alone is stored exactly as before (the key
is the sealed `Credentials`); with a token, the two are sealed as one JSON document. Mollie's
dashboard creates the token under Developers > Organization access tokens, with the scopes
`settlements.read`, `payments.read` and `refunds.read`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from payorch.providers.base import Credentials, CredentialsRejected
from payorch.values.secretbox import key_fingerprint

# The SDK's own rules, checked before the SDK sees a value: its error would quote it.
API_KEY: Final = re.compile(r"(live|test)_\w+")
ORGANIZATION_TOKEN: Final = re.compile(r"access_\w+")

KEY_FORMAT: Final = (
    "An API key from Mollie's dashboard: test_... in test mode (live_... takes real payments)."
)
# The linking request's credential fields, with their form as the console shows it.
CREDENTIAL_FIELDS: Final[Mapping[str, str]] = {
    "apiKey": KEY_FORMAT,
    "organizationToken": "Optional, for reconciliation only: an organization access token (access_...) "
    "from Mollie's dashboard (Developers > Organization access tokens) with the scopes settlements.read, "
    "payments.read and refunds.read. Without it payorch takes payments as usual but cannot read what "
    "Mollie settled.",
}
OPTIONAL_FIELDS: Final = frozenset({"organizationToken"})


@dataclass(frozen=True)
class MollieAccount:
    """An account's credentials, opened for a call. Never logged, never in an error message."""

    api_key: str
    organization_token: str | None = None

    def __repr__(self) -> str:  # a stray log line shows nothing of either
        return f"MollieAccount(api_key={key_fingerprint(self.api_key)!r})"

    def sealed_form(self) -> Credentials:
        """The one `Credentials` payorch seals: the API key alone, or both as canonical JSON."""
        if self.organization_token is None:
            return Credentials(api_key=self.api_key)
        document = {"apiKey": self.api_key, "organizationToken": self.organization_token}
        return Credentials(api_key=json.dumps(document, sort_keys=True, separators=(",", ":")))


def opened(credentials: Credentials) -> MollieAccount:
    """The account `credentials` seal (an API key alone, or the JSON document of both)."""
    if not credentials.api_key.startswith("{"):
        return MollieAccount(api_key=credentials.api_key)
    try:
        document = json.loads(credentials.api_key)
        return MollieAccount(
            api_key=str(document["apiKey"]), organization_token=str(document["organizationToken"])
        )
    except (ValueError, KeyError, TypeError):
        return MollieAccount(api_key="")  # not Mollie's: every call refuses it (`adapter._run`)


def account_from_fields(fields: Mapping[str, str]) -> MollieAccount:
    """The account the linking request's `credentials` describe; `CredentialsRejected` naming the
    API key when it is missing, or the token when it is not of Mollie's form. The key's own form is
    checked with the key (`MollieProvider.validate_credentials`), as when it was the only field."""
    api_key, token = fields.get("apiKey") or "", fields.get("organizationToken") or None
    if not api_key:
        raise CredentialsRejected("apiKey is required", fields=("apiKey",))
    if token is not None and not ORGANIZATION_TOKEN.fullmatch(token):
        raise CredentialsRejected(
            "Mollie organization access tokens start with access_", fields=("organizationToken",)
        )
    return MollieAccount(api_key=api_key, organization_token=token)
