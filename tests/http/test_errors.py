"""Shape A error bodies: every refusal of the HTTP layer, and bad input is never a 500."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any

import pytest
from quart import Response

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from tests.helpers import Client, Merchant

SHAPE_A_FIELDS = {"error", "message", "code", "details", "retryAfter", "requestId"}
SECRET_DETAIL = "password=hunter2 in /srv/payorch/internal.py"


async def shape_a_body(response: Response, status: int) -> dict[str, Any]:
    """The body of `response`, checked to be shape A for `status`."""
    assert response.status_code == status, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    assert set(body) <= SHAPE_A_FIELDS
    assert body["code"] == status
    assert body["error"] == HTTPStatus(status).phrase
    assert isinstance(body["message"], str) and body["message"]
    return body


def fields_named(body: dict[str, Any]) -> list[str]:
    details = body["details"]
    assert isinstance(details, list)
    for item in details:
        assert set(item) == {"field", "message"}
    return [item["field"] for item in details]


async def post_raw(client: Client, merchant: Merchant, data: str | bytes) -> Response:
    return await client.post(
        "/api/v1/applications",
        data=data,
        headers={**merchant.headers, "Content-Type": "application/json"},
    )


async def test_unknown_route_is_404_in_shape_a(client: Client) -> None:
    response = await client.get("/api/v1/no-such-thing")
    await shape_a_body(response, 404)


async def test_wrong_method_is_405_in_shape_a(client: Client) -> None:
    response = await client.delete("/api/v1/applications")
    await shape_a_body(response, 405)


async def test_wrong_method_names_the_allowed_methods(client: Client) -> None:
    response = await client.delete("/api/v1/applications")
    allowed = {method.strip() for method in response.headers["Allow"].split(",")}
    assert {"GET", "POST"} <= allowed
    assert "DELETE" not in allowed


async def test_malformed_json_body_is_400(client: Client, merchant: Merchant) -> None:
    response = await post_raw(client, merchant, '{"name": "Shop",')
    await shape_a_body(response, 400)


async def test_empty_json_body_is_400(client: Client, merchant: Merchant) -> None:
    response = await post_raw(client, merchant, b"")
    await shape_a_body(response, 400)


async def test_json_body_that_is_not_an_object_is_400(client: Client, merchant: Merchant) -> None:
    response = await client.post("/api/v1/applications", json=["Shop"], headers=merchant.headers)
    body = await shape_a_body(response, 400)
    assert fields_named(body) == ["body"]


async def test_body_that_is_not_json_is_400(client: Client, merchant: Merchant) -> None:
    response = await client.post(
        "/api/v1/applications",
        data="name=Shop",
        headers={**merchant.headers, "Content-Type": "application/x-www-form-urlencoded"},
    )
    await shape_a_body(response, 400)


async def test_wrong_type_is_400_naming_the_field(client: Client, merchant: Merchant) -> None:
    response = await client.post("/api/v1/applications", json={"name": 5}, headers=merchant.headers)
    body = await shape_a_body(response, 400)
    assert fields_named(body) == ["name"]


async def test_string_for_a_boolean_is_400_naming_the_field(client: Client, merchant: Merchant) -> None:
    created = await client.post("/api/v1/applications", json={"name": "Shop"}, headers=merchant.headers)
    application_id = (await created.get_json())["id"]
    response = await client.patch(
        f"/api/v1/applications/{application_id}/status", json={"isEnabled": "false"}, headers=merchant.headers
    )
    body = await shape_a_body(response, 400)
    assert fields_named(body) == ["isEnabled"]


async def test_missing_required_field_is_400_naming_the_field(client: Client, merchant: Merchant) -> None:
    response = await client.post("/api/v1/applications", json={}, headers=merchant.headers)
    body = await shape_a_body(response, 400)
    assert fields_named(body) == ["name"]


async def test_unknown_field_is_400_naming_the_field(client: Client, merchant: Merchant) -> None:
    response = await client.post(
        "/api/v1/applications", json={"name": "Shop", "colour": "red"}, headers=merchant.headers
    )
    body = await shape_a_body(response, 400)
    assert fields_named(body) == ["colour"]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_non_finite_number_in_json_is_400(client: Client, merchant: Merchant, constant: str) -> None:
    # `description` takes any object: were the constant parsed, it would reach the database.
    response = await post_raw(client, merchant, f'{{"name": "Shop", "description": {{"x": {constant}}}}}')
    await shape_a_body(response, 400)


async def test_fraction_inside_description_is_not_a_500(client: Client, merchant: Merchant) -> None:
    response = await client.post(
        "/api/v1/applications", json={"name": "Shop", "description": {"rate": 0.1}}, headers=merchant.headers
    )
    assert response.status_code == 201


@pytest.fixture
async def small_body_app(settings: Settings, db: Database) -> AsyncIterator[PayorchApp]:
    """An app that accepts request bodies of at most 64 bytes."""
    small = settings.model_copy(update={"server": settings.server.model_copy(update={"max_body_bytes": 64})})
    async with open_runtime(small, db) as runtime:
        yield runtime.app


async def test_body_over_max_body_bytes_is_413(small_body_app: PayorchApp, merchant: Merchant) -> None:
    response = await small_body_app.test_client().post(
        "/api/v1/applications", json={"name": "S" * 100}, headers=merchant.headers
    )
    await shape_a_body(response, 413)


async def test_body_within_max_body_bytes_is_accepted(small_body_app: PayorchApp, merchant: Merchant) -> None:
    response = await small_body_app.test_client().post(
        "/api/v1/applications", json={"name": "Shop"}, headers=merchant.headers
    )
    assert response.status_code == 201


@pytest.fixture
def failing_app(app: PayorchApp) -> PayorchApp:
    """The app with one extra route that fails the way a bug would."""

    @app.get("/test-only/failure")
    async def fail() -> str:
        raise RuntimeError(SECRET_DETAIL)

    return app


async def test_unexpected_exception_is_500_in_shape_a(failing_app: PayorchApp) -> None:
    response = await failing_app.test_client().get("/test-only/failure")
    await shape_a_body(response, 500)


async def test_500_body_carries_the_request_id_of_the_response_header(failing_app: PayorchApp) -> None:
    response = await failing_app.test_client().get("/test-only/failure")
    body = await shape_a_body(response, 500)
    assert body["requestId"]
    assert body["requestId"] == response.headers["X-Request-Id"]


async def test_500_body_does_not_leak_the_exception(failing_app: PayorchApp) -> None:
    response = await failing_app.test_client().get("/test-only/failure")
    text = await response.get_data(as_text=True)
    assert SECRET_DETAIL not in text
    assert "RuntimeError" not in text
    assert "Traceback" not in text


async def test_500_is_logged_with_its_request_id(
    failing_app: PayorchApp, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="payorch.http")
    response = await failing_app.test_client().get("/test-only/failure")
    errors = [record for record in caplog.records if record.name == "payorch.http"]
    assert len(errors) == 1
    assert errors[0].levelno == logging.ERROR
    assert errors[0].requestId == response.headers["X-Request-Id"]  # type: ignore[attr-defined]
    assert errors[0].exc_info is not None and errors[0].exc_info[0] is RuntimeError


async def test_a_lost_database_connection_is_503_with_retry_after_request_id_and_no_address(
    client: Client, merchant: Merchant, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise ConnectionResetError("connection to 10.0.0.5:5432 lost")

    monkeypatch.setattr("payorch.storage.applications.list_applications", broken)
    response = await client.get("/api/v1/applications", headers=merchant.headers)
    body = await shape_a_body(response, 503)
    assert response.headers["Retry-After"]
    assert body["requestId"] == response.headers["X-Request-Id"]
    assert "10.0.0.5" not in await response.get_data(as_text=True)


async def test_body_that_is_not_utf8_is_400(client: Client, merchant: Merchant) -> None:
    response = await client.post(
        "/api/v1/applications",
        data=b'{"name": "\xff\xfe"}',
        headers={**merchant.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert (await response.get_json())["code"] == 400
