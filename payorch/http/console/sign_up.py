"""The signup page an invite opens in a browser, and its form.

    GET  /api/v1/merchants/signup?token=...   the page (the invite's `signupUrl`; the API's POST
                                               of the same address stays as it is)
    POST /console/sign-up?token=...            the form: the merchant and its admin made, signed in

The page says for which e-mail the invite was made and when it expires, plainly; an invite that is
unknown, used or expired says so instead of showing a form. The form asks what the API's signup
body holds (`SignupRequest`), each field named as in that body (`organization.registeredAddress.city`),
and goes through the API's own operation (`operations.accounts.sign_up`): the same checks, the same
messages, the client address's login budget charged first (`http.login_gate`). On success the admin
is signed in (the API's access token as the console's session cookie) and lands on the console.
Its CSRF token is the sign-in form's (a double-submit cookie), so a page of another site cannot
sign someone up.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError
from quart import Response, render_template, request, url_for
from quart_schema import hide

from payorch.engine.accounts.passwords import PASSWORD_MIN_LENGTH
from payorch.http import login_gate
from payorch.http.console.kit import (
    SESSION_COOKIE,
    blueprint,
    check_csrf,
    read_form,
    see_other,
    set_cookie,
)
from payorch.http.console.sign_in import SIGN_IN_COOKIE, SIGN_IN_TOKEN_LIFETIME_S, sign_in_token
from payorch.http.models import LoginRequest, SignupRequest
from payorch.http.operations import accounts
from payorch.http.services import services
from payorch.values import errors as domain

SIGNUP_FORM_MAX_BYTES = 64 * 1024  # as the API's signup body

# The form's fields, in the order the page asks them: the dotted name is the body's path.
ORGANIZATION_FIELDS = (
    ("organization.legalBusinessName", "Legal business name"),
    ("organization.companyRegistrationNumber", "Company registration number"),
    ("organization.registeredAddress.line1", "Registered address"),
    ("organization.registeredAddress.line2", "Address, second line (optional)"),
    ("organization.registeredAddress.city", "City"),
    ("organization.registeredAddress.state", "State or region"),
    ("organization.registeredAddress.postalCode", "Postal code"),
    ("organization.registeredAddress.country", "Country"),
    ("organization.companyWebsite", "Company website (https://...)"),
    ("organization.industry", "Industry"),
    ("organization.sector", "Sector"),
    ("organization.contactPersonFirstName", "Contact person's first name"),
    ("organization.contactPersonLastName", "Contact person's last name"),
    ("organization.contactPersonEmail", "Contact person's e-mail"),
)
ADMIN_FIELDS = (
    ("admin.firstName", "Your first name"),
    ("admin.lastName", "Your last name"),
    ("admin.email", "Your e-mail (you sign in with it)"),
    ("admin.password", "Password"),
)
_OPTIONAL = frozenset({"organization.registeredAddress.line2"})


def field_id(name: str) -> str:
    """A form field's id: its dotted name with hyphens."""
    return name.replace(".", "-")


def _body(form: dict[str, str]) -> dict[str, Any]:
    """The signup body the form's fields make (dotted names nested); an optional field left empty is
    left out."""
    body: dict[str, Any] = {}
    for name, value in form.items():
        if name in _OPTIONAL and not value.strip():
            continue
        *parents, last = name.split(".")
        place = body
        for parent in parents:
            place = place.setdefault(parent, {})
        place[last] = value
    return body


def form_errors(error: ValidationError | domain.InvalidInput) -> dict[str, str]:
    """Each field's first problem, by the field's id."""
    found: dict[str, str] = {}
    if isinstance(error, domain.InvalidInput):
        for problem in error.details:
            found.setdefault(field_id(problem.field), problem.message)
        return found
    for item in error.errors(include_url=False):
        found.setdefault(field_id(".".join(str(part) for part in item["loc"])), item["msg"])
    return found


async def _signup_page(
    status: int,
    *,
    token: str,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    message: str | None = None,
) -> Response:
    """The page: the form for a usable invite, else why there is none."""
    invite, refused = None, None
    try:
        invite = await accounts.open_invite(services(), token)
    except domain.InviteInvalid:
        refused, status = "This invitation link is not one payorch made: check that it was copied whole.", 404
    except domain.InviteUsedOrExpired:
        refused, status = "This invitation was used already or has expired: ask for a new one.", 410
    now = services().context.clock.now()
    return await before_sign_in_page(
        "console/sign_up.html",
        status,
        title="Sign up",
        token=token,
        invite=invite,
        expires_in=time_left(invite.expires_at, now) if invite else None,
        refused=refused,
        message=message,
        organization_fields=ORGANIZATION_FIELDS,
        admin_fields=ADMIN_FIELDS,
        optional=_OPTIONAL,
        values={"admin.email": invite.email if invite else "", **(values or {})},
        errors=errors or {},
        field_id=field_id,
        password_min_length=PASSWORD_MIN_LENGTH,
    )


async def before_sign_in_page(template: str, status: int, **context: Any) -> Response:
    """A page whose form is sent before anyone is signed in (signup, joining a merchant):
    `template` rendered with `context` and the sign-in form's CSRF token, also set as its cookie
    (double submit)."""
    csrf = sign_in_token()
    html = await render_template(template, csrf_token=None, sign_in_token=csrf, **context)
    response = Response(html, status=status, content_type="text/html; charset=utf-8")
    set_cookie(response, SIGN_IN_COOKIE, csrf, max_age=SIGN_IN_TOKEN_LIFETIME_S)
    return response


def time_left(expires_at: datetime, now: datetime) -> str:
    """How long a link still holds, in words: "in 1 hour 55 minutes", "in 4 minutes"."""
    minutes = max(0, int((expires_at - now).total_seconds() // 60))
    hours, minutes = divmod(minutes, 60)
    parts = ([f"{hours} hour{'' if hours == 1 else 's'}"] if hours else []) + (
        [f"{minutes} minute{'' if minutes == 1 else 's'}"] if minutes or not hours else []
    )
    return "in " + " ".join(parts)


@hide
async def signup_page() -> Response:
    """`GET /api/v1/merchants/signup?token=...`: the invite's link, opened in a browser."""
    return await _signup_page(200, token=request.args.get("token", ""))


@blueprint.post("/sign-up")
async def sign_up_submitted() -> Response:
    token = request.args.get("token", "")
    await login_gate.charge_login(services(), request)
    form = await read_form(SIGNUP_FORM_MAX_BYTES)
    check_csrf(form, request.cookies.get(SIGN_IN_COOKIE))
    names = [name for name, _ in (*ORGANIZATION_FIELDS, *ADMIN_FIELDS)]
    values = {name: form.get(name, "") for name in names}
    shown = {name: value for name, value in values.items() if name != "admin.password"}
    try:
        data = SignupRequest.model_validate(_body(values))
        await accounts.sign_up(services(), token, data)
        login = LoginRequest(email=str(data.admin.email), password=data.admin.password)
        access = await accounts.admin_access_token(services(), login, request.remote_addr)
    except ValidationError as error:
        return await _signup_page(400, token=token, values=shown, errors=form_errors(error))
    except domain.InvalidInput as error:
        return await _signup_page(400, token=token, values=shown, errors=form_errors(error))
    except (domain.InviteInvalid, domain.InviteUsedOrExpired):
        return await _signup_page(410, token=token)
    except domain.AccountExists as error:
        return await _signup_page(409, token=token, values=shown, message=error.message)
    response = see_other(url_for("console.applications"))
    set_cookie(response, SESSION_COOKIE, access, max_age=services().context.settings.auth.jwt_ttl_s)
    return response
