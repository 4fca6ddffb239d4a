"""Invitations of more users to a merchant, made by one of its admins: a one-time signup link for
one e-mail address, with the role the user will have (`values.roles.Role`).

payorch sends no e-mail: the admin hands the link on, as an operator does with `payorch invite`. A
link holds for `signup.invite_ttl_s`; a newer invitation of the same address to the same merchant
ends the older; only its token's hash is stored. Opened in a browser, the link is the console's page
where the invited user chooses their name and password (`http/console/join.py`); the API's POST of
the same address does the same for a client."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from payorch.config import Settings
from payorch.engine.accounts.invites import invited_email
from payorch.storage import users
from payorch.storage.database import Database
from payorch.storage.users import UserInvite
from payorch.values.clock import Clock
from payorch.values.roles import Role
from payorch.values.secrets import new_invite_token, token_hash

JOIN_PATH = "/api/v1/users/signup"


@dataclass(frozen=True)
class IssuedUserInvite:
    invite: UserInvite
    token: str
    signup_url: str


async def issue_user_invite(
    db: Database,
    settings: Settings,
    clock: Clock,
    *,
    merchant_id: uuid.UUID,
    invited_by: uuid.UUID,
    email: str,
    role: Role,
) -> IssuedUserInvite:
    """Store the hash of a new token valid for `signup.invite_ttl_s` from `clock`'s now, for `email`
    (`ValueError` for a string that is not an address) to become a user of the merchant with
    `role`; the token is returned once, in a link under `server.public_base_url`. `AccountExists`
    when the address is a user of this merchant already."""
    token = new_invite_token()
    now = clock.now()
    invite = await db.transaction(
        users.create_invite,
        merchant_id=merchant_id,
        email=invited_email(email),
        role=role,
        invited_by=invited_by,
        token_hash=token_hash(token),
        now=now,
        expires_at=now + timedelta(seconds=settings.signup.invite_ttl_s),
    )
    signup_url = f"{settings.server.public_base_url}{JOIN_PATH}?token={token}"
    return IssuedUserInvite(invite=invite, token=token, signup_url=signup_url)
