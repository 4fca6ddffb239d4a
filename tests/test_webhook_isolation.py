"""Nothing one merchant's webhook receiver does fails or delays another merchant's deliveries.

Merchant A's endpoint (/hooks/a) misbehaves as scripted; merchant B's (/hooks/b) answers 200. B's
delivery arrives all the same, A's attempt is recorded as A's own outcome (as valid text), `/readyz`
stays 200 and the delivery supervisor never restarts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

from payorch.config import Settings
from payorch.outbound.attempt import RESPONSE_EXCERPT
from payorch.runtime import Runtime, open_runtime
from payorch.storage.database import Connection, Database
from payorch.supervisors import webhook_attempts
from payorch.supervisors.delivery_loop import IN_FLIGHT_PER_ENDPOINT
from tests import webhook_receiver as receiving
from tests.helpers import Client, Shop, eventually, new_shop
from tests.test_metrics import scrape, value
from tests.test_webhook_delivery import pay, subscribe
from tests.webhook_receiver import ScriptedResponse, WebhookReceiver

webhook_receiver = receiving.webhook_receiver

A, B = "/hooks/a", "/hooks/b"
LONGEST_WAIT_S = 60.0
TIMEOUT_S = 2.0
SUPERVISOR = "webhook delivery"
FIFTY_MB = 50 * 1024 * 1024


def webhook_settings(settings: Settings, receiver: WebhookReceiver, **changes: Any) -> Settings:
    """The receiver's CA trusted; 4 attempts, the last one `LONGEST_WAIT_S` after the third (so a
    Retry-After may be honoured up to that), and a short timeout."""
    webhooks = {
        "ca_bundle": receiver.ca_path,
        "retry_schedule_s": [0, 0.2, 0.2, LONGEST_WAIT_S],
        "timeout_s": TIMEOUT_S,
        **changes,
    }
    return settings.model_copy(update={"webhooks": settings.webhooks.model_copy(update=webhooks)})


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    return webhook_settings(settings, webhook_receiver)


async def two_merchants(
    client: Client, db: Database, settings: Settings, receiver: WebhookReceiver
) -> tuple[Shop, dict[str, Any], Shop]:
    """Merchant A subscribed at /hooks/a, merchant B at /hooks/b: (A's shop, A's configuration, B's shop)."""
    shop_a = await new_shop(client, db, settings)
    config_a = await subscribe(client, shop_a, receiver, path="/a")
    shop_b = await new_shop(client, db, settings)
    await subscribe(client, shop_b, receiver, path="/b")
    return shop_a, config_a, shop_b


async def attempts_to(db: Database, config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every recorded attempt to the configuration, oldest first, with its delivery's state after it."""

    async def read(conn: Connection) -> list[dict[str, Any]]:
        rows = await conn.fetch(
            """SELECT a.status_code, a.error, a.response_body, d.status, d.attempts,
                      d.next_attempt_at, d.last_attempt_at
               FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
               WHERE d.config_id = $1::text::uuid ORDER BY a.id""",
            config["id"],
        )
        return [dict(row.items()) for row in rows]

    return await db.autocommit(read)


def recorded(db: Database, config: dict[str, Any], count: int = 1) -> Callable[[], Awaitable[Any]]:
    async def check() -> list[dict[str, Any]] | None:
        found = await attempts_to(db, config)
        return found if len(found) >= count else None

    return check


async def one_merchant(
    client: Client, db: Database, settings: Settings, receiver: WebhookReceiver
) -> tuple[Shop, dict[str, Any]]:
    """Merchant A subscribed at /hooks/a: (A's shop, A's configuration)."""
    shop_a = await new_shop(client, db, settings)
    return shop_a, await subscribe(client, shop_a, receiver, path="/a")


def failures_counted(client: Client, reason: str, at_least: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        _, samples = await scrape(client)
        return value(samples, "payorch_webhook_attempt_failures_total", reason=reason) >= at_least

    return check


async def assert_others_unaffected(client: Client, runtime: Runtime) -> None:
    assert (await client.get("/readyz")).status_code == 200
    assert runtime.services.supervisors.restarts[SUPERVISOR] == 0


INVALID_UTF8 = b"\xff\xfe bad \xed\xa0\x80 end"  # \xed\xa0\x80 would encode a lone surrogate

MISBEHAVIOURS = {
    "nul_byte_in_the_body": (
        ScriptedResponse(200, {}, b"ok\x00bye"),
        (200, "ok\ufffdbye", None, None),
    ),
    "invalid_utf8_body": (
        ScriptedResponse(500, {}, INVALID_UTF8),
        (500, INVALID_UTF8.decode("utf-8", "replace"), None, "http_status"),
    ),
    "retry_after_of_17_digits": (
        ScriptedResponse(503, {"Retry-After": "99999999999999999"}),
        (503, "", None, "http_status"),
    ),
    "retry_after_of_a_superscript_digit": (
        ScriptedResponse(503, {"Retry-After": "²"}),
        (503, "", None, "http_status"),
    ),
    "body_of_50_mb": (
        ScriptedResponse(200, streamed_body_bytes=FIFTY_MB),
        (200, "x" * RESPONSE_EXCERPT, None, None),
    ),
    "hanging_past_the_timeout": (
        ScriptedResponse(200, delay_s=30),
        # {receiver}: the receiver's host:port, the step the timeout cut short named with it.
        (None, None, f"timed out after {TIMEOUT_S:g} s waiting for {{receiver}} to answer", "timeout"),
    ),
}


@pytest.mark.parametrize(("answer", "expected"), MISBEHAVIOURS.values(), ids=MISBEHAVIOURS.keys())
async def test_a_misbehaving_receiver_fails_only_its_own_attempt(
    client: Client,
    db: Database,
    settings: Settings,
    runtime: Runtime,
    webhook_receiver: WebhookReceiver,
    answer: ScriptedResponse,
    expected: tuple[int | None, str | None, str | None, str | None],
) -> None:
    shop_a, config_a, shop_b = await two_merchants(client, db, settings, webhook_receiver)
    webhook_receiver.script([answer], path=A)
    await pay(client, shop_a)
    await webhook_receiver.wait_for(1, timeout_s=10, path=A)

    session_b = await pay(client, shop_b)
    (delivered,) = await webhook_receiver.wait_for(1, timeout_s=10, path=B)
    assert delivered.verified and delivered.json()["data"]["id"] == session_b

    status_code, response_body, error, failure_reason = expected
    first = (await eventually(recorded(db, config_a)))[0]
    assert (first["status_code"], first["response_body"], first["error"]) == (
        status_code,
        response_body,
        error and error.format(receiver=urlsplit(webhook_receiver.url).netloc),
    )
    if failure_reason is not None:  # counted just after the attempt is recorded
        await eventually(failures_counted(client, failure_reason, at_least=1))
    await assert_others_unaffected(client, runtime)


async def test_only_the_excerpt_of_a_huge_answer_is_read(
    client: Client, db: Database, settings: Settings, runtime: Runtime, webhook_receiver: WebhookReceiver
) -> None:
    shop_a, config_a = await one_merchant(client, db, settings, webhook_receiver)
    webhook_receiver.script([ScriptedResponse(200, streamed_body_bytes=FIFTY_MB)], path=A)
    await pay(client, shop_a)
    (attempt,) = await eventually(recorded(db, config_a))
    assert attempt["status"] == "DELIVERED"
    # payorch hung up after the excerpt: the receiver could not hand over more than the sockets buffer.
    assert webhook_receiver.streamed_bytes < FIFTY_MB // 2


async def test_a_retry_after_beyond_the_schedule_waits_the_longest_scheduled_wait(
    client: Client, db: Database, settings: Settings, runtime: Runtime, webhook_receiver: WebhookReceiver
) -> None:
    shop_a, config_a = await one_merchant(client, db, settings, webhook_receiver)
    webhook_receiver.script([ScriptedResponse(503, {"Retry-After": "99999999999999999"})], path=A)
    await pay(client, shop_a)
    (attempt,) = await eventually(recorded(db, config_a))
    wait = attempt["next_attempt_at"] - attempt["last_attempt_at"]
    assert timedelta(seconds=LONGEST_WAIT_S) <= wait < timedelta(seconds=LONGEST_WAIT_S + 10)


async def test_a_retry_after_of_non_ascii_digits_is_ignored_and_the_schedule_retries(
    client: Client, db: Database, settings: Settings, runtime: Runtime, webhook_receiver: WebhookReceiver
) -> None:
    shop_a, config_a = await one_merchant(client, db, settings, webhook_receiver)
    webhook_receiver.script([ScriptedResponse(503, {"Retry-After": "²"})], path=A)
    await pay(client, shop_a)
    await webhook_receiver.wait_for(2, timeout_s=10, path=A)
    attempts = await eventually(recorded(db, config_a, count=2))
    assert [attempt["status_code"] for attempt in attempts] == [503, 200]


async def test_an_http_date_retry_after_is_honoured(
    client: Client, db: Database, settings: Settings, runtime: Runtime, webhook_receiver: WebhookReceiver
) -> None:
    shop_a, config_a = await one_merchant(client, db, settings, webhook_receiver)
    retry_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=30)
    webhook_receiver.script(
        [ScriptedResponse(429, {"Retry-After": format_datetime(retry_at, usegmt=True)})], path=A
    )
    await pay(client, shop_a)
    (attempt,) = await eventually(recorded(db, config_a))
    assert retry_at - timedelta(seconds=1) <= attempt["next_attempt_at"] < retry_at + timedelta(seconds=10)


async def test_a_slow_endpoint_holds_only_its_share_of_slots_while_another_merchant_is_delivered(
    db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    patient = webhook_settings(settings, webhook_receiver, timeout_s=60)  # nothing times out here
    released = trio.Event()
    async with open_runtime(patient, db) as runtime:
        client = runtime.app.test_client()
        shop_a, config_a, shop_b = await two_merchants(client, db, patient, webhook_receiver)
        sessions_a = 3 * IN_FLIGHT_PER_ENDPOINT
        webhook_receiver.script([ScriptedResponse(200, hold=released)] * sessions_a, path=A)
        for number in range(sessions_a):
            await pay(client, shop_a, key=f"a{number}")
        await webhook_receiver.wait_for(IN_FLIGHT_PER_ENDPOINT, timeout_s=10, path=A)

        await pay(client, shop_b)
        await webhook_receiver.wait_for(1, timeout_s=10, path=B)
        # B was delivered while every attempt to A hangs, and A never had more than its share.
        assert len(webhook_receiver.requests_to(A)) == IN_FLIGHT_PER_ENDPOINT

        released.set()
        await webhook_receiver.wait_for(sessions_a, timeout_s=20, path=A)
        attempts = await eventually(recorded(db, config_a, count=sessions_a), timeout_s=20)
        assert {attempt["status"] for attempt in attempts} == {"DELIVERED"}
        await assert_others_unaffected(client, runtime)


async def test_an_error_inside_payorch_counts_as_an_attempt_and_follows_the_schedule(
    client: Client,
    db: Database,
    settings: Settings,
    runtime: Runtime,
    webhook_receiver: WebhookReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    send = webhook_attempts._send

    async def failing_for_a(services: Any, client: Any, delivery: Any) -> Any:
        if delivery.url.endswith("/a"):
            raise RuntimeError("a bug that only A's deliveries bring out")
        return await send(services, client, delivery)

    monkeypatch.setattr(webhook_attempts, "_send", failing_for_a)
    shop_a, config_a, shop_b = await two_merchants(client, db, settings, webhook_receiver)
    schedule = settings.webhooks.retry_schedule_s
    await pay(client, shop_a)
    attempts = await eventually(recorded(db, config_a, count=len(schedule) - 1))
    assert {attempt["error"] for attempt in attempts} == {"internal error: RuntimeError"}
    # The last scheduled wait is long: the delivery waits it out rather than failing at once, forever.
    last = attempts[-1]
    assert (last["status"], last["attempts"]) == ("PENDING", len(schedule) - 1)
    assert last["next_attempt_at"] - last["last_attempt_at"] >= timedelta(seconds=LONGEST_WAIT_S)
    await eventually(failures_counted(client, "internal", at_least=len(attempts)))

    await pay(client, shop_b)
    await webhook_receiver.wait_for(1, timeout_s=10, path=B)
    await assert_others_unaffected(client, runtime)
