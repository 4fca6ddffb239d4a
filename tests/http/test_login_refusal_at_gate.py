"""An API login or signup its address's bucket refuses is answered at the ASGI call
(`http.login_gate`), before Quart builds a request: with the very answer the route gives a refusal
it charged itself (status, headers in their order, body bytes), counted and logged as the route's.

Each refusal comes right after its address spent its one token on a malformed body (charged, then
400 at once, no password hashed), so both are told the same `Retry-After`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from quart import Quart

from payorch.config import LimitSettings, Settings
from payorch.http.services import PayorchApp
from payorch.runtime import Runtime, open_runtime
from payorch.storage.database import Database

ACCESS_LOGGER = "payorch.access"
API_PATHS = ["/api/v1/auth/login", "/api/v1/merchants/signup"]


@pytest.fixture
async def one_login_a_minute(settings: Settings, db: Database) -> AsyncIterator[Runtime]:
    limits = LimitSettings(login_per_minute=1, login_refusal_hold_s=0.01)
    async with open_runtime(settings.model_copy(update={"limits": limits}), db) as runtime:
        yield runtime


class _Answer:
    """What an ASGI call sent: its status, its headers as sent, and its body."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = [(bytes(name), bytes(value)) for name, value in message["headers"]]
        else:
            self.body += message.get("body", b"")


async def _post(app: Any, path: str, address: str, body: bytes, *, through_gate: bool = True) -> _Answer:
    """POST `body` to `path` from `address` as hypercorn calls the app: through its ASGI call (the
    login gate first) or, with `through_gate=False`, straight to Quart's, so the route charges."""
    scope = {
        "type": "http",
        "asgi": {"spec_version": "2.3", "version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"payorch.test"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", f"pinned-{address}".encode()),
        ],
        "client": (address, 40000),
        "server": ("127.0.0.1", 8000),
        "extensions": {},
    }
    messages = iter([{"type": "http.request", "body": body, "more_body": False}])

    async def receive() -> Any:  # the body, then a client waiting for its answer
        if (message := next(messages, None)) is not None:
            return message
        await trio.sleep_forever()

    answer = _Answer()
    if through_gate:
        await app.asgi_app(scope, receive, answer.send)
    else:
        await super(type(app), app).asgi_app(scope, receive, answer.send)
    return answer


def _access_lines(caplog: pytest.LogCaptureFixture, address: str) -> list[dict[str, Any]]:
    fields = ("method", "path", "status", "remoteAddr", "requestId", "applicationId")
    return [
        {field: getattr(record, field, None) for field in fields}
        for record in caplog.records
        if record.name == ACCESS_LOGGER and getattr(record, "remoteAddr", None) == address
    ]


def _counting_requests(app: Quart, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The requests Quart builds from now on, noted as they are built."""
    built: list[object] = []
    base = app.request_class

    class Counted(base):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(app, "request_class", Counted)
    return built


@pytest.mark.parametrize("path", API_PATHS)
async def test_a_refused_api_login_is_answered_at_the_gate_exactly_as_its_route_answers_it(
    one_login_a_minute: Runtime,
    path: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    app = one_login_a_minute.app
    assert isinstance(app, PayorchApp)

    # As the route answers a refusal it charged itself (the gate left out).
    assert (await _post(app, path, "192.0.2.31", b"{", through_gate=False)).status == 400
    by_route = await _post(app, path, "192.0.2.31", b"{}", through_gate=False)

    assert (await _post(app, path, "192.0.2.32", b"{")).status == 400
    built = _counting_requests(app, monkeypatch)
    at_gate = await _post(app, path, "192.0.2.32", b"{}")

    assert built == []  # no request of Quart's for the refusal
    assert at_gate.status == by_route.status == 429
    pinned = (b"x-request-id", b"pinned-192.0.2.32")
    assert at_gate.headers == [
        pinned if name == b"x-request-id" else (name, value) for name, value in by_route.headers
    ]
    assert at_gate.body == by_route.body
    body = json.loads(at_gate.body)
    assert set(body) == {"error", "message", "code", "retryAfter"}
    assert body["code"] == 429
    assert body["retryAfter"] == int(dict(at_gate.headers)[b"retry-after"]) >= 1
    assert "login and signup attempts from this address" in body["message"]

    route_line, gate_line = _access_lines(caplog, "192.0.2.31")[-1], _access_lines(caplog, "192.0.2.32")[-1]
    assert gate_line == {**route_line, "remoteAddr": "192.0.2.32", "requestId": "pinned-192.0.2.32"}
    assert gate_line["status"] == 429 and gate_line["path"] == path and gate_line["method"] == "POST"


async def test_a_refusal_answered_at_the_gate_gets_a_fresh_request_id_when_none_is_offered(
    one_login_a_minute: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    client = one_login_a_minute.app.test_client()
    scope = {"client": ("192.0.2.33", 40000)}
    assert (await client.post("/api/v1/auth/login", data=b"{", scope_base=scope)).status_code == 400
    refused = await client.post("/api/v1/auth/login", json={}, scope_base=scope)
    assert refused.status_code == 429
    request_id = refused.headers["X-Request-Id"]
    assert request_id.startswith("req_")
    assert _access_lines(caplog, "192.0.2.33")[-1]["requestId"] == request_id


async def test_a_console_sign_in_refused_is_still_answered_by_its_page(one_login_a_minute: Runtime) -> None:
    """The console's refusal is an HTML page of the session's, which only Quart renders."""
    client = one_login_a_minute.app.test_client()
    scope = {"client": ("192.0.2.34", 40000)}
    for _ in range(2):
        refused = await client.post("/console/sign-in", form={}, scope_base=scope)
    assert refused.status_code == 429
    assert refused.content_type == "text/html; charset=utf-8"
    assert refused.headers["Retry-After"]
    assert "Too many requests" in await refused.get_data(as_text=True)
