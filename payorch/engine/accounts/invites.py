"""Invite tokens, made by operators (`payorch invite`): a one-time signup link for one merchant,
bound to the e-mail address it was made for (only that address may sign up with it)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import EmailStr, TypeAdapter

from payorch.config import ServerSettings, Settings
from payorch.engine.accounts.identifiers import canonical_identifier
from payorch.storage import accounts, nodes
from payorch.storage.database import Database
from payorch.values.clock import SYSTEM_CLOCK, Clock
from payorch.values.secrets import new_invite_token, token_hash


@dataclass(frozen=True)
class Invite:
    token: str
    signup_url: str
    expires_at: datetime


@functools.cache
def _email_address() -> TypeAdapter[str]:
    """E-mail validation, built at the first invite: its imports take tens of milliseconds."""
    return TypeAdapter(EmailStr)


def invited_email(email: str) -> str:
    """`email` as a signup's admin e-mail is stored (canonical form, the domain in lower case), so
    that the signup of that address matches it; `ValueError` for a string that is not an address."""
    return _email_address().validate_python(canonical_identifier(email))


async def signup_link_base(db: Database, server: ServerSettings) -> str:
    """Where a signup link made outside the server (`payorch invite`) leads: `server.public_base_url`
    when the configuration sets it; when it only follows `server.bind`, the one the newest `payorch
    serve` alive on `db` serves at, which may run with other `PAYORCH_*` variables (say, another
    port); with none alive, the one that follows `server.bind` after all."""
    if not server.public_base_url_follows_bind:
        return server.public_base_url
    served = await db.autocommit(nodes.live_public_base_urls)
    return served[0] if served else server.public_base_url


async def issue_invite(
    db: Database,
    settings: Settings,
    email: str,
    *,
    public_base_url: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Invite:
    """Store the hash of a new token valid for `signup.invite_ttl_s` from `clock`'s now, for a signup
    of `email` only; the token is returned once, in a link under `public_base_url` (default:
    `server.public_base_url`)."""
    token = new_invite_token()
    expires_at = clock.now() + timedelta(seconds=settings.signup.invite_ttl_s)
    await db.transaction(
        accounts.create_invite,
        token_hash=token_hash(token),
        email=invited_email(email),
        expires_at=expires_at,
    )
    base = settings.server.public_base_url if public_base_url is None else public_base_url
    signup_url = f"{base}/api/v1/merchants/signup?token={token}"
    return Invite(token=token, signup_url=signup_url, expires_at=expires_at)
