"""The page a password reset link opens (`payorch reset-password` prints it), and its form.

    GET  /console/reset-password?token=...   the page: for which e-mail the link was made and until
                                             when, the new password asked twice
    POST /console/reset-password?token=...   the form: the password set, the admin signed in

A link that is unknown, used, replaced by a newer one or expired says so instead of showing a form.
The new password follows signup's rules (`NewPassword`) and is hashed in a password hashing turn;
the form is charged to the client address's login budget first (`http.login_gate`), and its CSRF
token is the sign-in form's (a double-submit cookie). Setting the password spends the link and ends
every access token of the admin (a stolen session ends with the old password), then signs them in
with a new one as the console's session cookie.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from quart import Response, request, url_for

from payorch.engine.accounts.passwords import PASSWORD_MIN_LENGTH
from payorch.http import login_gate
from payorch.http.console.kit import (
    SESSION_COOKIE,
    blueprint,
    check_csrf,
    delete_cookie,
    field_errors,
    read_form,
    see_other,
    set_cookie,
    text_fields,
    validated,
)
from payorch.http.console.sign_in import SIGN_IN_COOKIE
from payorch.http.console.sign_up import before_sign_in_page, time_left
from payorch.http.models import NewPassword
from payorch.http.operations import password_resets
from payorch.http.services import services
from payorch.storage.password_resets import ResetState
from payorch.values import errors as domain

RESET_FORM_MAX_BYTES = 8 * 1024

# Why a link shows no form, and the page's status.
REFUSALS = {
    ResetState.UNKNOWN: (404, "This link is not one payorch made: check that it was copied whole."),
    ResetState.USED: (410, "This link was used already: ask your payorch operator for a new one."),
    ResetState.REPLACED: (
        410,
        "A newer link was made for this account since this one: use the newer, or ask your payorch "
        "operator for another.",
    ),
    ResetState.EXPIRED: (410, "This link has expired: ask your payorch operator for a new one."),
}


class _NewPassword(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    password: NewPassword


async def _reset_page(
    status: int, *, token: str, errors: dict[str, str] | None = None, state: ResetState | None = None
) -> Response:
    """The page: the form for a usable link, else why there is none (`state`, when already known)."""
    link = await password_resets.open_reset(services(), token)
    state = state or link.state
    refused = None
    if state is not ResetState.OPEN:
        status, refused = REFUSALS[state]
    return await before_sign_in_page(
        "console/reset_password.html",
        status,
        title="Choose a new password",
        token=token,
        link=link,
        expires_in=time_left(link.expires_at, services().context.clock.now()) if link.expires_at else None,
        refused=refused,
        errors=errors or {},
        password_min_length=PASSWORD_MIN_LENGTH,
    )


@blueprint.get("/reset-password")
async def reset_password() -> Response:
    return await _reset_page(200, token=request.args.get("token", ""))


@blueprint.post("/reset-password")
async def reset_password_submitted() -> Response:
    token = request.args.get("token", "")
    await login_gate.charge_login(services(), request)
    form = await read_form(RESET_FORM_MAX_BYTES)
    check_csrf(form, request.cookies.get(SIGN_IN_COOKIE))
    try:
        fields = text_fields(form, ("password", "passwordAgain"))
        data = validated(_NewPassword, {"password": fields["password"]})
        if fields["passwordAgain"] != data.password:
            raise domain.InvalidInput(
                "the passwords differ",
                [domain.FieldProblem("passwordAgain", "is not the same as the password above")],
            )
        done = await password_resets.reset_password(services(), token, data.password)
    except domain.InvalidInput as error:
        return await _reset_page(400, token=token, errors=field_errors(error))
    if isinstance(done, ResetState):
        return await _reset_page(410, token=token, state=done)
    response = see_other(url_for("console.applications"))
    set_cookie(response, SESSION_COOKIE, done, max_age=services().context.settings.auth.jwt_ttl_s)
    delete_cookie(response, SIGN_IN_COOKIE)
    return response
