"""The users of a merchant: listing them, an admin inviting more (each with a role), changing a
user's role, removing a user, and an invited user's signup. What the API's `/api/v1/merchants/me/...`
and `/api/v1/users/signup` routes and the console's Users page both call.

Who may call which is not decided here: a read-only user never reaches a change
(`http.auth.permit_role` refuses them first); every call is scoped to the principal's merchant, and
another merchant's user or invitation is as absent as one that never was (404)."""

from __future__ import annotations

import uuid

from payorch.engine.accounts.access_tokens import AccessClaims
from payorch.engine.accounts.user_invites import IssuedUserInvite, issue_user_invite
from payorch.http.auth import Principal, parse_id
from payorch.http.models import UserInviteRequest, UserRoleRequest, UserSignupRequest
from payorch.http.operations import accounts
from payorch.http.services import Services
from payorch.storage import users
from payorch.storage.users import USER_EXISTS, OpenUserInvite, User, UserInvite
from payorch.values.errors import AccountExists, FieldProblem, InvalidInput
from payorch.values.pagination import PageRequest
from payorch.values.roles import Role
from payorch.values.secrets import token_hash


def _user_id(principal: Principal) -> uuid.UUID:
    if principal.user_id is None:  # the routes take access tokens only
        raise AssertionError("a merchant's users are managed with an access token")
    return principal.user_id


async def list_users(services: Services, principal: Principal, page: PageRequest) -> tuple[list[User], int]:
    """The merchant's users, newest first."""
    return await services.context.db.snapshot(users.list_users, principal.merchant_id, page)


async def list_invites(
    services: Services, principal: Principal, page: PageRequest
) -> tuple[list[UserInvite], int]:
    """The merchant's invitations neither used, revoked nor replaced yet (an expired one too, until
    it is replaced or revoked), newest first."""
    return await services.context.db.snapshot(users.list_open_invites, principal.merchant_id, page)


async def invite_user(services: Services, principal: Principal, data: UserInviteRequest) -> IssuedUserInvite:
    """A one-time signup link for `data.email` to become a user of the principal's merchant with
    `data.role`: `AccountExists` when the address is one of its users already."""
    context = services.context
    try:
        return await issue_user_invite(
            context.db,
            context.settings,
            context.clock,
            merchant_id=principal.merchant_id,
            invited_by=_user_id(principal),
            email=str(data.email),
            role=Role(data.role),
        )
    except ValueError as error:  # unreachable after the model's check; said plainly all the same
        raise InvalidInput("validation failed", [FieldProblem("email", str(error))]) from None


async def find_user(services: Services, principal: Principal, user_id: str) -> User:
    """A user of the principal's merchant: `NotFound` for anyone else."""
    return await services.context.db.autocommit(
        users.find_user, merchant_id=principal.merchant_id, user_id=parse_id(user_id, "user")
    )


async def change_role(services: Services, principal: Principal, user_id: str, data: UserRoleRequest) -> User:
    """Give the merchant's user `data.role`: `NotFound`, or `LastAdmin` for a demotion of its last
    admin."""
    return await services.context.db.transaction(
        users.change_role,
        merchant_id=principal.merchant_id,
        user_id=parse_id(user_id, "user"),
        role=Role(data.role),
    )


async def remove_user(services: Services, principal: Principal, user_id: str) -> None:
    """Remove the merchant's user, ending every access token of theirs: `NotFound`, or `LastAdmin`
    for its last admin."""
    await services.context.db.transaction(
        users.remove_user, merchant_id=principal.merchant_id, user_id=parse_id(user_id, "user")
    )


async def revoke_invite(services: Services, principal: Principal, invite_id: str) -> None:
    """End an open invitation of the merchant: its link is refused from then on; `NotFound` else."""
    await services.context.db.autocommit(
        users.revoke_invite,
        merchant_id=principal.merchant_id,
        invite_id=parse_id(invite_id, "invite"),
        now=services.context.clock.now(),
    )


async def open_invite(services: Services, token: str) -> OpenUserInvite:
    """The invitation `token` as its signup page shows it, when it may still be used:
    `InviteInvalid` or `InviteUsedOrExpired` else."""
    context = services.context
    return await context.db.autocommit(
        users.open_invite, token_hash=token_hash(token), now=context.clock.now()
    )


async def join(services: Services, token: str, data: UserSignupRequest) -> tuple[User, str]:
    """Use the invitation `token` once: its e-mail becomes a user of its merchant with its role,
    named and with the password of `data`. The user, and an access token signing them in.
    `InviteInvalid` or `InviteUsedOrExpired` (checked before the password is hashed), `ServiceBusy`
    when every password hashing turn is taken, `AccountExists` when the e-mail is a user of payorch
    already (the invitation is spent, as by a signup)."""
    context = services.context
    await open_invite(services, token)  # checked again under the invitation's lock
    with services.passwords.turn() as turn:
        password_hash = await turn.hash(data.password)
    now = context.clock.now()
    joined = await context.db.transaction(
        users.join,
        token_hash=token_hash(token),
        password_hash=password_hash,
        first_name=data.firstName,
        last_name=data.lastName,
        now=now,
    )
    if joined is None:  # the invitation is spent all the same (`users.join`)
        raise AccountExists(USER_EXISTS)
    user = User(
        id=joined.user_id,
        email=joined.email,
        first_name=data.firstName,
        last_name=data.lastName,
        role=joined.role,
        created_at=now,
    )
    claims = AccessClaims(
        user_id=joined.user_id, merchant_id=joined.merchant_id, session_version=joined.session_version
    )
    return user, accounts.access_token(services, claims)
