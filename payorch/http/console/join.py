"""The page an invitation of a merchant's admin opens in a browser, and its form: the invited user
chooses a name and a password and becomes a user of the merchant with the invitation's role.

    GET  /api/v1/users/signup?token=...   the page (the invitation's `signupUrl`; the API's POST of
                                           the same address stays as it is)
    POST /console/join?token=...           the form: the user made, signed in

The machinery of the merchant's signup page (`sign_up.py`): the invitation's e-mail and expiry said
plainly, an unusable one says why instead of a form, the fields named as in the API's body
(`UserSignupRequest`) with their messages, the client address's login budget charged first, the
sign-in form's CSRF token (a double-submit cookie). It asks nothing of the merchant: it exists.
"""

from __future__ import annotations

from pydantic import ValidationError
from quart import Response, request, url_for
from quart_schema import hide

from payorch.engine.accounts.passwords import PASSWORD_MIN_LENGTH
from payorch.http import login_gate
from payorch.http.console.kit import SESSION_COOKIE, blueprint, check_csrf, read_form, see_other, set_cookie
from payorch.http.console.sign_in import SIGN_IN_COOKIE
from payorch.http.console.sign_up import before_sign_in_page, form_errors, time_left
from payorch.http.models import UserSignupRequest
from payorch.http.operations import users
from payorch.http.services import services
from payorch.values import errors as domain

JOIN_FORM_MAX_BYTES = 8 * 1024

# The form's fields, in the order the page asks them: the name is the body's.
FIELDS = (("firstName", "Your first name"), ("lastName", "Your last name"), ("password", "Password"))
# What each role may do, and the role named in a sentence ("invited ... as read-only (...)").
ROLE_DUTIES = {
    "admin": "everything, inviting users included",
    "read_only": "every page, but no refund, no change and no secret",
}
ROLE_WORDS = {
    "admin": f"an admin ({ROLE_DUTIES['admin']})",
    "read_only": f"read-only ({ROLE_DUTIES['read_only']})",
}


async def _join_page(
    status: int,
    *,
    token: str,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    message: str | None = None,
) -> Response:
    """The page: the form for a usable invitation, else why there is none."""
    invite, refused = None, None
    try:
        invite = await users.open_invite(services(), token)
    except domain.InviteInvalid:
        refused, status = "This invitation link is not one payorch made: check that it was copied whole.", 404
    except domain.InviteUsedOrExpired:
        refused, status = (
            "This invitation was used, revoked or has expired: ask an admin of the merchant for a new one.",
            410,
        )
    return await before_sign_in_page(
        "console/join.html",
        status,
        title="Join a merchant",
        token=token,
        invite=invite,
        role_words=ROLE_WORDS,
        expires_in=time_left(invite.expires_at, services().context.clock.now()) if invite else None,
        refused=refused,
        message=message,
        fields=FIELDS,
        values=values or {},
        errors=errors or {},
        password_min_length=PASSWORD_MIN_LENGTH,
    )


@hide
async def join_page() -> Response:
    """`GET /api/v1/users/signup?token=...`: the invitation's link, opened in a browser."""
    return await _join_page(200, token=request.args.get("token", ""))


@blueprint.post("/join")
async def join_submitted() -> Response:
    token = request.args.get("token", "")
    await login_gate.charge_login(services(), request)
    form = await read_form(JOIN_FORM_MAX_BYTES)
    check_csrf(form, request.cookies.get(SIGN_IN_COOKIE))
    values = {name: form.get(name, "") for name, _ in FIELDS}
    shown = {name: value for name, value in values.items() if name != "password"}
    try:
        data = UserSignupRequest.model_validate(values)
        _, access = await users.join(services(), token, data)
    except (ValidationError, domain.InvalidInput) as error:
        return await _join_page(400, token=token, values=shown, errors=form_errors(error))
    except (domain.InviteInvalid, domain.InviteUsedOrExpired):
        return await _join_page(410, token=token)
    except domain.AccountExists as error:
        return await _join_page(409, token=token, values=shown, message=error.message)
    response = see_other(url_for("console.applications"))
    set_cookie(response, SESSION_COOKIE, access, max_age=services().context.settings.auth.jwt_ttl_s)
    return response
