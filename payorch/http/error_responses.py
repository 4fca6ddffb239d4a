"""Every error the service answers, in one table, in the two shapes of the interface document.

Shape A: `{error, message, code, details?, retryAfter?, requestId?}` with `code` the HTTP status.
Shape B: `{message, statusCode, code}` with `code` a string, for the idempotency and refund rules.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from pydantic import ValidationError
from quart import Quart, Response, g, jsonify, request
from quart_schema import RequestSchemaValidationError
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from payorch.http.validation import LimitedBody
from payorch.storage.failures import StorageFailure, storage_failure
from payorch.values import errors as domain

log = logging.getLogger("payorch.http")

# Domain error -> HTTP status (shape A). The order matters only for subclasses listed before bases.
STATUS_OF: dict[type[domain.DomainError], HTTPStatus] = {
    domain.InvalidInput: HTTPStatus.BAD_REQUEST,
    domain.InviteInvalid: HTTPStatus.BAD_REQUEST,
    domain.AuthenticationRequired: HTTPStatus.UNAUTHORIZED,
    domain.InvalidLogin: HTTPStatus.UNAUTHORIZED,
    domain.WrongCredentialKind: HTTPStatus.UNAUTHORIZED,
    domain.NotPermitted: HTTPStatus.FORBIDDEN,
    domain.RoleRefused: HTTPStatus.FORBIDDEN,
    domain.LastAdmin: HTTPStatus.CONFLICT,
    domain.ApplicationDisabled: HTTPStatus.FORBIDDEN,
    domain.NotFound: HTTPStatus.NOT_FOUND,
    domain.AccountExists: HTTPStatus.CONFLICT,
    domain.StatusUnchanged: HTTPStatus.CONFLICT,
    domain.LimitReached: HTTPStatus.CONFLICT,
    domain.InviteUsedOrExpired: HTTPStatus.GONE,
    domain.PreconditionFailed: HTTPStatus.PRECONDITION_FAILED,
    domain.ProviderAlreadyLinked: HTTPStatus.CONFLICT,
    domain.ChangeInProgress: HTTPStatus.CONFLICT,
    domain.UnsupportedPaymentMethod: HTTPStatus.UNPROCESSABLE_ENTITY,
    domain.ProviderCredentialsRejected: HTTPStatus.UNPROCESSABLE_ENTITY,
    domain.ProviderUnavailable: HTTPStatus.BAD_GATEWAY,
    domain.ServiceBusy: HTTPStatus.SERVICE_UNAVAILABLE,
    domain.RateLimited: HTTPStatus.TOO_MANY_REQUESTS,
}

# Errors answered in shape B, with their string `code`.
SHAPE_B_STATUS_OF: dict[type[domain.CodedError], HTTPStatus] = {
    domain.IdempotencyKeyMismatch: HTTPStatus.UNPROCESSABLE_ENTITY,
    domain.IdempotencyKeyInProgress: HTTPStatus.CONFLICT,
    domain.NoProviderAvailable: HTTPStatus.UNPROCESSABLE_ENTITY,
    domain.SessionNotRefundable: HTTPStatus.UNPROCESSABLE_ENTITY,
    domain.RefundExceedsBalance: HTTPStatus.UNPROCESSABLE_ENTITY,
}


def shape_a_body(
    status: int,
    message: str | list[str],
    *,
    details: list[dict[str, str]] | str | None = None,
    retry_after: int | None = None,
) -> dict[str, Any]:
    """Shape A's body, but for a 500's `requestId` (`shape_a` adds it)."""
    body: dict[str, Any] = {"error": HTTPStatus(status).phrase, "message": message, "code": status}
    if details:
        body["details"] = details
    if retry_after is not None:
        body["retryAfter"] = retry_after
    return body


def shape_a(
    status: int,
    message: str | list[str],
    *,
    details: list[dict[str, str]] | str | None = None,
    retry_after: int | None = None,
) -> Response:
    body = shape_a_body(status, message, details=details, retry_after=retry_after)
    if status >= 500:
        body["requestId"] = g.get("request_id")
    response = jsonify(body)
    response.status_code = status
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def shape_b(status: int, code: str, message: str, *, retry_after: int | None = None) -> Response:
    body: dict[str, Any] = {"message": message, "statusCode": status, "code": code}
    if retry_after is not None:
        body["retryAfter"] = retry_after
    response = jsonify(body)
    response.status_code = status
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def _field_problems(error: ValidationError) -> list[dict[str, str]]:
    problems = []
    for item in error.errors(include_url=False):
        field = ".".join(str(part) for part in item["loc"]) or "body"
        problems.append({"field": field, "message": item["msg"]})
    return problems


async def _domain_error(error: domain.DomainError) -> Response:
    if isinstance(error, domain.CodedError) and type(error) in SHAPE_B_STATUS_OF:
        return shape_b(
            SHAPE_B_STATUS_OF[type(error)], error.code, error.message, retry_after=error.retry_after
        )
    for kind in type(error).__mro__:
        status = STATUS_OF.get(kind)
        if status is not None:
            break
    else:
        return await _unexpected(error)
    details = None
    if isinstance(error, domain.InvalidInput):
        details = [{"field": item.field, "message": item.message} for item in error.details]
    retry_after = error.retry_after if isinstance(error, domain.ServiceBusy | domain.RateLimited) else None
    return shape_a(status, error.message, details=details, retry_after=retry_after)


async def _schema_error(error: RequestSchemaValidationError) -> Response:
    cause = error.validation_error
    if isinstance(cause, ValidationError):
        return shape_a(400, "request validation failed", details=_field_problems(cause))
    return shape_a(
        400, "request body must be a JSON object", details=[{"field": "body", "message": str(cause)}]
    )


def _too_large() -> str:
    limit = request.body.max_bytes if isinstance(request.body, LimitedBody) else None
    return f"request body too large: at most {limit} bytes here" if limit else "request body too large"


async def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    message = {
        400: "malformed request: the body must be valid JSON"
        if request.mimetype == "application/json"
        else "malformed request",
        404: "no such route",
        405: f"method {request.method} is not allowed here",
        413: _too_large(),
    }.get(status, error.description or HTTPStatus(status).phrase)
    response = shape_a(status, message)
    if isinstance(error, MethodNotAllowed) and error.valid_methods:
        response.headers["Allow"] = ", ".join(sorted(error.valid_methods))
    return response


async def _unexpected(error: BaseException) -> Response:
    if storage_failure(error) is StorageFailure.UNAVAILABLE:
        # A route's own unit of work that the database could not serve (unreachable, or its event
        # loop thread stopped): answered as the actors answer theirs, a retry may succeed.
        log.warning(
            "the database could not serve this request: answered 503",
            extra={"requestId": g.get("request_id"), "error": repr(error)},
        )
        return await _domain_error(domain.StorageUnavailable("the database is unavailable: retry shortly"))
    log.error(
        "unhandled error",
        exc_info=(type(error), error, error.__traceback__),
        extra={"requestId": g.get("request_id")},
    )
    return shape_a(500, "unexpected server error: quote the requestId when reporting it")


async def _undecodable_body(error: UnicodeDecodeError) -> Response:
    """Quart decodes a JSON body as UTF-8 before parsing it, outside its own handling of bad JSON:
    a body that is not UTF-8 must be a 400 like any malformed body, not a 500."""
    body = await request.get_data(as_text=False)
    assert isinstance(body, bytes)
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return shape_a(
            400,
            "malformed request: the body must be UTF-8 JSON",
            details=[{"field": "body", "message": str(error)}],
        )
    return await _unexpected(error)  # not the request body's fault


def install_error_handlers(app: Quart) -> None:
    app.register_error_handler(domain.DomainError, _domain_error)
    app.register_error_handler(RequestSchemaValidationError, _schema_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(UnicodeDecodeError, _undecodable_body)
    app.register_error_handler(Exception, _unexpected)
