"""The OpenAPI document: how quart-schema turns the routes into it, and what it says beyond the bodies.

Every body's shape exists once, as the type the code validates or builds with: request bodies and
query strings are the pydantic models that validate them (`http.models`); response bodies are the
closed `TypedDict`s their builders build (`engine.payments.records`, `engine.payments.refund_rules`,
`http.representations`, `values.pagination.Page`), which mypy checks each builder against. A field
added to a response is added to its `TypedDict` and its builder; the document follows.

What stays here: the security schemes, the two error shapes and their decorators (`errors()`,
`coded_errors()`), the `Idempotency-Key` header, the document's info and tags, the provider that
completes what quart-schema generates, and the extension that serves the document.

The document depends on the app's routes and models only, never on a setting, and building it takes
a few hundred milliseconds of the event loop: `PayorchQuartSchema` builds and encodes it once per
process (for each set of routes), at its first request, and answers every request with those bytes.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Iterable
from decimal import Decimal
from http import HTTPStatus
from typing import Annotated, Any, NotRequired, TypeVar, get_args, get_origin

import trio
from pydantic import BaseModel, Field, StringConstraints, with_config
from quart import Quart, Response, current_app
from quart_schema import (
    APIKeySecurityScheme,
    HttpSecurityScheme,
    Info,
    QuartSchema,
    Tag,
    document_response,
    hide,
)
from quart_schema.conversion import model_schema
from quart_schema.openapi import QUART_SCHEMA_OPERATION_ID_ATTRIBUTE, OpenAPIProvider
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12
from werkzeug.routing.rules import Rule

from payorch.engine.body_types import CLOSED
from payorch.engine.idempotency import MAX_KEY_LENGTH
from payorch.http.error_responses import SHAPE_B_STATUS_OF
from payorch.http.models import JsonNumber
from payorch.http.validation import OPTIONAL_BODY_ATTRIBUTE
from payorch.values.errors import ErrorCode
from payorch.values.pagination import Page

F = TypeVar("F", bound=Callable[..., Any])

# --- Security -----------------------------------------------------------------------------------

BEARER_AUTH = "bearerAuth"
API_KEY_AUTH = "apiKeyAuth"
SECURITY_SCHEMES: dict[str, APIKeySecurityScheme | HttpSecurityScheme] = {
    BEARER_AUTH: HttpSecurityScheme(scheme="bearer", bearer_format="JWT"),
    API_KEY_AUTH: APIKeySecurityScheme(name="X-API-Key", in_="header"),
}
# quart-schema's scheme objects carry no description: added to the document by the provider below.
SECURITY_DESCRIPTIONS = {
    BEARER_AUTH: "A merchant admin's access token from POST /api/v1/auth/login: "
    "`Authorization: Bearer <jwt>`.",
    API_KEY_AUTH: "An API key of one application (`sk_` and 40 letters and digits), for the merchant's "
    "server: `X-API-Key: <key>`.",
}
JWT: list[dict[str, list[str]]] = [{BEARER_AUTH: []}]
JWT_OR_API_KEY: list[dict[str, list[str]]] = [{BEARER_AUTH: []}, {API_KEY_AUTH: []}]
NO_CREDENTIALS: list[dict[str, list[str]]] = []

# --- Errors -------------------------------------------------------------------------------------


@with_config(CLOSED)
class FieldProblem(TypedDict):
    field: str
    message: str


@with_config(CLOSED)
class ErrorA(TypedDict):
    """Error (shape A): `code` is the HTTP status. `retryAfter` (seconds) on 429 and 503,
    `requestId` on every 5xx (also in the `X-Request-Id` header and the server log)."""

    error: str
    message: str | list[str]
    code: int
    details: NotRequired[list[FieldProblem] | str]
    retryAfter: NotRequired[int]
    requestId: NotRequired[str]


@with_config(CLOSED)
class ErrorB(TypedDict):
    """Error (shape B) of the idempotency and refund rules: `code` is a machine-readable string.
    `IDEMPOTENCY_KEY_IN_PROGRESS` carries `retryAfter` (seconds)."""

    message: str | list[str]
    statusCode: int
    code: ErrorCode
    retryAfter: NotRequired[int]


class NoContent:
    """Done: no body. `document_response(NoContent, 204)` documents an answer without one."""


# --- Request headers ----------------------------------------------------------------------------

IdempotencyKeyHeader = TypedDict(
    "IdempotencyKeyHeader",
    {
        "Idempotency-Key": Annotated[
            str,
            StringConstraints(min_length=1, max_length=MAX_KEY_LENGTH),
            Field(
                description=f"Required, 1 to {MAX_KEY_LENGTH} characters, chosen by the caller. The same key "
                "with the same body answers the first answer again (header `Idempotent-Replayed: true`); "
                "with another body 422 IDEMPOTENCY_KEY_MISMATCH; while the first runs 409 "
                "IDEMPOTENCY_KEY_IN_PROGRESS."
            ),
        ]
    },
)
(IDEMPOTENCY_HEADER,) = IdempotencyKeyHeader.__annotations__  # the header's name, written once above

IfMatchHeader = TypedDict(
    "IfMatchHeader",
    {
        "If-Match": NotRequired[
            Annotated[
                str,
                Field(
                    description="Optional: the entity tag of the version the change is made on, as `ETag` "
                    'wrote it (`"3"`; `"0"`: none stored yet; several, comma-separated; `*`: any). '
                    "Another version in force: 412, nothing stored. Compared strongly (RFC 9110): a weak "
                    'tag (`W/"3"`) matches none; a tag that is not quoted is 400.'
                ),
            ]
        ]
    },
)
# The `ETag` answered by the views marked `entity_tagged()`.
ETAG: dict[str, Any] = {
    "description": "The version of the routing document in force as a strong entity tag "
    '(`"3"`), for `If-Match`.',
    "schema": {"type": "string"},
}
ENTITY_TAGGED_ATTRIBUTE = "_payorch_entity_tagged"

# --- Response documentation shorthands ----------------------------------------------------------

# What each status of shape A means, for `errors()`. 409 and 422 of sessions and refunds are shape B
# (`coded_errors()`, each described by its codes); everywhere else they are shape A.
SHAPE_A = "Shape A (`ErrorA`: `code` is the HTTP status). "
SHAPE_B = "Shape B (`ErrorB`: `code` is a string). "
ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "Invalid request: malformed JSON, a field, query or header that fails validation.",
    401: "Missing, invalid or expired credentials, or the wrong kind of credential.",
    403: "The application belongs to another merchant or API key, or is disabled.",
    404: "No such resource (or not visible to these credentials).",
    409: "Conflict with the current state.",
    410: "The invite token was already used or has expired.",
    412: "`If-Match` names another version than the one in force: nothing was changed.",
    413: "The request body is too large.",
    422: "The request is well-formed but cannot be carried out.",
    429: "Too many requests: retry after `retryAfter` seconds (also the `Retry-After` header).",
    500: "Unexpected server error: quote the `requestId` when reporting it.",
    502: "The payment provider could not be reached or failed.",
    503: "Too busy: retry after `retryAfter` seconds (also the `Retry-After` header).",
}
# What each `code` of shape B means; its status is the one `http.error_responses` answers it with.
CODE_DESCRIPTIONS: dict[ErrorCode, str] = {
    "IDEMPOTENCY_KEY_MISMATCH": "the `Idempotency-Key` was used before with another body",
    "IDEMPOTENCY_KEY_IN_PROGRESS": "a request with this `Idempotency-Key` is still being processed: retry "
    "after `retryAfter` seconds (also the `Retry-After` header)",
    "SESSION_NOT_REFUNDABLE": "the session is not SUCCEEDED or PARTIALLY_REFUNDED, or nothing is left "
    "to refund",
    "REFUND_EXCEEDS_BALANCE": "`amount` is more than the remaining refundable balance",
    "NO_PROVIDER_AVAILABLE": "no provider linked to the application takes this payment method, currency "
    "and amount",
}
STATUS_OF_CODE: dict[ErrorCode, int] = {kind.code: int(status) for kind, status in SHAPE_B_STATUS_OF.items()}
# The shape B codes each view answers, by status (`coded_errors()`), read when the document is built.
CODED_ERRORS_ATTRIBUTE = "_payorch_coded_errors"
RETRY_AFTER_STATUSES = frozenset({429, 503})  # and IDEMPOTENCY_KEY_IN_PROGRESS's 409


def errors(*statuses: int) -> Callable[[F], F]:
    """Document each of `statuses` as an error of shape A."""

    def decorator(view: F) -> F:
        for status in statuses:
            view = document_response(ErrorA, status)(view)
        return view

    return decorator


def entity_tagged(view: F) -> F:
    """Document the `ETag` header of the view's successful answers."""
    setattr(view, ENTITY_TAGGED_ATTRIBUTE, True)
    return view


def coded_errors(*codes: ErrorCode) -> Callable[[F], F]:
    """Document the errors of shape B (idempotency and refund rules) that the view answers: each of
    `codes` under its status, whose description lists the codes it may carry."""

    def decorator(view: F) -> F:
        by_status: dict[int, list[ErrorCode]] = {}
        for code in codes:
            by_status.setdefault(STATUS_OF_CODE[code], []).append(code)
        for status in by_status:
            view = document_response(ErrorB, status)(view)
        setattr(view, CODED_ERRORS_ATTRIBUTE, by_status)
        return view

    return decorator


# --- The document -------------------------------------------------------------------------------

INFO = Info(
    title="payorch",
    version="1.0",
    summary="Payment orchestration: checkout sessions routed across payment providers, refunds, webhooks.",
    description="""\
Merchants manage applications, API keys, provider configurations and webhooks with an access token
(`Authorization: Bearer <jwt>` from `POST /api/v1/auth/login`). A merchant's server creates and reads
checkout sessions and refunds with an API key of one application (`X-API-Key`) or the access token.

**Money** travels as JSON numbers in major units (`10.50`), never strings, and never with more decimals
than the currency allows (JPY 0, EUR 2, KWD 3): `format: decimal`, a multiple of 0.001. payorch reads
the number's text exactly, so a client that writes a float's shortest text (Python's `repr`, JSON
encoders generally) sends the amount it means for any amount of up to 15 significant digits.
**Lists** are pages: `page` (from 1) and `limit` (1 to 100), newest first.
**Text** may not hold NUL (U+0000) or a lone surrogate (`\\ud800` without its pair), anywhere in a
request: 400. String fields are trimmed, and one that is blank once trimmed counts as missing.
**Errors** have shape A `{error, message, code, details?, retryAfter?, requestId?}` with `code` the HTTP
status, except the idempotency and refund rules of sessions and refunds, which have shape B
`{message, statusCode, code}` with a string `code`; each error response says its shape. Session and
refund creation need an `Idempotency-Key` header.
""",
)
TAGS = [
    Tag(name="Accounts", description="Merchant signup by invitation, and login."),
    Tag(name="Users and roles", description="A merchant's users, their roles, and invitations of more."),
    Tag(name="Applications and API keys", description="A merchant's integration units and their keys."),
    Tag(name="Providers", description="The provider catalogue and the providers linked to an application."),
    Tag(name="Routing", description="Which provider an application's sessions go to: its rules, tried out."),
    Tag(name="Sessions", description="Checkout sessions: one payment attempt each."),
    Tag(name="Refunds", description="Refunds of paid sessions, in full or in part."),
    Tag(name="Payment methods", description="What an application can offer for a currency and amount."),
    Tag(name="Webhooks", description="Where payorch sends its signed events, and the delivery log."),
    Tag(name="Reconciliation", description="What a provider settled, matched against what payorch recorded."),
    Tag(name="Provider events", description="Inbound, provider-signed events: called by providers."),
    Tag(name="Operations", description="Probes and metrics for operators."),
]

# Endpoints that answer something other than JSON, documented here rather than by a model.
PLAIN_RESPONSES: dict[str, dict[str, Any]] = {
    "metrics.metrics": {
        "tags": ["Operations"],
        "responses": {
            "200": {
                "description": "Prometheus text exposition format 0.0.4.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        },
    },
}
# Outside the merchant API: HTML pages for the customer (the sandbox's checkout, payorch's result page)
# and for the merchant's admin (the console, `docs/console.md`).
UNDOCUMENTED_PREFIXES = ("/sandbox/", "/checkout/", "/static/", "/console")

RETRY_AFTER: dict[str, Any] = {
    "description": "Seconds to wait before retrying (when the body carries `retryAfter`).",
    "schema": {"type": "integer", "minimum": 0},
}
IDEMPOTENT_REPLAYED: dict[str, Any] = {
    "description": "`true` when this is the stored answer to an earlier request with the same key.",
    "schema": {"type": "string", "enum": ["true"]},
}


class PayorchOpenAPIProvider(OpenAPIProvider):
    """quart-schema's document, corrected where it falls short for this service:

    - required query parameters and headers are marked `required` (quart-schema reads that from
      each property, where pydantic never puts it) and a query parameter is never `null`;
    - a request body is `required` unless the view takes a missing one as `{}`
      (`validate_optional_request`), and every request string refuses NUL by a pattern;
    - summaries are the first paragraph of a view's docstring, not its first line;
    - every response has a description (an error's names its shape, and shape B's codes), and errors
      429, 503 and IDEMPOTENCY_KEY_IN_PROGRESS's 409 document the `Retry-After` header;
    - a page of a list is a component of its own per kind of item (`Page[Application]`);
    - a Decimal default is written as a JSON number;
    - the sandbox's customer pages are left out, and /metrics is documented as text.
    """

    def generate_rules(self) -> Iterable[Rule]:
        for rule in super().generate_rules():
            if not rule.rule.startswith(UNDOCUMENTED_PREFIXES):
                yield rule

    def build_paths(self, rule: Rule) -> tuple[dict[str, Any], dict[str, Any]]:
        paths, components = super().build_paths(rule)
        func = self._app.view_functions[rule.endpoint]
        extra = PLAIN_RESPONSES.get(rule.endpoint)
        for path_item in paths.values():
            for operation in path_item.values():
                if extra is not None and not operation["responses"]:
                    operation.update(extra)
                _describe(operation, inspect.getdoc(func))
                if not operation["parameters"]:
                    del operation["parameters"]
                if "requestBody" in operation:  # required unless the view takes none as `{}`
                    operation["requestBody"]["required"] = not getattr(func, OPTIONAL_BODY_ATTRIBUTE, False)
                idempotent = any(
                    parameter.get("name") == IDEMPOTENCY_HEADER
                    for parameter in operation.get("parameters", [])
                )
                operation["responses"] = dict(
                    sorted(operation["responses"].items(), key=lambda item: int(item[0]))
                )
                coded: dict[int, list[ErrorCode]] = getattr(func, CODED_ERRORS_ATTRIBUTE, {})
                for status, response in operation["responses"].items():
                    _complete_response(
                        int(status), response, idempotent=idempotent, codes=coded.get(int(status), [])
                    )
                    if getattr(func, ENTITY_TAGGED_ATTRIBUTE, False) and 200 <= int(status) < 300:
                        response.setdefault("headers", {})["ETag"] = ETAG
        return paths, components

    def build_response_object(
        self, model: type[Any], headers_model: type[Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if model is NoContent:
            return {"description": "Done: no body."}, {}
        response, components = super().build_response_object(model, headers_model)
        if get_origin(model) is Page:  # every Page[...] is titled `Page`: name it after its items
            (item,) = get_args(model)
            response["content"]["application/json"]["schema"]["title"] = f"Page[{item.__name__}]"
            response["description"] = f"One page of {item.__name__} items, newest first."
        return response, components

    def build_querystring_parameters(self, model: type[Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        parameters, components = super().build_querystring_parameters(model)
        required = set(self._model_schema(model).get("required", []))
        for parameter in parameters:
            if parameter["name"] in required:
                parameter["required"] = True
            parameter["schema"] = _without_null(parameter["schema"])
            parameter["schema"].pop("title", None)
        return parameters, components

    def build_headers_parameters(self, model: type[Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        parameters, components = super().build_headers_parameters(model)
        required = set(self._model_schema(model).get("required", []))
        for parameter in parameters:
            if parameter["name"] in required:
                parameter["required"] = True
            description = parameter["schema"].pop("description", None)
            if description:
                parameter["description"] = description
            parameter["schema"].pop("title", None)
        return parameters, components

    def operation_id(self, method: str, path: str, func: Callable[..., Any]) -> str | None:
        """The view's name in lowerCamelCase (`create_session` -> `createSession`)."""
        name: str = getattr(func, QUART_SCHEMA_OPERATION_ID_ATTRIBUTE, func.__name__)
        first, *rest = name.split("_")
        return first + "".join(part[:1].upper() + part[1:] for part in rest)

    def schema(self) -> dict[str, Any]:
        document = super().schema()
        components = document.setdefault("components", {})
        for name, scheme in components.get("securitySchemes", {}).items():
            if name in SECURITY_DESCRIPTIONS:
                scheme["description"] = SECURITY_DESCRIPTIONS[name]
        schemas = components.setdefault("schemas", {})
        for path_item in document["paths"].values():
            for operation in path_item.values():
                for media in operation.get("requestBody", {}).get("content", {}).values():
                    media["schema"] = _as_component(media["schema"], schemas)
                for response in operation["responses"].values():
                    for media in response.get("content", {}).values():
                        media["schema"] = _as_component(media["schema"], schemas)
        _tidy(document)
        _refuse_nul_in_requests(document)
        return document

    def _model_schema(self, model: type[Any]) -> dict[str, Any]:
        return model_schema(model, preference=self._app.config["QUART_SCHEMA_CONVERSION_PREFERENCE"])


RouteKey = tuple[tuple[str, str, tuple[str, ...]], ...]
# The documents built in this process, by the routes they describe (each route's rule, endpoint and
# methods): in one process the same routes have the same views and models, so the same document.
_DOCUMENTS: dict[RouteKey, bytes] = {}


def _plain_answer(result: Any) -> bool:
    """Whether a route's answer needs no conversion by quart-schema: its body is not a model or a
    dataclass, and its headers (a dict, if any) have no name that quart-schema would rewrite
    (`snake_case` into `kebab-case`)."""
    parts = result if isinstance(result, tuple) else (result,)
    body, rest = parts[0], parts[1:]
    if isinstance(body, BaseModel) or dataclasses.is_dataclass(body):
        return False
    headers = [part for part in rest if isinstance(part, dict)]
    return not any("_" in name for names in headers for name in names)


def _routes(app: Quart) -> RouteKey:
    return tuple(
        sorted(
            (rule.rule, rule.endpoint, tuple(sorted(rule.methods or ()))) for rule in app.url_map.iter_rules()
        )
    )


class PayorchQuartSchema(QuartSchema):
    """quart-schema, serving the OpenAPI document built and encoded once per process and set of
    routes, at the first request for it: quart-schema's own view builds it again for every request,
    and a process that builds several apps (the tests build one per test) would build it for each.

    Building takes about half a second of CPU, so it runs in a worker thread: the event loop goes on
    serving every other request meanwhile, and a stranger's first request for the document cannot
    stall it. The lock makes concurrent first requests wait for one build."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._building = trio.Lock()

    def init_app(self, app: Quart) -> None:
        """quart-schema's set-up, except that an answer made of JSON's own values goes to Quart as it
        is. quart-schema dumps every dict and list an answer holds through a new pydantic
        `TypeAdapter`, its body and then its headers: a schema built twice per response (about 0.1 ms
        of CPU) to hand back the same values. payorch's routes answer plain values (a dict or list of
        str, numbers, `Decimal`, UUIDs and times, as `http/representations.py` writes them, or a
        `Response`), never a model; one that answered a model or a dataclass at the top would still
        be converted by quart-schema."""
        quarts_own = app.make_response
        super().init_app(app)
        converting = app.make_response

        async def make_response(result: Any) -> Any:
            return await (quarts_own if _plain_answer(result) else converting)(result)

        app.make_response = make_response  # type: ignore[method-assign]

    @hide
    async def openapi(self) -> Response:
        routes = _routes(current_app)
        encoded = _DOCUMENTS.get(routes)
        if encoded is None:
            async with self._building:
                encoded = _DOCUMENTS.get(routes)
                if encoded is None:
                    app = current_app._get_current_object()  # type: ignore[attr-defined]
                    encoded = await trio.to_thread.run_sync(self._encoded_document, app)
                    _DOCUMENTS[routes] = encoded
        return Response(encoded, content_type="application/json")

    def _encoded_document(self, app: Quart) -> bytes:
        encoded: bytes = app.json.dumps(self.openapi_provider.schema()).encode()
        return encoded


def _describe(operation: dict[str, Any], doc: str | None) -> None:
    operation.pop("summary", None)
    operation.pop("description", None)
    if not doc:
        return
    paragraphs = [" ".join(part.split()) for part in doc.split("\n\n") if part.strip()]
    operation["summary"] = paragraphs[0]
    if len(paragraphs) > 1:
        operation["description"] = "\n\n".join(paragraphs[1:])


def _complete_response(
    status: int, response: dict[str, Any], *, idempotent: bool, codes: list[ErrorCode]
) -> None:
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    if schema.get("title") in ("ErrorA", "ErrorB"):
        if schema.get("title") == "ErrorB":
            response["description"] = (
                SHAPE_B
                + "`code` says why: "
                + "; ".join(f"{code} ({CODE_DESCRIPTIONS[code]})" for code in codes or CODE_DESCRIPTIONS)
                + "."
            )
        else:
            response["description"] = SHAPE_A + ERROR_DESCRIPTIONS.get(status, HTTPStatus(status).phrase)
        if status in RETRY_AFTER_STATUSES or "IDEMPOTENCY_KEY_IN_PROGRESS" in codes:
            response.setdefault("headers", {})["Retry-After"] = RETRY_AFTER
    elif not response.get("description"):
        response["description"] = HTTPStatus(status).phrase
    if idempotent and 200 <= status < 300:
        response.setdefault("headers", {})["Idempotent-Replayed"] = IDEMPOTENT_REPLAYED


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A query parameter is text or absent, never JSON null."""
    branches = schema.get("anyOf")
    if not branches:
        return schema
    kept = [branch for branch in branches if branch != {"type": "null"}]
    rest = {key: value for key, value in schema.items() if key not in ("anyOf", "default")}
    if schema.get("default") is not None:
        rest["default"] = schema["default"]
    if len(kept) == 1:
        return {**kept[0], **rest}
    return {**rest, "anyOf": kept}


def _as_component(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    """A body's schema as a reference to a named component (quart-schema inlines the top level),
    unless another schema already has that name."""
    title = schema.get("title")
    if not isinstance(title, str) or schema.get("type") != "object":
        return schema
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", title).strip("_")
    if schemas.setdefault(name, schema) != schema:
        return schema
    return {"$ref": f"#/components/schemas/{name}"}


# Text PostgreSQL cannot store is refused wherever a request carries text (`http.jsonio`,
# `http.models`): NUL as a pattern (a lone surrogate cannot be written as one) on every string a
# request sends that no pattern, format or enumeration bounds already.
NO_NUL_PATTERN = "^[^\\u0000]*$"
_BOUNDED_TEXT = ("pattern", "format", "enum", "const")


def _refuse_nul_in_requests(document: dict[str, Any]) -> None:
    """Give NO_NUL_PATTERN to every string of a request body or query string, and to every
    property name of a request's object, that no pattern, format or enumeration bounds already
    (the components a request names included, also where answers use them: they hold no NUL)."""
    schemas = document.get("components", {}).get("schemas", {})
    seen: set[str] = set()

    def visit(schema: Any) -> None:
        if not isinstance(schema, dict):
            return
        reference = schema.get("$ref")
        if isinstance(reference, str):
            name = reference.removeprefix("#/components/schemas/")
            if name not in seen and name in schemas:
                seen.add(name)
                visit(schemas[name])
        if schema.get("type") == "string" and not any(key in schema for key in _BOUNDED_TEXT):
            schema["pattern"] = NO_NUL_PATTERN
        names = schema.get("propertyNames")
        if isinstance(names, dict) and not any(key in names for key in _BOUNDED_TEXT):
            names["pattern"] = NO_NUL_PATTERN
        for key in ("items", "additionalProperties"):
            visit(schema.get(key))
        for key in ("anyOf", "oneOf", "allOf"):
            for branch in schema.get(key, []):
                visit(branch)
        for item in schema.get("properties", {}).values():
            visit(item)

    for path_item in document["paths"].values():
        for operation in path_item.values():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                visit(media.get("schema"))
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query":
                    visit(parameter.get("schema"))


def _tidy(node: Any) -> None:
    """Drop pydantic's generated property titles ("Createdat"), write a Decimal default (which
    pydantic writes as a string, "0") as the JSON number the schema says it is, and name bounds as
    JSON Schema does."""
    if isinstance(node, dict):
        if node.get("type") == "number" and isinstance(node.get("default"), str):
            value = Decimal(node["default"])
            node["default"] = int(value) if value == value.to_integral_value() else float(value)
        if node.get("type") in ("integer", "number"):
            # pydantic leaves `ge`/`le`... as they are when a validator wraps the number.
            for raw, keyword in JsonNumber.BOUNDS.items():
                if isinstance(node.get(raw), int | float):
                    node[keyword] = node.pop(raw)
        properties = node.get("properties")
        if isinstance(properties, dict) and node.get("type") == "object":
            for item in properties.values():
                if isinstance(item, dict):
                    item.pop("title", None)
        for value in node.values():
            _tidy(value)
    elif isinstance(node, list):
        for value in node:
            _tidy(value)
