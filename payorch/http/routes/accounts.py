"""Merchant signup by invitation, login and logout."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter
from quart import Blueprint, Response, request
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.engine.accounts.access_tokens import AccessClaims, issue_access_token
from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, authenticated
from payorch.http.models import LoginRequest, SignupQuery, SignupRequest
from payorch.http.services import services
from payorch.http.validation import View, body_limit, validate_querystring, validate_request
from payorch.storage import accounts as accounts_store
from payorch.values.errors import AccountExists, InvalidLogin, InviteInvalid
from payorch.values.secrets import token_hash

blueprint = Blueprint("accounts", __name__, url_prefix="/api/v1")
tag_blueprint(blueprint, ["Accounts"])

# Room for every valid body even with each character sent as a \u escape, and not much more.
LOGIN_MAX_BODY_BYTES = 8 * 1024
SIGNUP_MAX_BODY_BYTES = 64 * 1024


@functools.cache
def _signup_response() -> TypeAdapter[bodies.SignupResponse]:
    """The signup answer holds the validated organization model: its type writes it as JSON. Built
    at the first signup, not at import: tens of milliseconds of each process's start, email
    validation's imports included."""
    return TypeAdapter(bodies.SignupResponse)


def _charged_per_address(view: View[Any]) -> View[Any]:
    """A login or signup: the client address's bucket is charged before anything else, the body's
    reading above all, so that bodies refused as too large, too deep or malformed count too."""

    @functools.wraps(view)
    async def charged(*args: Any, **kwargs: Any) -> Any:
        await charge_login_attempt()
        return await view(*args, **kwargs)

    return charged


async def charge_login_attempt() -> None:
    """Count one login or signup attempt against the client address's bucket (`RateLimited` when it
    is empty). Login through the API and the console's sign-in share it."""
    await services().limits.charge_login(request.remote_addr)


async def admin_access_token(data: LoginRequest) -> str:
    """The access token (JWT) of the admin whose e-mail and password `data` holds: `ServiceBusy`
    (503) when every password hashing turn is taken, before anything else; `RateLimited` when the
    account has used up its failed logins and this address group its own while they are
    (`RequestLimits.count_login_attempt`); `InvalidLogin` (counted) when the e-mail or the password
    is wrong. The one check behind the API's login and the console's sign-in; the caller charges the
    client address first (`charge_login_attempt`). The attempt is counted as a failure before the
    password is checked and forgiven once it is right, so attempts at once cannot pass the
    account's limit together."""
    account = data.email.lower()  # logins compare e-mails without regard to case
    limits = services().limits
    # Read before the turn is taken: a turn is held for the hash, not for a database round trip.
    found = await services().context.db.autocommit(accounts_store.find_login, data.email)
    with services().passwords.turn() as turn:
        counted = await limits.count_login_attempt(account, request.remote_addr)
        if not await turn.verify(data.password, found.password_hash if found else None) or found is None:
            raise InvalidLogin("e-mail or password is incorrect")
    await limits.forgive_login_attempt(counted)
    settings = services().context.settings
    return issue_access_token(
        AccessClaims(
            user_id=found.user_id, merchant_id=found.merchant_id, session_version=found.session_version
        ),
        secret=settings.auth.jwt_secret,
        ttl_s=settings.auth.jwt_ttl_s,
        now=services().context.clock.now(),
    )


@blueprint.post("/merchants/signup")
@security_scheme(api.NO_CREDENTIALS)
@document_response(bodies.SignupResponse, 201)
@api.errors(400, 409, 410, 413, 429, 500, 503)
@_charged_per_address  # signup and login share one bucket per address
@body_limit(SIGNUP_MAX_BODY_BYTES)
@validate_querystring(SignupQuery)
@validate_request(SignupRequest)
async def sign_up(data: SignupRequest, query_args: SignupQuery) -> tuple[dict[str, Any], int]:
    """Create a merchant and its admin user with a one-time invite token.

    The invite is bound to the e-mail it was made for: a signup for another admin e-mail is 400
    (`admin.email`), whether or not that address is registered, and leaves the invite usable. A 409
    (the admin e-mail or the company registration number is registered already; it does not say
    which) spends the invite as a 201 does."""
    if not query_args.token:
        raise InviteInvalid("query parameter 'token' (the invite token of the signup link) is required")
    db, clock = services().context.db, services().context.clock
    # A bad token is answered before the password is hashed; `sign_up` checks it again under its lock.
    await db.autocommit(
        accounts_store.check_invite,
        token_hash=token_hash(query_args.token),
        now=clock.now(),
        admin_email=str(data.admin.email),
    )
    with services().passwords.turn() as turn:
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
        token_hash=token_hash(query_args.token),
        account=account,
        now=clock.now(),
    )
    if signed_up is None:  # the invite is spent all the same (`sign_up`)
        raise AccountExists(accounts_store.ACCOUNT_EXISTS)
    body: bodies.SignupResponse = {
        "organization": data.organization,
        "admin": {
            "email": str(data.admin.email),
            "firstName": data.admin.firstName,
            "lastName": data.admin.lastName,
        },
    }
    return _signup_response().dump_python(body, mode="json"), 201


@blueprint.post("/auth/login")
@security_scheme(api.NO_CREDENTIALS)
@document_response(bodies.LoginResponse, 200)
@api.errors(400, 401, 413, 429, 500, 503)
@_charged_per_address  # before the password check too, so guessing is limited, right or wrong
@body_limit(LOGIN_MAX_BODY_BYTES)
@validate_request(LoginRequest)
async def log_in(data: LoginRequest) -> bodies.LoginResponse:
    """Exchange an admin's e-mail and password for an access token (JWT)."""
    token = await admin_access_token(data)
    return {
        "accessToken": token,
        "tokenType": "Bearer",
        "expiresIn": services().context.settings.auth.jwt_ttl_s,
    }


@blueprint.post("/auth/logout")
@security_scheme(api.JWT)
@document_response(api.NoContent, 204)
@api.errors(401, 429, 500)
@authenticated(Accept.JWT)
async def log_out(principal: Principal) -> Response:
    """End the access token: sign its admin out everywhere.

    Every access token issued to the admin until now answers 401 from then on: this one, those of
    their other logins, and the console's session. Log in again for a new one."""
    if principal.user_id is not None:  # always, for a JWT (`Accept.JWT`)
        await services().context.db.autocommit(accounts_store.end_sessions, principal.user_id)
    done = Response(b"", status=204)
    del done.headers["Content-Length"], done.headers["Content-Type"]  # a 204 has neither (RFC 9110, 8.6)
    return done
