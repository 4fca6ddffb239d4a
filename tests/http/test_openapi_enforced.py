"""The OpenAPI document promises nothing the server does not enforce, and the server refuses what the
document calls invalid: for each constrained property, parameter and header of the documented
requests, a valid request is broken in that one constraint (an enumeration, a pattern, a length, a
bound, a multiple, a required member, no unknown member) and the server must answer 400 in shape A.

Each broken request is checked against the document first: the request is invalid by the document,
and only because of the constraint broken (the value passes the same schema without it). The
other direction, that what the document allows passes, is schemathesis's (`tests/test_schemathesis.py`)
and the valid requests below, which are sent as they are once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

import jsonschema_rs
import pytest

from payorch.config import LimitSettings, Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.jsonexact import dumps_exact
from payorch.storage.database import Database
from tests.helpers import (
    PASSWORD,
    SANDBOX_KEY,
    Client,
    Shop,
    create_session,
    new_shop,
    session_body,
    signup_body,
)

OPENAPI_PATH = "/api/v1/openapi.json"
NUL = "\u0000"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # One client sends a few hundred requests in a few seconds, signup, login and routing
    # evaluations among them.
    limits = LimitSettings(
        requests_per_second=10_000,
        burst=10_000,
        login_per_minute=100_000,
        merchant_requests_per_second=10_000,
        merchant_burst=10_000,
        routing_evaluations_per_second=10_000,
        routing_evaluations_burst=10_000,
    )
    return settings.model_copy(update={"limits": limits})


@dataclass
class Call:
    """One documented request: its operation, path values, and a valid body, query and headers."""

    method: str
    path: str
    body: Any = None
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    path_values: dict[str, str] = field(default_factory=dict)
    expect: int | None = None  # the status of the valid request, when it is not a success

    @property
    def url(self) -> str:
        return self.path.format(**self.path_values)


@dataclass(frozen=True)
class Violation:
    """A valid call broken in one constraint: `where` names the place, `keyword` the constraint."""

    where: str
    keyword: str
    body: Any
    query: dict[str, str]
    headers: dict[str, str]


def valid_calls(shop: Shop, session_id: str, webhook_id: str, token: str) -> list[Call]:
    app = {"application_id": shop.application_id}
    order_item = {"name": "Widget", "sku": "W-1", "quantity": 2, "unitPrice": Decimal("50.00")}
    address = {"line1": "1 Market Street", "city": "Warsaw", "postalCode": "00-001", "country": "PL"}
    session = session_body(
        locale="pl_PL",
        orderItems=[order_item],
        additionalInformation={"channel": "web"},
        redirectUrls={"success": "https://shop.example/ok", "failure": "https://shop.example/ko"},
        shipping={"type": "courier", "method": "express"},
    )
    session["customer"] = {**session["customer"], "billingAddress": address, "phone": "+48 123"}
    return [
        Call(
            "post",
            "/api/v1/merchants/signup",
            signup_body("new@merchant.example", "REG-NEW"),
            {"token": token},
        ),
        Call("post", "/api/v1/auth/login", {"email": "new@merchant.example", "password": PASSWORD}),
        Call("post", "/api/v1/applications", {"name": "Web shop", "description": {"channel": "web"}}),
        Call("get", "/api/v1/applications", query={"page": "1", "limit": "20", "include": "apiKeys"}),
        Call(  # the application is enabled already
            "patch",
            "/api/v1/applications/{application_id}/status",
            {"isEnabled": True},
            path_values=app,
            expect=409,
        ),
        Call("post", "/api/v1/applications/{application_id}/api-keys", {"description": "x"}, path_values=app),
        Call("get", "/api/v1/applications/{application_id}/sessions", query={"page": "2"}, path_values=app),
        Call(
            "post",
            "/api/v1/sessions",
            {**session, "applicationId": shop.application_id},
            headers={"Idempotency-Key": "order-1001"},
        ),
        Call(
            "post",
            "/api/v1/sessions/{session_id}/refunds",
            {"amount": Decimal("10.00"), "reason": "DUPLICATE", "lineItems": [order_item]},
            headers={"Idempotency-Key": "refund-1"},
            path_values={"session_id": session_id},
            expect=422,  # the session is not paid: the refund rules refuse it
        ),
        Call(
            "get",
            "/api/v1/payment-methods",
            query={"currency": "PLN", "amount": "100.00", "applicationId": shop.application_id},
        ),
        Call(
            "post",
            "/api/v1/applications/{application_id}/providers",
            {"name": "sandbox", "paymentMethods": ["card"], "credentials": {"apiKey": SANDBOX_KEY}},
            path_values=app,
            expect=409,  # linked already
        ),
        Call(
            "patch",
            "/api/v1/applications/{application_id}/providers/{provider_name}/payment-methods",
            {"paymentMethods": ["card", "blik"]},
            path_values={**app, "provider_name": "sandbox"},
        ),
        Call(
            "patch",
            "/api/v1/applications/{application_id}/providers/{provider_name}/api-key",
            {"apiKey": SANDBOX_KEY},
            path_values={**app, "provider_name": "sandbox"},
        ),
        Call(
            "post",
            "/api/v1/applications/{application_id}/webhooks",
            {"url": "https://127.0.0.1:9/hooks", "subscribedEvents": ["session.completed", "refund.failed"]},
            path_values=app,
        ),
        Call(
            "patch",
            "/api/v1/applications/{application_id}/webhooks/{webhook_id}",
            {"url": "https://127.0.0.1:9/v2", "isActive": True, "subscribedEvents": ["refund.completed"]},
            path_values={**app, "webhook_id": webhook_id},
        ),
        Call(
            "post",
            "/api/v1/applications/{application_id}/routing/evaluate",
            {**session, "routing": {"default": {"type": "dynamic"}}},
            path_values=app,
        ),
    ]


# --- Breaking one constraint -------------------------------------------------------------------


def resolve(document: dict[str, Any], schema: Any) -> Any:
    while isinstance(schema, dict) and "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def value_branch(document: dict[str, Any], schema: dict[str, Any], value: Any) -> dict[str, Any]:
    """The schema a (non-null) value is held to: the branch of a nullable `anyOf`, resolved."""
    schema = resolve(document, schema)
    branches = [resolve(document, b) for b in schema.get("anyOf", []) if b != {"type": "null"}]
    if len(branches) == 1:
        return {**{k: v for k, v in schema.items() if k not in ("anyOf", "default")}, **branches[0]}
    return dict(schema)


def is_valid(document: dict[str, Any], schema: dict[str, Any], value: Any) -> bool:
    """Whether `value` is valid by `schema` (references into `document`), formats included."""
    key = json.dumps(schema, sort_keys=True)
    validator = VALIDATORS.get(key)
    if validator is None:
        root = {**schema, "components": document["components"]}
        validator = VALIDATORS[key] = jsonschema_rs.Draft202012Validator(root, validate_formats=True)
    return bool(validator.is_valid(json.loads(dumps_exact(value))))


VALIDATORS: dict[str, Any] = {}  # by schema: the document is the same in every test


def breaking_values(schema: dict[str, Any], keyword: str, value: Any) -> Iterator[Any]:
    """Candidates that break `keyword` of `schema` (a valid `value` stands for the kind of thing)."""
    bound = schema.get(keyword)
    step = Decimal(str(schema.get("multipleOf", 1)))
    shortest = max(schema.get("minLength", 0), 1)
    if keyword == "enum":
        yield from ("AAA", "ZZZ", "not.a.member", "NOT_A_MEMBER")
    elif keyword == "const":
        yield "other"
    elif keyword == "pattern":
        yield NUL.rjust(shortest, "a")
        yield from ("pln", "pl-PL", "1.2.3", "x", "PLN-1")
    elif keyword == "minLength":
        yield "a" * (bound - 1)
    elif keyword == "maxLength":
        yield "a" * (bound + 1)
    elif keyword == "format":
        yield from ("not-an-email", "not-a-uuid")
    elif keyword in ("minimum", "exclusiveMinimum"):
        yield Decimal(str(bound)) - (step if keyword == "minimum" else 0)
    elif keyword in ("maximum", "exclusiveMaximum"):
        yield Decimal(str(bound)) + (step if keyword == "maximum" else 0)
    elif keyword == "multipleOf":
        yield Decimal(str(value)) + step / 2
    elif keyword == "minItems":
        yield value[: bound - 1]
    elif keyword == "maxItems":
        yield value[:1] * (bound + 1)
    elif keyword == "maxProperties":
        first = next(iter(value.values()))
        yield {f"k{index}": first for index in range(bound + 1)}


def breaking_keys(
    document: dict[str, Any], schema: dict[str, Any], value: dict[str, Any]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Objects that break `propertyNames` or `additionalProperties: false` of `schema` by one key."""
    first = next(iter(value.values()), "x")
    names = {"type": "string", **schema.get("propertyNames", {})}
    for keyword in ("minLength", "maxLength", "pattern"):
        key = breaking(document, names, keyword, "") if keyword in names else None
        if key is not None:
            yield f"propertyNames.{keyword}", {**value, key: first}
    if schema.get("additionalProperties") is False:
        yield "additionalProperties", {**value, "unexpectedField": first}


def breaking(document: dict[str, Any], schema: dict[str, Any], keyword: str, value: Any) -> Any:
    """The first candidate that breaks `keyword` of `schema` and nothing else."""
    without = {key: item for key, item in schema.items() if key != keyword}
    for broken in breaking_values(schema, keyword, value):
        if not is_valid(document, schema, broken) and is_valid(document, without, broken):
            return broken
    return None


def violations_of(
    document: dict[str, Any], schema: dict[str, Any], value: Any, where: str
) -> Iterator[tuple[str, str, Any]]:
    """(place, keyword, broken value) for `value`, valid by `schema`, and everything inside it."""
    schema = value_branch(document, schema, value)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                for place, keyword, broken in violations_of(
                    document, properties[name], item, f"{where}.{name}"
                ):
                    yield place, keyword, {**value, name: broken}
            elif isinstance(schema.get("additionalProperties"), dict):
                for place, keyword, broken in violations_of(
                    document, schema["additionalProperties"], item, f"{where}.{name}"
                ):
                    yield place, keyword, {**value, name: broken}
        for name in schema.get("required", []):
            yield f"{where}.{name}", "required", {k: v for k, v in value.items() if k != name}
        for keyword, broken in breaking_keys(document, schema, value):
            yield where, keyword, broken
        if "maxProperties" in schema:
            for broken in breaking_values(schema, "maxProperties", value):
                yield where, "maxProperties", broken
    elif isinstance(value, list):
        if value and "items" in schema:
            for place, keyword, broken in violations_of(document, schema["items"], value[0], f"{where}.0"):
                yield place, keyword, [broken, *value[1:]]
        for keyword in ("minItems", "maxItems"):
            if keyword in schema:
                for broken in breaking_values(schema, keyword, value):
                    yield where, keyword, broken
    for keyword in (
        "enum", "const", "pattern", "minLength", "maxLength", "format", "minimum", "exclusiveMinimum",
        "maximum", "exclusiveMaximum", "multipleOf",
    ):  # fmt: skip
        if keyword not in schema or isinstance(value, dict | list):
            continue
        broken = breaking(document, schema, keyword, value)
        if broken is not None:
            yield where, keyword, broken


def query_value(schema: dict[str, Any], text: str) -> Any:
    return int(text) if schema.get("type") == "integer" else text


def violations(document: dict[str, Any], call: Call) -> Iterator[Violation]:
    operation = document["paths"][call.path][call.method]
    if call.body is not None:
        body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
        assert is_valid(document, body_schema, call.body), (call.method, call.path)
        for where, keyword, body in violations_of(document, body_schema, call.body, "body"):
            assert not is_valid(document, body_schema, body), (call.path, where, keyword)
            yield Violation(where, keyword, body, call.query, call.headers)
    for parameter in operation.get("parameters", []):
        name, schema = parameter["name"], parameter["schema"]
        if parameter["in"] == "query":
            if parameter.get("required"):
                query = {k: v for k, v in call.query.items() if k != name}
                yield Violation(f"query.{name}", "required", call.body, query, call.headers)
            given = call.query.get(name, "1" if schema.get("type") == "integer" else "a")
            for _, keyword, broken in violations_of(document, schema, query_value(schema, given), name):
                yield Violation(
                    f"query.{name}", keyword, call.body, {**call.query, name: str(broken)}, call.headers
                )
        elif parameter["in"] == "header" and name in call.headers:
            if parameter.get("required"):
                headers = {k: v for k, v in call.headers.items() if k != name}
                yield Violation(f"header.{name}", "required", call.body, call.query, headers)
            for _, keyword, broken in violations_of(document, schema, call.headers[name], name):
                yield Violation(
                    f"header.{name}", keyword, call.body, call.query, {**call.headers, name: broken}
                )


# --- The server ---------------------------------------------------------------------------------


@pytest.fixture
async def document(client: Client) -> dict[str, Any]:
    body: dict[str, Any] = await (await client.get(OPENAPI_PATH)).get_json()
    return body


@pytest.fixture
async def calls(client: Client, db: Database, settings: Settings) -> list[Call]:
    shop = await new_shop(client, db, settings)
    created = await create_session(client, shop, "paid-later")
    assert created.status_code == 201
    response = await client.post(
        f"/api/v1/applications/{shop.application_id}/webhooks",
        json={"url": "https://127.0.0.1:9/hooks"},
        headers=shop.merchant.headers,
    )
    assert response.status_code == 201
    invite = await issue_invite(db, settings, "new@merchant.example")
    calls = valid_calls(
        shop, (await created.get_json())["sessionId"], (await response.get_json())["id"], invite.token
    )
    for call in calls:
        call.headers = {**credentials(document_security(call), shop), **call.headers}
    return calls


def document_security(call: Call) -> str:
    if call.path in ("/api/v1/merchants/signup", "/api/v1/auth/login"):
        return "none"
    api_key = {"/api/v1/sessions", "/api/v1/sessions/{session_id}/refunds", "/api/v1/payment-methods"}
    return "apiKeyAuth" if call.path in api_key else "bearerAuth"


def credentials(scheme: str, shop: Shop) -> dict[str, str]:
    return {"apiKeyAuth": shop.headers, "bearerAuth": shop.merchant.headers}.get(scheme, {})


async def send(client: Client, call: Call, body: Any, query: dict[str, str], headers: dict[str, str]) -> Any:
    url = call.url + (f"?{urlencode(query)}" if query else "")
    if body is None:
        return await client.open(url, method=call.method.upper(), headers=headers)
    return await client.open(
        url,
        method=call.method.upper(),
        data=dumps_exact(body),
        headers={**headers, "Content-Type": "application/json"},
    )


async def test_every_documented_violation_is_refused_with_400_in_shape_a(
    client: Client, document: dict[str, Any], calls: list[Call]
) -> None:
    error_a = {"$ref": "#/components/schemas/ErrorA"}
    sent: dict[str, int] = {}
    accepted = []
    for call in calls:
        for violation in violations(document, call):
            response = await send(client, call, violation.body, violation.query, violation.headers)
            answer = await response.get_json()
            label = f"{call.method.upper()} {call.path} {violation.where} {violation.keyword}"
            if response.status_code != 400 or not is_valid(document, error_a, answer):
                accepted.append(f"{label}: {response.status_code} {answer}")
            sent[violation.keyword] = sent.get(violation.keyword, 0) + 1
    assert accepted == []
    # Every kind of constraint the document states was broken somewhere.
    assert set(sent) >= {
        "enum", "const", "pattern", "minLength", "maxLength", "format", "minimum", "exclusiveMinimum",
        "maximum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "maxProperties", "required",
        "additionalProperties", "propertyNames.pattern",
    }, sent  # fmt: skip
    assert sum(sent.values()) >= 200, sent


async def test_the_valid_requests_are_valid_by_the_document_and_accepted(
    client: Client, document: dict[str, Any], calls: list[Call]
) -> None:
    for call in calls:
        operation = document["paths"][call.path][call.method]
        if call.body is not None:
            body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
            assert is_valid(document, body_schema, call.body), call.path
        response = await send(client, call, call.body, call.query, call.headers)
        answer = await response.get_json()
        if call.expect is not None:
            assert response.status_code == call.expect, (call.method, call.path, answer)
        else:
            assert 200 <= response.status_code < 300, (call.method, call.path, answer)
        schema = operation["responses"][str(response.status_code)]["content"]["application/json"]["schema"]
        assert is_valid(document, schema, answer), (call.method, call.path, answer)


async def test_optional_bodies_may_be_left_out(
    client: Client, document: dict[str, Any], calls: list[Call]
) -> None:
    for call in calls:
        operation = document["paths"][call.path][call.method]
        if "requestBody" not in operation or operation["requestBody"]["required"]:
            continue
        response = await send(client, call, None, call.query, call.headers)
        assert response.status_code in (201, 422), (call.path, await response.get_json())


def test_breaking_values_leave_the_other_constraints_alone() -> None:
    # The helpers themselves: a NUL keeps the length a string needs, a bound moves by one step.
    assert next(breaking_values({"minLength": 16, "pattern": "x"}, "pattern", "")) == "a" * 15 + NUL
    assert next(breaking_values({"minimum": 0.01, "multipleOf": 0.001}, "minimum", 1)) == Decimal("0.009")
    assert next(breaking_values({"maximum": 100}, "maximum", 1)) == 101
