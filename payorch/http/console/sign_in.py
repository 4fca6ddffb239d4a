"""Signing in and out of the console.

    GET  /console/sign-in, POST /console/sign-in    e-mail and password, as `POST /api/v1/auth/login`
    POST /console/sign-out                          as `POST /api/v1/auth/logout`

Sign-in runs the checks of the API's login (`operations/accounts.py`); its form's CSRF token is a
random value also set as a cookie (double submit), since there is no session yet to derive it from.
Sign-out ends the session's access token, and every other of its admin
(`operations.accounts.end_admin_sessions`), so a copy of the cookie, or its token used as a Bearer
token, answers 401 from then on.
"""

from __future__ import annotations

import re
import secrets
from urllib.parse import urlsplit

from quart import Response, render_template, request, url_for
from werkzeug.datastructures import MultiDict

from payorch.http import login_gate
from payorch.http.auth import open_to_read_only
from payorch.http.console.kit import (
    COOKIE_PATH,
    SESSION_COOKIE,
    Session,
    action,
    blueprint,
    check_csrf,
    delete_cookie,
    field_errors,
    read_form,
    see_other,
    set_cookie,
    signed_out,
    text_fields,
    validated,
)
from payorch.http.models import LoginRequest
from payorch.http.operations import accounts
from payorch.http.services import services
from payorch.values import errors as domain

SIGN_IN_COOKIE = "payorch_console_sign_in"  # the CSRF token of the sign-in form (double submit)
SIGN_IN_TOKEN_LIFETIME_S = 3600
_SIGN_IN_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")

# --- Sign-in and sign-out ----------------------------------------------------------------------


def sign_in_token() -> str:
    """The sign-in form's CSRF token: the browser's `SIGN_IN_COOKIE` when it has a well-formed one,
    else a new random one (set as the cookie by `_sign_in_form`)."""
    held = request.cookies.get(SIGN_IN_COOKIE, "")
    return held if _SIGN_IN_TOKEN.fullmatch(held) else secrets.token_urlsafe(32)


def next_page(value: str | None) -> str | None:
    """`value` when it is a page of the console on this host, written in printable ASCII without
    spaces (what a URL's path and query are), else None: signing in never sends the browser anywhere
    else, and nothing a client wrote reaches the `Location` header but a URL."""
    if not value or "\\" in value or not value.startswith(COOKIE_PATH + "/"):
        return None
    if not all("!" <= character <= "~" for character in value):
        return None
    parts = urlsplit(value)
    return None if parts.scheme or parts.netloc else value


async def _sign_in_form(
    status: int,
    *,
    email: str = "",
    next_to: str | None = None,
    message: str | None = None,
    errors: dict[str, str] | None = None,
) -> Response:
    token = sign_in_token()
    html = await render_template(
        "console/sign_in.html",
        title="Sign in",
        csrf_token=None,
        sign_in_token=token,
        next_page=next_to,
        email=email,
        message=message,
        errors=errors or {},
    )
    response = Response(html, status=status, content_type="text/html; charset=utf-8")
    set_cookie(response, SIGN_IN_COOKIE, token, max_age=SIGN_IN_TOKEN_LIFETIME_S)
    return response


@blueprint.get("")
@blueprint.get("/")
async def home() -> Response:
    return see_other(url_for("console.applications"))


@blueprint.get("/sign-in")
async def sign_in() -> Response:
    return await _sign_in_form(200, next_to=next_page(request.args.get("next")))


@blueprint.post("/sign-in")
async def sign_in_submitted() -> Response:
    """The checks of `POST /api/v1/auth/login`: the address's bucket charged first, the account's
    failed logins, the password; on success the API's access token becomes the session cookie."""
    await login_gate.charge_login(services(), request)
    form = await read_form()
    check_csrf(form, request.cookies.get(SIGN_IN_COOKIE))
    email = form.get("email", "")
    next_to = next_page(form.get("next"))
    try:
        fields = text_fields(form, ("email", "password"))
        data = validated(LoginRequest, fields)
        token = await accounts.admin_access_token(services(), data, request.remote_addr)
    except domain.InvalidInput as error:
        return await _sign_in_form(400, email=email, next_to=next_to, errors=field_errors(error))
    except domain.InvalidLogin as error:
        return await _sign_in_form(401, email=email, next_to=next_to, message=error.message)
    response = see_other(next_to or url_for("console.applications"))
    set_cookie(response, SESSION_COOKIE, token, max_age=services().context.settings.auth.jwt_ttl_s)
    delete_cookie(response, SIGN_IN_COOKIE)
    return response


@blueprint.post("/sign-out")
@action
@open_to_read_only
async def sign_out(session: Session, form: MultiDict[str, str]) -> Response:
    await accounts.end_admin_sessions(services(), session.principal)
    return signed_out()
