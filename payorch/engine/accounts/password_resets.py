"""Password reset links, made by operators (`payorch reset-password`): a one-time link for an admin
who has lost their password. payorch sends no e-mail: the operator hands the link on.

A link holds for `auth.password_reset_ttl_s`; a newer one for the same admin ends the older; only
its token's hash is stored. Using it (the console's page, `http/console/reset_password.py`) sets the
new password and ends every access token of the admin, as a sign-out does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from payorch.config import Settings
from payorch.engine.accounts.identifiers import canonical_identifier
from payorch.storage import password_resets
from payorch.storage.database import Database
from payorch.values.clock import SYSTEM_CLOCK, Clock
from payorch.values.secrets import new_invite_token, token_hash

RESET_PATH = "/console/reset-password"


class NoSuchAdmin(LookupError):
    """No admin user has the e-mail a reset link was asked for."""


@dataclass(frozen=True)
class PasswordReset:
    token: str
    reset_url: str
    expires_at: datetime


async def issue_password_reset(
    db: Database,
    settings: Settings,
    email: str,
    *,
    public_base_url: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> PasswordReset:
    """Store the hash of a new token valid for `auth.password_reset_ttl_s` from `clock`'s now, for
    the admin whose e-mail is `email` (whatever its letter case), ending the admin's earlier links;
    the token is returned once, in a link under `public_base_url` (default:
    `server.public_base_url`). `NoSuchAdmin`, storing nothing, when no admin has that e-mail."""
    token = new_invite_token()
    now = clock.now()
    expires_at = now + timedelta(seconds=settings.auth.password_reset_ttl_s)
    made = await db.transaction(
        password_resets.create_reset,
        email=canonical_identifier(email),
        token_hash=token_hash(token),
        expires_at=expires_at,
        now=now,
    )
    if not made:
        raise NoSuchAdmin(f"no admin user has the e-mail {email!r}")
    base = settings.server.public_base_url if public_base_url is None else public_base_url
    return PasswordReset(token=token, reset_url=f"{base}{RESET_PATH}?token={token}", expires_at=expires_at)
