"""GET /api/v1/openapi.json describes every endpoint, and /docs renders it with nothing from outside."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any, get_args
from urllib.parse import urlsplit

import jsonschema_rs
import pytest
import trio

from payorch.engine.body_types import EVENT_TYPES, MONEY_DESCRIPTION
from payorch.engine.payments.refund_rules import REFUND_REASONS
from payorch.http import openapi
from payorch.http.app import create_app
from payorch.http.openapi import PayorchOpenAPIProvider
from payorch.http.services import PayorchApp
from payorch.providers.sandbox import SandboxProvider
from payorch.providers.sandbox.pages import serve_checkout_pages
from payorch.runtime import Runtime
from payorch.values.errors import ErrorCode
from payorch.values.money import known_currencies
from payorch.values.pagination import MAX_PAGE
from payorch.values.statuses import DeliveryStatus, RefundStatus, SessionStatus, WebhookTestStatus
from tests.helpers import Client

OPENAPI_PATH = "/api/v1/openapi.json"
UNAUTHENTICATED = {
    ("post", "/api/v1/merchants/signup"),
    ("post", "/api/v1/users/signup"),
    ("post", "/api/v1/auth/login"),
    ("post", "/api/v1/provider-events/{provider_name}/{application_id}"),
}
# Operations a merchant's server calls with its API key (or the dashboard with a JWT).
JWT_OR_API_KEY = {
    ("post", "/api/v1/sessions"),
    ("get", "/api/v1/sessions/{session_id}"),
    ("get", "/api/v1/applications/{application_id}/sessions"),
    ("post", "/api/v1/sessions/{session_id}/refunds"),
    ("get", "/api/v1/payment-methods"),
}
HTTP_METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture
async def document(client: Client) -> dict[str, Any]:
    response = await client.get(OPENAPI_PATH)
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    body: dict[str, Any] = await response.get_json()
    return body


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    ]


def api_operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [item for item in operations(document) if item[1].startswith("/api/v1/")]


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = document["components"]["schemas"][name]
    return schema


async def test_the_document_is_openapi_3_1(document: dict[str, Any]) -> None:
    assert re.fullmatch(r"3\.1\.\d+", document["openapi"])
    assert document["info"]["title"] == "payorch"
    assert document["info"]["version"]
    assert document["components"]["securitySchemes"] == {
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": document["components"]["securitySchemes"]["bearerAuth"]["description"],
        },
        "apiKeyAuth": {
            "type": "apiKey",
            "in": "header",
            "name": "X-API-Key",
            "description": document["components"]["securitySchemes"]["apiKeyAuth"]["description"],
        },
    }


async def test_the_document_is_built_once_and_then_served_as_built(
    app: PayorchApp, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openapi, "_DOCUMENTS", {})  # as if no app of this process had built it yet
    provider = app.extensions["QUART_SCHEMA"].openapi_provider
    builds = 0
    build = provider.schema

    def counted() -> dict[str, Any]:
        nonlocal builds
        builds += 1
        return build()

    monkeypatch.setattr(provider, "schema", counted)
    bodies = []
    for _ in range(3):
        response = await client.get(OPENAPI_PATH)
        assert response.status_code == 200
        assert response.mimetype == "application/json"
        bodies.append(await response.get_data())
    assert builds == 1
    assert bodies[0] == bodies[1] == bodies[2]


async def test_the_document_is_built_off_the_event_loop_once_for_concurrent_first_requests(
    app: PayorchApp, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openapi, "_DOCUMENTS", {})
    provider = app.extensions["QUART_SCHEMA"].openapi_provider
    threads = []
    build = provider.schema

    def recorded() -> dict[str, Any]:
        threads.append(threading.current_thread())
        return build()

    monkeypatch.setattr(provider, "schema", recorded)
    statuses = []

    async def fetch() -> None:
        statuses.append((await client.get(OPENAPI_PATH)).status_code)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(fetch)
    assert statuses == [200, 200, 200]
    assert len(threads) == 1
    assert threads[0] is not threading.main_thread()


async def test_the_document_validates_against_the_openapi_3_1_schema(document: dict[str, Any]) -> None:
    # The OpenAPI 3.1 meta-schema as schemathesis (a dev dependency) bundles it.
    from schemathesis.specs.openapi.definitions import OPENAPI_31

    errors = [str(error) for error in jsonschema_rs.validator_for(OPENAPI_31).iter_errors(document)]
    assert errors == []


# Pages for a browser under /api/v1, not operations of the JSON API: the signup pages the invites'
# `signupUrl`s open (API.md, "Accounts"; docs/api.md, "Users and roles"), documented in docs/console.md.
BROWSER_PAGES = {("get", "/api/v1/merchants/signup"), ("get", "/api/v1/users/signup")}


async def test_every_api_route_is_documented(app: PayorchApp, document: dict[str, Any]) -> None:
    routes = set()
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/") or rule.rule == OPENAPI_PATH:
            continue
        path = re.sub(r"<(?:[^:<>]*:)?([^<>]+)>", r"{\1}", rule.rule)
        routes |= {(method.lower(), path) for method in rule.methods or () if method.lower() in HTTP_METHODS}
    documented = {(method, path) for method, path, _ in api_operations(document)}
    assert routes, "no route under /api/v1"
    assert routes - BROWSER_PAGES == documented
    assert OPENAPI_PATH not in document["paths"]


async def test_operations_have_unique_ids_summaries_and_tags(document: dict[str, Any]) -> None:
    ids = [operation["operationId"] for _, _, operation in operations(document)]
    assert len(ids) == len(set(ids))
    declared_tags = {tag["name"] for tag in document["tags"]}
    for method, path, operation in api_operations(document):
        assert operation.get("summary"), (method, path)
        assert operation.get("tags") and set(operation["tags"]) <= declared_tags, (method, path)


async def test_every_operation_but_signup_login_and_provider_events_needs_credentials(
    document: dict[str, Any],
) -> None:
    for method, path, operation in api_operations(document):
        if (method, path) in UNAUTHENTICATED:
            assert operation.get("security", []) == [], (method, path)
        elif (method, path) in JWT_OR_API_KEY:
            # Either scheme: two alternatives, not both at once.
            assert operation["security"] == [{"bearerAuth": []}, {"apiKeyAuth": []}], (method, path)
        else:
            assert operation["security"] == [{"bearerAuth": []}], (method, path)


async def test_responses_document_success_and_error_shapes(document: dict[str, Any]) -> None:
    for method, path, operation in api_operations(document):
        statuses = {int(status) for status in operation["responses"]}
        assert any(200 <= status < 300 for status in statuses), (method, path)
        assert 500 in statuses, (method, path)
        if (method, path) not in UNAUTHENTICATED:
            assert {401, 429} <= statuses, (method, path)
        if "{" in path:
            assert 404 in statuses, (method, path)
        if "requestBody" in operation or any(p["in"] == "query" for p in operation.get("parameters", [])):
            assert 400 in statuses, (method, path)
        for status, response in operation["responses"].items():
            assert response["description"], (method, path, status)
            if int(status) == 204:  # no body (RFC 9110, 15.3.5)
                assert "content" not in response, (method, path)
                continue
            schema = resolve(document, response["content"]["application/json"]["schema"])
            if int(status) >= 400:
                assert schema["title"] in ("ErrorA", "ErrorB"), (method, path, status)
    error_a = document["components"]["schemas"]["ErrorA"]
    assert set(error_a["required"]) == {"error", "message", "code"}
    assert set(error_a["properties"]) == {"error", "message", "code", "details", "retryAfter", "requestId"}
    error_b = document["components"]["schemas"]["ErrorB"]
    assert set(error_b["required"]) == {"message", "statusCode", "code"}
    assert error_b["properties"]["code"]["type"] == "string"


async def test_idempotency_rules_are_documented_in_shape_b(document: dict[str, Any]) -> None:
    for path in ("/api/v1/sessions", "/api/v1/sessions/{session_id}/refunds"):
        operation = document["paths"][path]["post"]
        headers = [p for p in operation["parameters"] if p["in"] == "header"]
        assert headers == [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": True,
                "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                "description": headers[0]["description"],
            }
        ]
        for status in ("409", "422"):
            assert operation["responses"][status]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorB"
            }
        assert "Retry-After" in operation["responses"]["409"]["headers"]
    refunds = document["paths"]["/api/v1/sessions/{session_id}/refunds"]["post"]
    assert {"201", "202"} <= set(refunds["responses"])


async def test_amounts_are_decimal_json_numbers_in_major_units(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    money = {"type": "number", "format": "decimal", "multipleOf": 0.001, "description": MONEY_DESCRIPTION}
    assert schemas["SessionRecord"]["properties"]["amount"] == money
    assert schemas["RefundRecord"]["properties"]["amount"] == money
    assert schemas["RefundCreated"]["properties"]["amount"] == money
    total = schemas["SessionAmount"]["properties"]["total"]
    assert total.items() >= {**money, "exclusiveMinimum": 0}.items()
    assert schemas["SessionAmount"]["properties"]["shipping"]["default"] == 0
    assert schemas["OrderItem"]["properties"]["unitPrice"].items() >= money.items()
    refund_amount = schemas["RefundCreateRequest"]["properties"]["amount"]["anyOf"][0]
    assert refund_amount.items() >= {**money, "minimum": 0.01}.items()
    bound = schemas["RoutingAmountRange"]["properties"]["min"]  # a bound, not an amount: any decimals
    assert bound["format"] == "decimal" and "multipleOf" not in bound
    score = schemas["Routing"]["properties"]["score"]
    assert score == {"type": "number", "minimum": 0, "maximum": 1}


async def test_currencies_are_the_ones_payorch_knows(document: dict[str, Any]) -> None:
    currency = document["components"]["schemas"]["SessionCreateRequest"]["properties"]["currency"]
    assert currency["enum"] == list(known_currencies())
    assert {"PLN", "JPY", "KWD", "XOF"} <= set(currency["enum"])
    assert not {"XAU", "XTS", "XXX", "CLF"} & set(currency["enum"])
    lookup = {p["name"]: p for p in document["paths"]["/api/v1/payment-methods"]["get"]["parameters"]}
    assert lookup["currency"]["schema"]["enum"] == currency["enum"]


async def test_enumerations_are_documented_from_the_types_the_code_uses(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]

    def listed(schema: dict[str, Any]) -> list[str]:
        (branch,) = [item for item in schema.get("anyOf", [schema]) if item != {"type": "null"}]
        assert branch["type"] == "string"
        return list(branch["enum"])

    assert listed(schemas["SessionRecord"]["properties"]["status"]) == list(SessionStatus)
    assert listed(schemas["SessionCreated"]["properties"]["status"]) == list(SessionStatus)
    assert listed(schemas["RefundRecord"]["properties"]["status"]) == list(RefundStatus)
    assert listed(schemas["RefundCreated"]["properties"]["status"]) == list(RefundStatus)
    assert listed(schemas["RefundRecord"]["properties"]["reason"]) == list(REFUND_REASONS)
    assert listed(schemas["WebhookConfig"]["properties"]["subscribedEvents"]["items"]) == list(EVENT_TYPES)
    assert listed(schemas["Delivery"]["properties"]["status"]) == list(DeliveryStatus)
    assert listed(schemas["WebhookConfig"]["properties"]["lastTestStatus"]) == list(WebhookTestStatus)
    assert listed(schemas["ErrorB"]["properties"]["code"]) == list(get_args(ErrorCode))


async def test_required_query_parameters_are_marked_required(document: dict[str, Any]) -> None:
    parameters = {p["name"]: p for p in document["paths"]["/api/v1/payment-methods"]["get"]["parameters"]}
    assert parameters["currency"]["required"] is True
    assert parameters["amount"]["required"] is True
    assert not parameters["applicationId"].get("required")
    assert parameters["applicationId"]["schema"] == {"type": "string", "format": "uuid"}
    listing = {p["name"]: p for p in document["paths"]["/api/v1/applications"]["get"]["parameters"]}
    assert (listing["page"]["schema"]["minimum"], listing["page"]["schema"]["maximum"]) == (1, MAX_PAGE)
    assert listing["limit"]["schema"]["maximum"] == 100
    assert listing["include"]["schema"] == {"const": "apiKeys", "type": "string"}


async def test_bodies_that_may_be_left_out_are_not_required(document: dict[str, Any]) -> None:
    optional = {
        ("post", "/api/v1/applications/{application_id}/api-keys"),
        ("post", "/api/v1/sessions/{session_id}/refunds"),
    }
    for method, path, operation in api_operations(document):
        if "requestBody" in operation:
            assert operation["requestBody"]["required"] is ((method, path) not in optional), (method, path)


async def test_subscribed_events_are_named_from_the_event_types(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for name in ("WebhookCreateRequest", "WebhookUpdateRequest"):
        (events, _) = schemas[name]["properties"]["subscribedEvents"]["anyOf"]
        assert events["items"] == {"type": "string", "enum": list(EVENT_TYPES)}
        assert (events["minItems"], events["maxItems"]) == (1, 20)


async def test_request_text_refuses_nul(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert schemas["Organization"]["properties"]["legalBusinessName"]["pattern"] == "^[^\\u0000]*$"
    assert schemas["SessionCreateRequest"]["properties"]["orderReference"]["pattern"] == "^[^\\u0000]*$"
    assert schemas["SessionCreateRequest"]["properties"]["currency"]["pattern"] == "^[A-Z]{3}$"
    information = schemas["SessionCreateRequest"]["properties"]["additionalInformation"]["anyOf"][0]
    assert information["propertyNames"]["pattern"] == information["additionalProperties"]["pattern"]


async def test_each_error_status_names_its_shape(document: dict[str, Any]) -> None:
    for method, path, operation in api_operations(document):
        for status, response in operation["responses"].items():
            if int(status) < 400:
                continue
            shape = response["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
            assert response["description"].startswith(f"Shape {shape[-1]} (`{shape}`"), (method, path, status)
    session = document["paths"]["/api/v1/sessions"]["post"]["responses"]
    assert "NO_PROVIDER_AVAILABLE" in session["422"]["description"]
    assert "REFUND_EXCEEDS_BALANCE" not in session["422"]["description"]
    refund = document["paths"]["/api/v1/sessions/{session_id}/refunds"]["post"]["responses"]
    assert "REFUND_EXCEEDS_BALANCE" in refund["422"]["description"]
    assert "NO_PROVIDER_AVAILABLE" not in refund["422"]["description"]
    applications = document["paths"]["/api/v1/applications"]["post"]["responses"]
    assert "Retry-After" not in applications["409"].get("headers", {})  # shape A 409: no retry asked


async def test_application_id_says_when_it_is_required(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    described = schemas["SessionCreateRequest"]["properties"]["applicationId"]["description"]
    assert "Required with an access token" in described
    assert "applicationId" not in schemas["SessionCreateRequest"]["required"]


async def test_docs_page_renders_the_document_with_local_assets_only(client: Client) -> None:
    response = await client.get("/docs")
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    page = await response.get_data(as_text=True)
    assert OPENAPI_PATH in page
    references = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert references
    for reference in references:
        parts = urlsplit(reference)
        assert not parts.scheme and not parts.netloc, reference  # same host, nothing from outside
        asset = await client.get(reference)
        assert asset.status_code == 200, reference
    assert not re.search(r"https?://", page)
    bundle = await client.get("/docs/assets/swagger-ui-bundle.js")
    assert bundle.mimetype == "text/javascript"
    assert b"SwaggerUIBundle" in await bundle.get_data()
    start = await client.get("/docs/assets/payorch-docs.js")
    assert b"validatorUrl: null" in await start.get_data()  # no badge fetched from swagger.io


async def test_docs_serve_no_other_file(client: Client) -> None:
    for name in ("LICENSE", "..%2F__init__.py", "swagger-editor-bundle.js", "index.css"):
        response = await client.get(f"/docs/assets/{name}")
        assert response.status_code == 404, name
    assert "/docs" not in (await (await client.get(OPENAPI_PATH)).get_json())["paths"]


REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
# Set to write the served document to docs/openapi.json instead of comparing it.
UPDATE_REFERENCE = "UPDATE_OPENAPI_REFERENCE"


def reference_text(document: dict[str, Any]) -> str:
    """The document as docs/openapi.json keeps it: sorted keys, indented, without `servers` (the
    address a test server was started on)."""
    kept = {key: value for key, value in document.items() if key != "servers"}
    return json.dumps(kept, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


async def test_the_reference_in_the_repository_is_the_document_served(document: dict[str, Any]) -> None:
    # After an API change: UPDATE_OPENAPI_REFERENCE=1 .venv/bin/pytest tests/http/test_openapi.py
    served = reference_text(document)
    if os.environ.get(UPDATE_REFERENCE):
        REFERENCE.write_text(served, encoding="utf-8")
    assert REFERENCE.read_text(encoding="utf-8") == served, (
        "docs/openapi.json is not the document payorch serves: run "
        f"{UPDATE_REFERENCE}=1 .venv/bin/pytest tests/http/test_openapi.py"
    )


async def test_another_app_with_the_same_routes_answers_the_document_already_built(
    client: Client, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await (await client.get(OPENAPI_PATH)).get_data()

    def build_again(self: PayorchOpenAPIProvider) -> dict[str, Any]:
        raise AssertionError("the document was built again")

    monkeypatch.setattr(PayorchOpenAPIProvider, "schema", build_again)
    other = create_app(runtime.services)  # and the sandbox's pages, as the runtime's app has them
    sandbox = runtime.services.context.providers.get("sandbox")
    assert isinstance(sandbox, SandboxProvider)
    serve_checkout_pages(other, sandbox)
    response = await other.test_client().get(OPENAPI_PATH)
    assert response.status_code == 200
    assert await response.get_data() == first
