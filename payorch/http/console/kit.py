"""What every console page shares: the blueprint, the signed-in session, CSRF, form parsing, the
answers to errors and the security headers.

The session is the access token the API's login issues, in a `Secure`, `HttpOnly`, `SameSite=Strict`
cookie on `/console`: it ends when the token expires, or when its admin signs out (`sign_in.py`).
Every form carries a CSRF token (an HMAC of the session's token; before sign-in, a random value also
set as a cookie), checked on every POST before anything else is done. See `docs/console.md`.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError
from quart import Blueprint, Response, render_template, request, url_for
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import HTTPException

from payorch.engine.payments.states import PAID
from payorch.http.auth import Principal, principal_of_access_token
from payorch.http.error_responses import SHAPE_B_STATUS_OF, STATUS_OF
from payorch.http.jsonio import unstorable_text_problem
from payorch.http.models import PageQuery
from payorch.http.operations.applications import APPLICATION_MAX_BODY_BYTES
from payorch.http.services import services
from payorch.http.validation import limit_request_body
from payorch.values import errors as domain
from payorch.values.html import see_other as see_other  # 303, for the pages to import from here
from payorch.values.pagination import PageRequest
from payorch.values.statuses import DeliveryStatus, RefundStatus, SessionStatus

blueprint = Blueprint(
    "console",
    __name__,
    url_prefix="/console",
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)

SESSION_COOKIE = "payorch_console"
CSRF_FIELD = "csrf_token"
COOKIE_PATH = "/console"
PAGE_SIZE = 20
# The console's own script and style sheet, from payorch itself; nothing inline, nothing else.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
log = logging.getLogger("payorch.http")
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


@dataclass(frozen=True)
class Section:
    """A page of one application, linked from every page of that application."""

    label: str
    endpoint: str  # takes `application_id`


APPLICATION_SECTIONS: list[Section] = []


def application_section(label: str, endpoint: str) -> None:
    """Link `endpoint` from the navigation of every application's pages (in import order)."""
    APPLICATION_SECTIONS.append(Section(label, f"console.{endpoint}"))


@blueprint.context_processor
def _sections() -> dict[str, object]:
    return {"application_sections": APPLICATION_SECTIONS}


@blueprint.context_processor
def _statuses() -> dict[str, object]:
    # Templates compare a status with its enumeration's members, never with text of their own.
    return {
        "SessionStatus": SessionStatus,
        "RefundStatus": RefundStatus,
        "DeliveryStatus": DeliveryStatus,
        "PAID": PAID,
    }


class CsrfRefused(Exception):
    """A POST without the session's CSRF token: 403, and nothing is done."""


@dataclass(frozen=True)
class Session:
    """The admin signed in, and the CSRF token every form of theirs carries: the console's sign-in
    session, nothing to do with a checkout session (`storage.sessions.CheckoutSession`)."""

    principal: Principal
    csrf_token: str


def csrf_token_of(access_token: str) -> str:
    """The CSRF token of the session holding `access_token`: an HMAC of it under the JWT secret, so
    it is new at every sign-in, and only the server (and the session's own pages) know it."""
    secret = services().context.settings.auth.jwt_secret.encode()
    return hmac.new(secret, b"payorch console csrf\x00" + access_token.encode(), hashlib.sha256).hexdigest()


async def current_session() -> Session:
    """The signed-in admin (their merchant's credential bucket charged one request, as the API's
    `Authorization: Bearer` is); `AuthenticationRequired` without a valid, unexpired session."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        raise domain.AuthenticationRequired("not signed in")
    return Session(principal=await principal_of_access_token(token), csrf_token=csrf_token_of(token))


def check_csrf(form: Mapping[str, str], expected: str | None) -> None:
    sent = form.get(CSRF_FIELD, "")
    if not expected or not sent or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CsrfRefused


async def read_form(max_bytes: int = APPLICATION_MAX_BODY_BYTES) -> MultiDict[str, str]:
    limit_request_body(max_bytes)
    return await request.form


def page(view: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A page of a signed-in admin: the view receives the `session`."""

    @functools.wraps(view)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await view(*args, session=await current_session(), **kwargs)

    return wrapper


def action(view: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A form's POST: the session first, then its CSRF token; the view receives `session` and `form`."""
    return action_up_to(APPLICATION_MAX_BODY_BYTES)(view)


def action_up_to(
    max_bytes: int,
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """`action` for a form whose body may hold up to `max_bytes` (a routing document's text area);
    the app-wide limit (`server.max_body_bytes`) still holds."""

    def decorator(view: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(view)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            session = await current_session()
            form = await read_form(max_bytes)
            check_csrf(form, session.csrf_token)
            return await view(*args, session=session, form=form, **kwargs)

        return wrapper

    return decorator


def text_fields(form: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
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


def true_or_false(form: Mapping[str, str], name: str) -> bool:
    """The hidden field `name` of a button that switches something on (`true`) or off (`false`);
    `InvalidInput` for anything else."""
    value = {"true": True, "false": False}.get(form.get(name, ""))
    if value is None:
        raise domain.InvalidInput(f"the field '{name}' must be 'true' or 'false'")
    return value


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


def page_query() -> PageQuery:
    try:
        return PageQuery.model_validate({"page": request.args.get("page", "1"), "limit": str(PAGE_SIZE)})
    except ValidationError:
        raise domain.InvalidInput("page must be a whole number from 1") from None


@dataclass(frozen=True)
class Listing(Generic[T]):
    """One page of a list: its items, how many the whole list holds, and which page of `limit` it
    is. Templates link the pages around it with the `pages` macro of `nav.html`."""

    items: list[T]
    total: int
    page: int
    limit: int

    @property
    def more(self) -> bool:
        """Whether pages follow this one."""
        return self.page * self.limit < self.total


async def listing(fetch: Callable[[PageRequest], Awaitable[tuple[list[T], int]]]) -> Listing[T]:
    """The page of a list that the request's `?page=` asks for (see `page_query`): `fetch` reads that
    page and the list's total, with the API's own operation."""
    query = page_query()
    items, total = await fetch(query.page_request)
    return Listing(items, total, query.page, query.limit)


async def render_page(template: str, session: Session, status: int = 200, **context: Any) -> tuple[str, int]:
    """A page of the signed-in user: `template` rendered with `context`, the session's CSRF token
    (its forms carry it, as the sign-out button does) and `is_admin` (a read-only user's pages leave
    out every form that changes something: `http.auth.permit_role` would refuse it), answered with
    `status`."""
    html = await render_template(
        template, csrf_token=session.csrf_token, is_admin=session.principal.is_admin, **context
    )
    return html, status


def done_notice(notices: Mapping[str, str], status: int = 200) -> str | None:
    """What the form posted just before did, said on the page its redirect leads to (`?done=<name>`,
    one of the page's `notices`: payorch's own words, never text taken from the address); None on
    any other answer than `status` 200 (a refused form shows why instead)."""
    return notices.get(request.args.get("done", "")) if status == 200 else None


def validated(model: type[M], values: dict[str, Any]) -> M:
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise domain.InvalidInput(
            "validation failed",
            [domain.FieldProblem(field, message) for field, message in field_errors(error).items()],
        ) from None


# --- Cookies ----------------------------------------------------------------------------------


def set_cookie(response: Response, name: str, value: str, *, max_age: int) -> None:
    response.set_cookie(
        name, value, max_age=max_age, path=COOKIE_PATH, secure=True, httponly=True, samesite="Strict"
    )


def delete_cookie(response: Response, name: str) -> None:
    response.delete_cookie(name, path=COOKIE_PATH, secure=True, httponly=True, samesite="Strict")


def signed_out(next_page: str | None = None) -> Response:
    """To the sign-in page, the session cookie cleared; after signing in, back to `next_page`."""
    response = see_other(
        url_for("console.sign_in", next=next_page) if next_page else url_for("console.sign_in")
    )
    delete_cookie(response, SESSION_COOKIE)
    return response


# --- Answers for every page --------------------------------------------------------------------


async def message_page(title: str, message: str, status: int) -> Response:
    """A page saying `message`, with a link back to the applications."""
    token = request.cookies.get(SESSION_COOKIE)
    html = await render_template(
        "console/message.html",
        title=title,
        message=message,
        alert=status >= 400,
        csrf_token=csrf_token_of(token) if token else None,
    )
    return Response(html, status=status, content_type="text/html; charset=utf-8")


@blueprint.errorhandler(domain.AuthenticationRequired)
async def _not_signed_in(error: domain.AuthenticationRequired) -> Response:
    # A page asked for comes back after sign-in; a form posted does not (its token is the old session's).
    return signed_out(request.full_path.rstrip("?") if request.method == "GET" else None)


@blueprint.errorhandler(CsrfRefused)
async def _csrf_refused(error: CsrfRefused) -> Response:
    return await message_page(
        "Form refused",
        "This form did not carry this session's security token, so nothing was done. Open the page "
        "again and resubmit it.",
        403,
    )


@blueprint.errorhandler(domain.RateLimited)
async def _rate_limited(error: domain.RateLimited) -> Response:
    response = await message_page("Too many requests", error.message, 429)
    response.headers["Retry-After"] = str(error.retry_after)
    return response


@blueprint.errorhandler(domain.NotFound)
@blueprint.errorhandler(domain.NotPermitted)
async def _not_found(error: domain.DomainError) -> Response:
    # Another merchant's application is as absent as one that never existed: the console does not
    # tell the two apart. What is missing is named by the error when it names one (a session...).
    what = (error.missing if isinstance(error, domain.NotFound) else None) or "application"
    return await message_page(f"No such {what}", f"There is no such {what} in your account.", 404)


def api_status(error: domain.DomainError) -> int | None:
    """The status the API answers `error` with (`errors.STATUS_OF`, shape B's for coded errors);
    None for an error no route answers."""
    if isinstance(error, domain.CodedError) and type(error) in SHAPE_B_STATUS_OF:
        return int(SHAPE_B_STATUS_OF[type(error)])
    return next((int(STATUS_OF[kind]) for kind in type(error).__mro__ if kind in STATUS_OF), None)


@blueprint.errorhandler(domain.DomainError)
async def _refused(error: domain.DomainError) -> Response:
    """Any other refusal: the status the API answers it with, and its message."""
    status = api_status(error)
    if status is None:  # no page answers it: the API would not either (`errors._unexpected`)
        log.error("unhandled error in the console", exc_info=(type(error), error, error.__traceback__))
        return await message_page("Unexpected error", "Something went wrong on payorch's side.", 500)
    response = await message_page("Not done", error.message, status)
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


@blueprint.errorhandler(HTTPException)
async def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    return await message_page(str(error.name), str(error.description or error.name), status)


@blueprint.after_request
async def _security_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"  # for browsers that predate frame-ancestors
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response
