"""The merchant console: server-rendered pages where a merchant's admin manages applications and
their API keys with a browser.

    GET  /console                                   to the applications (or to sign-in)
    GET  /console/sign-in, POST /console/sign-in    e-mail and password, as `POST /api/v1/auth/login`
    POST /console/sign-out
    GET  /console/applications                      the merchant's applications; POST creates one
    GET  /console/applications/<id>                 one application and its API keys by prefix
    POST /console/applications/<id>/status          enable or disable (field `enabled`)
    POST /console/applications/<id>/api-keys        a new key, shown on the answer only
    POST /console/applications/<id>/api-keys/<key>/revoke

Every action calls the operation the API's route calls (`routes/applications.py`, the login check of
`routes/accounts.py`, `auth.principal_of_access_token`), so ownership, validation and rate limits are
the API's. The session is the access token the API's login issues, in a `Secure`, `HttpOnly`,
`SameSite=Strict` cookie on `/console`: it ends when the token expires. Every form carries a CSRF
token (an HMAC of the session's token; before sign-in, a random value also set as a cookie), checked
on every POST before anything else is done. See `docs/console.md`.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from quart import Blueprint, Response, render_template, request, url_for
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import HTTPException

from payorch.http.auth import Principal, application_for, principal_of_access_token
from payorch.http.context import services
from payorch.http.errors import STATUS_OF
from payorch.http.jsonio import loads_request_json, unstorable_text_problem
from payorch.http.models import (
    ApiKeyCreateRequest,
    ApplicationCreateRequest,
    ApplicationStatusRequest,
    LoginRequest,
    PageQuery,
)
from payorch.http.routes.accounts import admin_access_token, charge_login_attempt
from payorch.http.routes.applications import (
    APPLICATION_MAX_BODY_BYTES,
    api_keys_of,
    applications_of,
    create_api_key_of,
    create_application_of,
    revoke_api_key_of,
    set_status_of,
)
from payorch.http.validation import limit_request_body
from payorch.jsonexact import dumps_exact
from payorch.values import errors as domain
from payorch.values.timefmt import iso

blueprint = Blueprint(
    "console",
    __name__,
    url_prefix="/console",
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)

SESSION_COOKIE = "payorch_console"
SIGN_IN_COOKIE = "payorch_console_sign_in"  # the CSRF token of the sign-in form (double submit)
CSRF_FIELD = "csrf_token"
COOKIE_PATH = "/console"
SIGN_IN_TOKEN_LIFETIME_S = 3600
PAGE_SIZE = 20
# The console's own script and style sheet, from payorch itself; nothing inline, nothing else.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_SIGN_IN_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
log = logging.getLogger("payorch.http")
M = TypeVar("M", bound=BaseModel)


class CsrfRefused(Exception):
    """A POST without the session's CSRF token: 403, and nothing is done."""


@dataclass(frozen=True)
class Session:
    """The admin signed in, and the CSRF token every form of theirs carries."""

    principal: Principal
    csrf_token: str


def csrf_token_of(access_token: str) -> str:
    """The CSRF token of the session holding `access_token`: an HMAC of it under the JWT secret, so
    it is new at every sign-in, and only the server (and the session's own pages) know it."""
    secret = services().settings.auth.jwt_secret.encode()
    return hmac.new(secret, b"payorch console csrf\x00" + access_token.encode(), hashlib.sha256).hexdigest()


def _session() -> Session:
    """The signed-in admin (their merchant's credential bucket charged one request, as the API's
    `Authorization: Bearer` is); `AuthenticationRequired` without a valid, unexpired session."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        raise domain.AuthenticationRequired("not signed in")
    return Session(principal=principal_of_access_token(token), csrf_token=csrf_token_of(token))


def _check_csrf(form: Mapping[str, str], expected: str | None) -> None:
    sent = form.get(CSRF_FIELD, "")
    if not expected or not sent or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CsrfRefused


async def _form() -> MultiDict[str, str]:
    limit_request_body(APPLICATION_MAX_BODY_BYTES)
    return await request.form


def page(view: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A page of a signed-in admin: the view receives the `session`."""

    @functools.wraps(view)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await view(*args, session=_session(), **kwargs)

    return wrapper


def action(view: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A form's POST: the session first, then its CSRF token; the view receives `session` and `form`."""

    @functools.wraps(view)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        session = _session()
        form = await _form()
        _check_csrf(form, session.csrf_token)
        return await view(*args, session=session, form=form, **kwargs)

    return wrapper


def see_other(url: str) -> Response:
    """303: the browser follows with a GET, so reloading the page there does not post again."""
    response = Response("", status=303)
    response.headers["Location"] = url
    return response


def _text_fields(form: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """The form's text fields `names` ("" when absent); `InvalidInput` for text PostgreSQL cannot
    store, as the API's JSON parser refuses it."""
    fields = {name: form.get(name, "") for name in names}
    problems = [
        domain.FieldProblem(name, problem)
        for name, value in fields.items()
        if (problem := unstorable_text_problem(value)) is not None
    ]
    if problems:
        raise domain.InvalidInput("the form holds text that cannot be stored", problems)
    return fields


def field_errors(error: ValidationError | domain.InvalidInput) -> dict[str, str]:
    """Each field's first problem, by the field's name in the form."""
    found: dict[str, str] = {}
    if isinstance(error, domain.InvalidInput):
        for problem in error.details:
            found.setdefault(problem.field.split(".")[0], problem.message)
        return found
    for item in error.errors(include_url=False):
        name = str(item["loc"][0]) if item["loc"] else "form"
        found.setdefault(name, item["msg"])
    return found


def _page_query() -> PageQuery:
    try:
        return PageQuery.model_validate({"page": request.args.get("page", "1"), "limit": str(PAGE_SIZE)})
    except ValidationError:
        raise domain.InvalidInput("page must be a whole number from 1") from None


def _validated(model: type[M], values: dict[str, Any]) -> M:
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise domain.InvalidInput(
            "validation failed",
            [domain.FieldProblem(field, message) for field, message in field_errors(error).items()],
        ) from None


# --- Sign-in and sign-out ----------------------------------------------------------------------


def _sign_in_token() -> str:
    """The sign-in form's CSRF token: the browser's `SIGN_IN_COOKIE` when it has a well-formed one,
    else a new random one (set as the cookie by `_sign_in_form`)."""
    held = request.cookies.get(SIGN_IN_COOKIE, "")
    return held if _SIGN_IN_TOKEN.fullmatch(held) else secrets.token_urlsafe(32)


async def _sign_in_form(
    status: int, *, email: str = "", message: str | None = None, errors: dict[str, str] | None = None
) -> Response:
    token = _sign_in_token()
    html = await render_template(
        "console/sign_in.html",
        title="Sign in",
        csrf_token=None,
        sign_in_token=token,
        email=email,
        message=message,
        errors=errors or {},
    )
    response = Response(html, status=status, content_type="text/html; charset=utf-8")
    _set_cookie(response, SIGN_IN_COOKIE, token, max_age=SIGN_IN_TOKEN_LIFETIME_S)
    return response


def _set_cookie(response: Response, name: str, value: str, *, max_age: int) -> None:
    response.set_cookie(
        name, value, max_age=max_age, path=COOKIE_PATH, secure=True, httponly=True, samesite="Strict"
    )


def _delete_cookie(response: Response, name: str) -> None:
    response.delete_cookie(name, path=COOKIE_PATH, secure=True, httponly=True, samesite="Strict")


def _signed_out() -> Response:
    response = see_other(url_for("console.sign_in"))
    _delete_cookie(response, SESSION_COOKIE)
    return response


@blueprint.get("")
@blueprint.get("/")
async def home() -> Response:
    return see_other(url_for("console.applications"))


@blueprint.get("/sign-in")
async def sign_in() -> Response:
    return await _sign_in_form(200)


@blueprint.post("/sign-in")
async def sign_in_submitted() -> Response:
    """The checks of `POST /api/v1/auth/login`: the address's bucket charged first, the account's
    failed logins, the password; on success the API's access token becomes the session cookie."""
    charge_login_attempt()
    form = await _form()
    _check_csrf(form, request.cookies.get(SIGN_IN_COOKIE))
    email = form.get("email", "")
    try:
        fields = _text_fields(form, ("email", "password"))
        data = _validated(LoginRequest, fields)
        token = await admin_access_token(data)
    except domain.InvalidInput as error:
        return await _sign_in_form(400, email=email, errors=field_errors(error))
    except domain.InvalidLogin as error:
        return await _sign_in_form(401, email=email, message=error.message)
    response = see_other(url_for("console.applications"))
    _set_cookie(response, SESSION_COOKIE, token, max_age=services().settings.auth.jwt_ttl_s)
    _delete_cookie(response, SIGN_IN_COOKIE)
    return response


@blueprint.post("/sign-out")
@action
async def sign_out(session: Session, form: MultiDict[str, str]) -> Response:
    return _signed_out()


# --- Applications ------------------------------------------------------------------------------


async def _applications_page(
    session: Session,
    status: int,
    *,
    form: Mapping[str, str] | None = None,
    errors: dict[str, str] | None = None,
) -> tuple[str, int]:
    query = _page_query()
    items, total = await applications_of(session.principal, query.page_request, with_api_keys=True)
    html = await render_template(
        "console/applications.html",
        title="Applications",
        csrf_token=session.csrf_token,
        items=items,
        total=total,
        page=query.page,
        limit=query.limit,
        form={"name": "", "description": "", **(form or {})},
        errors=errors or {},
    )
    return html, status


@blueprint.get("/applications")
@page
async def applications(session: Session) -> tuple[str, int]:
    return await _applications_page(session, 200)


@blueprint.post("/applications")
@action
async def create_application(session: Session, form: MultiDict[str, str]) -> Any:
    """Create an application with the API's validation (`ApplicationCreateRequest`); the description
    is a JSON object written in a text area, parsed as the API parses its bodies."""
    shown = {"name": form.get("name", ""), "description": form.get("description", "")}
    try:
        fields = _text_fields(form, ("name", "description"))
        description = None
        if fields["description"].strip():
            try:
                description = loads_request_json(fields["description"])
            except domain.InvalidInput as error:
                problem = error.details[0].message if error.details else error.message
                raise domain.InvalidInput(
                    "validation failed",
                    [domain.FieldProblem("description", f"must be a JSON object: {problem}")],
                ) from None
        data = _validated(ApplicationCreateRequest, {"name": fields["name"], "description": description})
    except domain.InvalidInput as error:
        return await _applications_page(session, 400, form=shown, errors=field_errors(error))
    created = await create_application_of(session.principal, data)
    return see_other(url_for("console.application", application_id=created.id))


@blueprint.post("/applications/<application_id>/status")
@action
async def application_status(application_id: str, session: Session, form: MultiDict[str, str]) -> Response:
    enabled = {"true": True, "false": False}.get(form.get("enabled", ""))
    if enabled is None:
        raise domain.InvalidInput("the field 'enabled' must be 'true' or 'false'")
    updated = await set_status_of(
        session.principal, application_id, ApplicationStatusRequest(isEnabled=enabled)
    )
    if form.get("back") == "application":
        return see_other(url_for("console.application", application_id=updated.id))
    return see_other(url_for("console.applications"))


async def _application_page(
    session: Session,
    application_id: str,
    status: int,
    *,
    form: Mapping[str, str] | None = None,
    errors: dict[str, str] | None = None,
) -> tuple[str, int]:
    application = await application_for(session.principal, application_id)
    query = _page_query()
    keys, total = await api_keys_of(session.principal, application_id, query.page_request)
    html = await render_template(
        "console/application.html",
        title=application.name,
        csrf_token=session.csrf_token,
        application=application,
        description=dumps_exact(application.description) if application.description else None,
        keys=keys,
        total=total,
        page=query.page,
        limit=query.limit,
        form={"description": "", **(form or {})},
        errors=errors or {},
    )
    return html, status


@blueprint.get("/applications/<application_id>")
@page
async def application(application_id: str, session: Session) -> tuple[str, int]:
    return await _application_page(session, application_id, 200)


@blueprint.post("/applications/<application_id>/api-keys")
@action
async def create_api_key(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """A new key, shown on this answer and never again (no redirect: nothing keeps it to show later)."""
    try:
        data = _validated(ApiKeyCreateRequest, _text_fields(form, ("description",)))
    except domain.InvalidInput as error:
        shown = {"description": form.get("description", "")}
        return await _application_page(session, application_id, 400, form=shown, errors=field_errors(error))
    key, created = await create_api_key_of(session.principal, application_id, data)
    application = await application_for(session.principal, application_id)
    html = await render_template(
        "console/api_key_created.html",
        title="New API key",
        csrf_token=session.csrf_token,
        application=application,
        key=created,
        secret=key,
    )
    return html, 201


@blueprint.post("/applications/<application_id>/api-keys/<key_id>/revoke")
@action
async def revoke_api_key(
    application_id: str, key_id: str, session: Session, form: MultiDict[str, str]
) -> Response:
    await revoke_api_key_of(session.principal, application_id, key_id)
    return see_other(url_for("console.application", application_id=application_id))


# --- Answers for every page --------------------------------------------------------------------


@blueprint.app_template_filter("console_time")
def console_time(value: datetime) -> str:
    return iso(value)


async def _message(
    title: str,
    message: str,
    status: int,
    *,
    link: str | None = None,
    link_text: str = "Back to the applications",
) -> Response:
    token = request.cookies.get(SESSION_COOKIE)
    html = await render_template(
        "console/message.html",
        title=title,
        message=message,
        alert=status >= 400,
        csrf_token=csrf_token_of(token) if token else None,
        link=link or url_for("console.applications"),
        link_text=link_text,
    )
    return Response(html, status=status, content_type="text/html; charset=utf-8")


@blueprint.errorhandler(domain.AuthenticationRequired)
async def _not_signed_in(error: domain.AuthenticationRequired) -> Response:
    return _signed_out()


@blueprint.errorhandler(CsrfRefused)
async def _csrf_refused(error: CsrfRefused) -> Response:
    return await _message(
        "Form refused",
        "This form did not carry this session's security token, so nothing was done. Open the page "
        "again and resubmit it.",
        403,
    )


@blueprint.errorhandler(domain.RateLimited)
async def _rate_limited(error: domain.RateLimited) -> Response:
    response = await _message("Too many requests", error.message, 429)
    response.headers["Retry-After"] = str(error.retry_after)
    return response


@blueprint.errorhandler(domain.NotFound)
@blueprint.errorhandler(domain.NotPermitted)
async def _not_found(error: domain.DomainError) -> Response:
    # Another merchant's application is as absent as one that never existed: the console does not
    # tell the two apart.
    what = "API key" if isinstance(error, domain.NotFound) and "API key" in error.message else "application"
    return await _message(f"No such {what}", f"There is no such {what} in your account.", 404)


@blueprint.errorhandler(domain.DomainError)
async def _refused(error: domain.DomainError) -> Response:
    status = next((int(STATUS_OF[kind]) for kind in type(error).__mro__ if kind in STATUS_OF), None)
    if status is None:  # no page answers it: the API would not either (`errors._unexpected`)
        log.error("unhandled error in the console", exc_info=(type(error), error, error.__traceback__))
        return await _message("Unexpected error", "Something went wrong on payorch's side.", 500)
    return await _message("Not done", error.message, status)


@blueprint.errorhandler(HTTPException)
async def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    return await _message(str(error.name), str(error.description or error.name), status)


@blueprint.after_request
async def _security_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"  # for browsers that predate frame-ancestors
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response
