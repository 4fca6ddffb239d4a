"""Invite tokens, made by operators (`payorch invite`): a one-time signup link for one merchant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from payorch.config import Settings
from payorch.storage import accounts
from payorch.storage.database import Database
from payorch.values.clock import SYSTEM_CLOCK, Clock
from payorch.values.secrets import new_invite_token, token_hash


@dataclass(frozen=True)
class Invite:
    token: str
    signup_url: str
    expires_at: datetime


async def issue_invite(
    db: Database, settings: Settings, email: str, *, clock: Clock = SYSTEM_CLOCK
) -> Invite:
    """Store the hash of a new token valid for `signup.invite_ttl_s` from `clock`'s now; the token is
    returned once."""
    token = new_invite_token()
    expires_at = clock.now() + timedelta(seconds=settings.signup.invite_ttl_s)
    await db.transaction(
        accounts.create_invite, token_hash=token_hash(token), email=email, expires_at=expires_at
    )
    signup_url = f"{settings.server.public_base_url}/api/v1/merchants/signup?token={token}"
    return Invite(token=token, signup_url=signup_url, expires_at=expires_at)
