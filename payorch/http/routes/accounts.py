"""Merchant signup by invitation, login and logout."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter
from quart import Blueprint, Response, request
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.http import login_gate
from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, authenticated, open_to_read_only
from payorch.http.models import LoginRequest, SignupQuery, SignupRequest
from payorch.http.operations import accounts
from payorch.http.services import services
from payorch.http.validation import View, body_limit, validate_querystring, validate_request
from payorch.values.errors import InviteInvalid

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


def charged_per_address(view: View[Any]) -> View[Any]:
    """A login or signup: the client address's bucket is charged before anything else, the body's
    reading above all, so that bodies refused as too large, too deep or malformed count too."""

    @functools.wraps(view)
    async def charged(*args: Any, **kwargs: Any) -> Any:
        await login_gate.charge_login(services(), request)
        return await view(*args, **kwargs)

    return charged


@blueprint.post("/merchants/signup")
@security_scheme(api.NO_CREDENTIALS)
@document_response(bodies.SignupResponse, 201)
@api.errors(400, 409, 410, 413, 429, 500, 503)
@charged_per_address  # signup and login share one bucket per address
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
    await accounts.sign_up(services(), query_args.token, data)
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
@charged_per_address  # before the password check too, so guessing is limited, right or wrong
@body_limit(LOGIN_MAX_BODY_BYTES)
@validate_request(LoginRequest)
async def log_in(data: LoginRequest) -> bodies.LoginResponse:
    """Exchange an admin's e-mail and password for an access token (JWT)."""
    token = await accounts.admin_access_token(services(), data, request.remote_addr)
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
@open_to_read_only
async def log_out(principal: Principal) -> Response:
    """End the access token: sign its admin out everywhere.

    Every access token issued to the admin until now answers 401 from then on: this one, those of
    their other logins, and the console's session. Log in again for a new one."""
    await accounts.end_admin_sessions(services(), principal)
    done = Response(b"", status=204)
    del done.headers["Content-Length"], done.headers["Content-Type"]  # a 204 has neither (RFC 9110, 8.6)
    return done
