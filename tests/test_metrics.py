"""GET /metrics: the Prometheus text format, counted per route pattern, per provider call, per state
transition and per delivery attempt, with gauges read at scrape time; one registry per runtime."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import trio
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from payorch.config import SessionSettings, Settings
from payorch.metrics import Metrics
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from tests.helpers import Client, Shop, create_session, drop_database, eventually, new_shop

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

METRIC_NAMES = {
    "payorch_http_requests_total",
    "payorch_http_request_duration_seconds",
    "payorch_provider_calls_total",
    "payorch_provider_call_duration_seconds",
    "payorch_session_transitions_total",
    "payorch_refund_transitions_total",
    "payorch_webhook_delivery_attempts_total",
    "payorch_actor_mailboxes",
    "payorch_actor_mailbox_depth",
    "payorch_actor_mailbox_capacity",
    "payorch_actor_crashes_total",
    "payorch_outbox_backlog",
    "payorch_supervisor_up",
    "payorch_supervisor_restarts_total",
    "payorch_metrics_database_up",
    "payorch_database_server_lost_total",
    "payorch_database_units_total",
    "payorch_config_generation",
    "payorch_config_last_reload_timestamp_seconds",
    "payorch_config_reload_failures_total",
    "payorch_provider_circuit_open",
    "payorch_provider_account_circuits_open",
    "payorch_payment_attempts_ended_total",
    "payorch_sessions_recovered_total",
    "payorch_duplicate_payments_refunded_total",
    "payorch_reconciliation_items_total",
    "payorch_reconciliation_repairs_total",
}


async def scrape(client: Client) -> tuple[set[str], Samples]:
    """The metric names /metrics declares, and the value of every sample by (name, labels)."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    names: set[str] = set()
    samples: Samples = {}
    for family in text_string_to_metric_families(await response.get_data(as_text=True)):
        # The parser drops a counter's `_total` from the family name; its samples keep it.
        names.add(f"{family.name}_total" if family.type == "counter" else family.name)
        for sample in family.samples:
            samples[sample.name, frozenset(sample.labels.items())] = sample.value
    return names, samples


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    return samples.get((metric, frozenset(labels.items())), 0.0)


def requests_counted(samples: Samples, route: str, status: str, method: str = "GET") -> float:
    return value(samples, "payorch_http_requests_total", method=method, route=route, status=status)


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def test_metrics_answers_the_prometheus_text_format_with_every_metric(client: Client) -> None:
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    names, samples = await scrape(client)
    assert names >= METRIC_NAMES
    assert value(samples, "payorch_supervisor_up", name="webhook delivery") == 1
    assert value(samples, "payorch_supervisor_restarts_total", name="webhook delivery") == 0
    assert ("payorch_supervisor_restarts_total", frozenset({("name", "webhook delivery")})) in samples
    assert value(samples, "payorch_metrics_database_up") == 1
    assert value(samples, "payorch_outbox_backlog", stage="fan_out") == 0
    assert ("payorch_provider_circuit_open", frozenset({("provider", "sandbox")})) in samples
    assert value(samples, "payorch_provider_account_circuits_open", provider="sandbox") == 0
    assert ("payorch_sessions_recovered_total", frozenset()) in samples
    assert ("payorch_duplicate_payments_refunded_total", frozenset()) in samples


async def test_session_create_counts_the_request_by_route_and_the_provider_call(
    client: Client, shop: Shop
) -> None:
    _, before = await scrape(client)
    response = await create_session(client, shop, "metrics-1")
    assert response.status_code == 201
    _, after = await scrape(client)
    route = "/api/v1/sessions"
    assert requests_counted(after, route, "201", "POST") == requests_counted(before, route, "201", "POST") + 1
    calls = {"provider": "sandbox", "operation": "create_checkout", "outcome": "ok"}
    assert value(after, "payorch_provider_calls_total", **calls) == (
        value(before, "payorch_provider_calls_total", **calls) + 1
    )
    latency = {"provider": "sandbox", "operation": "create_checkout"}
    assert value(after, "payorch_provider_call_duration_seconds_count", **latency) >= 1


async def test_a_read_is_counted_under_its_route_pattern_not_its_path(client: Client, shop: Shop) -> None:
    created = await (await create_session(client, shop, "metrics-2")).get_json()
    await client.get(f"/api/v1/sessions/{created['sessionId']}", headers=shop.headers)
    _, samples = await scrape(client)
    route = "/api/v1/sessions/<session_id>"
    assert requests_counted(samples, route, "200") == 1
    assert not any(created["sessionId"] in label for (_, labels) in samples for _, label in labels)


async def test_paid_session_counts_a_pending_to_succeeded_transition(client: Client, shop: Shop) -> None:
    created = await (await create_session(client, shop, "metrics-3")).get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})
    transition = {"from_status": "PENDING", "to_status": "SUCCEEDED"}

    async def counted() -> bool:
        _, samples = await scrape(client)
        return value(samples, "payorch_session_transitions_total", **transition) == 1

    await eventually(counted, timeout_s=5)


async def test_expired_session_counts_a_pending_to_failed_transition(
    db: Database, settings: Settings
) -> None:
    short = settings.model_copy(update={"sessions": SessionSettings(ttl_s=1)})
    async with open_runtime(short, db) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, short)
        await create_session(client, shop, "metrics-4")
        transition = {"from_status": "PENDING", "to_status": "FAILED"}

        async def counted() -> bool:
            _, samples = await scrape(client)
            return value(samples, "payorch_session_transitions_total", **transition) == 1

        await eventually(counted)


async def test_unknown_path_is_counted_as_unmatched(client: Client) -> None:
    response = await client.get("/no/such/page/12345")
    assert response.status_code == 404
    _, samples = await scrape(client)
    assert requests_counted(samples, "unmatched", "404") == 1
    assert not any("/no/such/page" in label for (_, labels) in samples for _, label in labels)


async def test_an_invented_method_is_counted_as_other(client: Client) -> None:
    await client.open("/healthz", method="BREW")
    _, samples = await scrape(client)
    assert (
        sum(
            count
            for (name, labels), count in samples.items()
            if name == "payorch_http_requests_total" and ("method", "OTHER") in labels
        )
        == 1
    )


async def test_two_runtimes_in_one_process_do_not_share_counters(
    client: Client, db: Database, settings: Settings
) -> None:
    async with open_runtime(settings, db) as other:
        other_client = other.app.test_client()
        for _ in range(3):
            await client.get("/healthz")
        _, here = await scrape(client)
        _, there = await scrape(other_client)
    assert requests_counted(here, "/healthz", "200") == 3
    assert requests_counted(there, "/healthz", "200") == 0


async def test_failed_webhook_attempt_counts_pending_and_the_backlog_shows_the_retry(
    client: Client, shop: Shop
) -> None:
    # Nothing listens on port 9: the first attempt fails and the delivery waits for its retry.
    subscribed = await client.post(
        f"/api/v1/applications/{shop.application_id}/webhooks",
        json={"url": "https://127.0.0.1:9/hooks"},
        headers=shop.merchant.headers,
    )
    assert subscribed.status_code == 201, await subscribed.get_data(as_text=True)
    created = await (await create_session(client, shop, "metrics-5")).get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})

    async def attempted() -> Samples | None:
        _, samples = await scrape(client)
        return (
            samples if value(samples, "payorch_webhook_delivery_attempts_total", outcome="PENDING") else None
        )

    samples = await eventually(attempted)
    assert value(samples, "payorch_webhook_delivery_attempts_total", outcome="PENDING") == 1
    # The next attempt is 5 s away (webhooks.retry_schedule_s): the delivery waits, not due yet.
    assert value(samples, "payorch_outbox_backlog", stage="scheduled") == 1
    assert value(samples, "payorch_outbox_backlog", stage="due") == 0


async def test_live_actor_is_counted_with_its_mailbox(client: Client, shop: Shop, settings: Settings) -> None:
    await create_session(client, shop, "metrics-6")
    _, samples = await scrape(client)
    assert value(samples, "payorch_actor_mailboxes") >= 1
    assert value(samples, "payorch_actor_mailbox_depth", aggregate="max") >= 0
    assert value(samples, "payorch_actor_mailbox_capacity") == settings.engine.mailbox_size


async def test_metrics_answer_without_the_backlog_when_the_database_is_gone(
    client: Client, settings: Settings
) -> None:
    await drop_database(settings.database.url)
    with trio.fail_after(5):
        names, samples = await scrape(client)
    assert "payorch_http_requests_total" in names
    assert value(samples, "payorch_metrics_database_up") == 0
    assert not any(name == "payorch_outbox_backlog" for name, _ in samples)


def test_counts_under_the_same_labels_add_up_and_other_labels_count_apart() -> None:
    metrics = Metrics()
    for status in (201, 201, 400):
        metrics.http_request("POST", "/api/v1/sessions", status, 0.01)
    for outcome in ("ok", "ok", "error"):
        metrics.provider_call("sandbox", "create_checkout", outcome, 0.02)
    for reason in ("dynamic", "rule", "dynamic"):
        metrics.routing_decision(reason)
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for sample in family.samples
    }
    assert requests_counted(samples, "/api/v1/sessions", "201", "POST") == 2
    assert requests_counted(samples, "/api/v1/sessions", "400", "POST") == 1
    duration = {"method": "POST", "route": "/api/v1/sessions"}
    assert value(samples, "payorch_http_request_duration_seconds_count", **duration) == 3
    calls = {"provider": "sandbox", "operation": "create_checkout"}
    assert value(samples, "payorch_provider_calls_total", **calls, outcome="ok") == 2
    assert value(samples, "payorch_provider_calls_total", **calls, outcome="error") == 1
    assert value(samples, "payorch_provider_call_duration_seconds_count", **calls) == 3
    assert value(samples, "payorch_routing_decisions_total", reason="dynamic") == 2
    assert value(samples, "payorch_routing_decisions_total", reason="rule") == 1
