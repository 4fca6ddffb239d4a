"""Request ids on every response, and one JSON access-log line per request."""

from __future__ import annotations

import json
import logging
import re
import sys

import pytest

from payorch.config import Settings
from payorch.http.requestlog import is_acceptable_request_id
from payorch.http.services import PayorchApp
from payorch.logs import JsonFormatter, LineRecord, WorkerFilter, log_line
from payorch.storage.database import Database
from tests.helpers import Client, Merchant, create_session, new_api_key, new_application, new_shop

ACCESS_LOGGER = "payorch.access"


def access_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == ACCESS_LOGGER]


@pytest.fixture
def access_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    return caplog


# --- X-Request-Id ---------------------------------------------------------------------------------


async def test_successful_response_carries_a_request_id(client: Client) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.headers["X-Request-Id"]


async def test_error_response_carries_a_request_id(client: Client) -> None:
    response = await client.get("/api/v1/no-such-thing")
    assert response.status_code == 404
    assert response.headers["X-Request-Id"]


async def test_unauthenticated_response_carries_a_request_id(client: Client) -> None:
    response = await client.get("/api/v1/applications")
    assert response.status_code == 401
    assert response.headers["X-Request-Id"]


async def test_each_request_gets_its_own_request_id(client: Client) -> None:
    first = await client.get("/healthz")
    second = await client.get("/healthz")
    assert first.headers["X-Request-Id"] != second.headers["X-Request-Id"]
    for response in (first, second):  # req_ and 128 random bits in hex
        assert re.fullmatch(r"req_[0-9a-f]{32}", response.headers["X-Request-Id"])


@pytest.mark.parametrize("offered", ["abc-123", "trace_01.J", "x" * 128])
async def test_callers_sane_request_id_is_echoed(client: Client, offered: str) -> None:
    response = await client.get("/healthz", headers={"X-Request-Id": offered})
    assert response.headers["X-Request-Id"] == offered


@pytest.mark.parametrize(
    "offered",
    ["has space", "x" * 129, "", "semi;colon", "<script>", "caf\u00e9"],
    ids=["space", "129-chars", "empty", "semicolon", "markup", "non-ascii"],
)
async def test_callers_unsafe_request_id_is_replaced(client: Client, offered: str) -> None:
    response = await client.get("/healthz", headers={"X-Request-Id": offered})
    replaced = response.headers["X-Request-Id"]
    assert replaced
    assert replaced != offered
    assert " " not in replaced and len(replaced) <= 128


@pytest.mark.parametrize("offered", ["abc\n", "abc\ndef", "abc\r\nSet-Cookie: x=1"])
def test_request_id_with_a_line_break_is_not_acceptable(offered: str) -> None:
    # Quart refuses line breaks in request headers before any handler runs, so the rule is
    # pinned directly: a trailing newline must not slip past the pattern's end anchor.
    assert not is_acceptable_request_id(offered)


# --- the access log -------------------------------------------------------------------------------


async def test_each_request_logs_one_access_line(
    client: Client, access_log: pytest.LogCaptureFixture
) -> None:
    await client.get("/healthz")
    assert len(access_records(access_log)) == 1


async def test_access_line_carries_method_path_and_status(
    client: Client, access_log: pytest.LogCaptureFixture
) -> None:
    await client.get("/healthz?probe=1")
    [record] = access_records(access_log)
    assert record.method == "GET"  # type: ignore[attr-defined]
    assert record.path == "/healthz"  # type: ignore[attr-defined]
    assert record.status == 200  # type: ignore[attr-defined]


async def test_access_line_carries_the_duration_in_milliseconds(
    client: Client, access_log: pytest.LogCaptureFixture
) -> None:
    await client.get("/healthz")
    [record] = access_records(access_log)
    duration = record.durationMs  # type: ignore[attr-defined]
    assert isinstance(duration, float | int) and 0 <= duration < 60_000


async def test_access_line_carries_the_request_id_of_the_response(
    client: Client, access_log: pytest.LogCaptureFixture
) -> None:
    response = await client.get("/healthz")
    [record] = access_records(access_log)
    assert record.requestId == response.headers["X-Request-Id"]  # type: ignore[attr-defined]


async def test_access_line_of_an_error_carries_its_status(
    client: Client, access_log: pytest.LogCaptureFixture
) -> None:
    await client.post("/healthz")
    [record] = access_records(access_log)
    assert record.status == 405  # type: ignore[attr-defined]


async def test_access_line_names_the_application_a_request_concerns(
    client: Client, merchant: Merchant, access_log: pytest.LogCaptureFixture
) -> None:
    application = await new_application(client, merchant)
    access_log.clear()
    await client.get(f"/api/v1/applications/{application['id']}", headers=merchant.headers)
    [record] = access_records(access_log)
    assert record.applicationId == application["id"]  # type: ignore[attr-defined]


async def test_access_line_names_the_application_of_an_api_key(
    client: Client, merchant: Merchant, access_log: pytest.LogCaptureFixture
) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    access_log.clear()
    await client.get(f"/api/v1/applications/{application['id']}/sessions", headers={"X-API-Key": key["key"]})
    [record] = access_records(access_log)
    assert record.applicationId == application["id"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("credential", ["api key", "access token"])
async def test_access_line_of_a_session_read_names_the_session_s_application(
    client: Client, db: Database, settings: Settings, access_log: pytest.LogCaptureFixture, credential: str
) -> None:
    shop = await new_shop(client, db, settings)
    created = await (await create_session(client, shop, "read-logged")).get_json()
    headers = shop.headers if credential == "api key" else shop.merchant.headers
    access_log.clear()
    response = await client.get(f"/api/v1/sessions/{created['sessionId']}", headers=headers)
    assert response.status_code == 200
    [record] = access_records(access_log)
    assert record.applicationId == shop.application_id  # type: ignore[attr-defined]


async def test_access_line_of_a_request_without_application_names_none(
    client: Client, access_log: pytest.LogCaptureFixture
) -> None:
    await client.get("/healthz")
    [record] = access_records(access_log)
    assert getattr(record, "applicationId", None) is None


async def test_access_line_is_written_for_an_unexpected_error(
    app: PayorchApp, access_log: pytest.LogCaptureFixture
) -> None:
    @app.get("/test-only/failure")
    async def fail() -> str:
        raise RuntimeError("bug")

    response = await app.test_client().get("/test-only/failure")
    [record] = access_records(access_log)
    assert record.status == 500  # type: ignore[attr-defined]
    assert record.requestId == response.headers["X-Request-Id"]  # type: ignore[attr-defined]


# --- rendering ------------------------------------------------------------------------------------


async def test_json_formatter_renders_an_access_line_as_one_json_object(
    client: Client, access_log: pytest.LogCaptureFixture
) -> None:
    response = await client.get("/healthz")
    [record] = access_records(access_log)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    rendered = json.loads(line)
    assert rendered["logger"] == ACCESS_LOGGER
    assert rendered["level"] == "info"
    assert rendered["method"] == "GET"
    assert rendered["path"] == "/healthz"
    assert rendered["status"] == 200
    assert rendered["requestId"] == response.headers["X-Request-Id"]
    assert isinstance(rendered["durationMs"], float | int)
    assert rendered["remoteAddr"] == "<local>"  # what the test client reports as its address


def test_json_formatter_keeps_a_traceback_on_the_same_line() -> None:
    try:
        raise RuntimeError("first line\nsecond line")
    except RuntimeError:
        record = logging.getLogger("payorch.http").makeRecord(
            "payorch.http",
            logging.ERROR,
            __file__,
            1,
            "unhandled error",
            (),
            sys.exc_info(),
            extra={"requestId": "req_1"},
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    rendered = json.loads(line)
    assert rendered["requestId"] == "req_1"
    assert "RuntimeError" in rendered["exception"]


def test_json_formatter_renders_values_json_cannot_hold_as_text() -> None:
    record = logging.makeLogRecord(
        {"name": "payorch.test", "levelno": logging.INFO, "levelname": "INFO", "msg": "x", "where": object()}
    )
    rendered = json.loads(JsonFormatter().format(record))
    assert isinstance(rendered["where"], str)


def test_a_line_logged_with_its_fields_renders_as_the_same_line_through_extra() -> None:
    fields = {
        "method": "POST",
        "path": "/api/v1/sessions",
        "status": 201,
        "requestId": "req_1",
        "applicationId": None,
    }
    logger = logging.getLogger("payorch.access")
    through_extra = logger.makeRecord(
        logger.name, logging.INFO, __file__, 1, "request", (), None, extra=fields
    )
    line = LineRecord(logger.name, logging.INFO, "request", dict(fields))
    rendered, expected = (
        json.loads(JsonFormatter().format(line)),
        json.loads(JsonFormatter().format(through_extra)),
    )
    assert rendered.pop("ts")[:16] == expected.pop("ts")[:16]  # made within the same minute
    assert list(rendered.items()) == list(expected.items())


def test_a_line_logged_with_its_fields_passes_the_level_and_the_handlers_filters() -> None:
    logger = logging.getLogger("payorch.test-line")
    captured: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = captured.append  # type: ignore[method-assign]
    handler.addFilter(WorkerFilter(3))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        log_line(logger, logging.INFO, "request", {"status": 200})
        logger.setLevel(logging.WARNING)
        log_line(logger, logging.INFO, "request", {"status": 204})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    [record] = captured
    assert json.loads(JsonFormatter().format(record))["worker"] == 3
    assert record.getMessage() == "request" and record.status == 200  # type: ignore[attr-defined]
