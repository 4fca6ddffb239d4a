"""Merchants' accounts: signup by invitation, an admin's login (the checks behind the API's
`POST /api/v1/auth/login` and the console's sign-in) and the end of every access token of an admin
(the API's logout, the console's sign-out)."""

from __future__ import annotations

from payorch.engine.accounts.access_tokens import AccessClaims, issue_access_token
from payorch.http.auth import Principal
from payorch.http.models import LoginRequest, SignupRequest
from payorch.http.services import Services
from payorch.storage import accounts as accounts_store
from payorch.values.errors import AccountExists, InvalidLogin
from payorch.values.secrets import token_hash


async def admin_access_token(services: Services, data: LoginRequest, address: str | None) -> str:
    """The access token (JWT) of the admin whose e-mail and password `data` holds, asked from the
    client `address`: `ServiceBusy` (503) when every password hashing turn is taken, before
    anything else; `RateLimited` when the account has used up its failed logins and this address
    group its own while they are (`RequestLimits.count_login_attempt`); `InvalidLogin` (counted)
    when the e-mail or the password is wrong. The one check behind the API's login and the
    console's sign-in; the caller charges the client address first (`http.login_gate`). The
    attempt is counted as a failure before the password is checked and forgiven once it is right,
    so attempts at once cannot pass the account's limit together. A password hashed with other
    parameters than today's is hashed anew and stored once it is verified."""
    account = data.email.lower()  # logins compare e-mails without regard to case
    limits, context = services.limits, services.context
    # Read before the turn is taken: a turn is held for the hash, not for a database round trip.
    found = await context.db.autocommit(accounts_store.find_login, data.email)
    with services.passwords.turn() as turn:
        counted = await limits.count_login_attempt(account, address)
        if not await turn.verify(data.password, found.password_hash if found else None) or found is None:
            raise InvalidLogin("e-mail or password is incorrect")
        rehashed = await turn.rehash(data.password, found.password_hash)
    await limits.forgive_login_attempt(counted)
    if rehashed is not None:
        await context.db.autocommit(
            accounts_store.replace_password_hash, found.user_id, found.password_hash, rehashed
        )
    return access_token(
        services,
        AccessClaims(
            user_id=found.user_id, merchant_id=found.merchant_id, session_version=found.session_version
        ),
    )


def access_token(services: Services, claims: AccessClaims) -> str:
    """A new access token (JWT) carrying `claims`, valid `auth.jwt_ttl_s` from now."""
    context = services.context
    settings = context.settings
    return issue_access_token(
        claims, secret=settings.auth.jwt_secret, ttl_s=settings.auth.jwt_ttl_s, now=context.clock.now()
    )


async def end_admin_sessions(services: Services, principal: Principal) -> None:
    """Sign the principal's admin out everywhere: every access token issued to them until now is
    refused from then on (a principal of an API key has no admin: nothing changes)."""
    if principal.user_id is not None:
        await services.context.db.autocommit(accounts_store.end_sessions, principal.user_id)


async def open_invite(services: Services, token: str) -> accounts_store.OpenInvite:
    """The invite `token` as its signup page shows it (its e-mail, its expiry), when it may still be
    used: `InviteInvalid` or `InviteUsedOrExpired` else."""
    return await services.context.db.autocommit(
        accounts_store.open_invite, token_hash=token_hash(token), now=services.context.clock.now()
    )


async def sign_up(services: Services, token: str, data: SignupRequest) -> None:
    """Create the merchant and its admin user `data` describes with the one-time invite `token`:
    `InviteInvalid` or `InviteUsedOrExpired` for an invite that cannot be used (checked before the
    password is hashed), `InvalidInput` for an admin e-mail the invite was not made for (the invite
    stays usable), `ServiceBusy` when every password hashing turn is taken, `AccountExists` when the
    admin e-mail or the company registration number is registered already (the invite is spent as
    by a signup)."""
    db, clock = services.context.db, services.context.clock
    # A bad token is answered before the password is hashed; `accounts_store.sign_up` checks it again
    # under its lock.
    await db.autocommit(
        accounts_store.check_invite,
        token_hash=token_hash(token),
        now=clock.now(),
        admin_email=str(data.admin.email),
    )
    with services.passwords.turn() as turn:
        password_hash = await turn.hash(data.admin.password)
    account = accounts_store.NewAccount(
        organization=data.organization.model_dump(mode="json"),
        admin_email=str(data.admin.email),
        admin_password_hash=password_hash,
        admin_first_name=data.admin.firstName,
        admin_last_name=data.admin.lastName,
    )
    signed_up = await db.transaction(
        accounts_store.sign_up,
        token_hash=token_hash(token),
        account=account,
        now=clock.now(),
    )
    if signed_up is None:  # the invite is spent all the same (`accounts_store.sign_up`)
        raise AccountExists(accounts_store.ACCOUNT_EXISTS)
