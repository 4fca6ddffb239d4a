"""Webhook latency: from the commit of a state change to the moment a real HTTPS receiver has the
webhook it emits.

payorch runs as a process of its own (`payorch serve`, on a fresh embedded PostgreSQL started here
first, as the workers scenario runs it: `bench/workers.py`), and this process holds an HTTPS
receiver on loopback whose certificate comes from a throwaway CA that payorch trusts through
`webhooks.ca_bundle`, and the clients that pay: so the figure is payorch's path, not a process
that also terminates the receiver's TLS and drives the payments. One merchant subscribes the receiver
to `session.completed`, then creates sessions and pays them through the sandbox at a steady, modest
rate (the figure is latency, not throughput).

When a state change commits is taken from PostgreSQL itself: a deferred constraint trigger on
`outbox_events`, installed by the benchmark only, notes `clock_timestamp()` for each event as its
transaction commits (deferred triggers run inside COMMIT, just before the commit is written). The
receiver notes the wall clock once a request's body has arrived, and matches it to its event by the
`webhook-id` header. So the figure covers the whole path payorch owns: waking the delivery loop,
fanning the event out, claiming the delivery, signing, and the HTTPS request; and the commit's own
WAL flush. How soon the sandbox reports the payment does not count.

Two figures: payments at a steady rate (`--rate`, each started on its own, so commits may arrive
together), and one at a time (`--one-at-a-time` payments, each paid once the previous one's webhook
arrived: the path with nothing else in flight). Where each millisecond goes is read back from
payorch's own rows for the steady run: from the commit to the round of the delivery loop that
claimed it (the wake-up; `webhook_deliveries.last_attempt_at` is the round's clock), from that round
to the attempt's start (the claim's transaction and the start of the attempt's task; the start is
`webhook_attempts.attempted_at` less its `latency_ms`), and from there to the receiver (signing,
the HTTPS request, and a TLS handshake when the connection is new). The receiver counts the
connections it accepted: each is a TLS handshake.

    .venv/bin/python -m bench.webhooks [--events 300] [--rate 20] [--one-at-a-time 50]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio
import trustme
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from bench.payorch_target import (
    API_KEY_HEADER,
    IDEMPOTENCY_HEADER,
    SESSION_BODY,
    SESSIONS_PATH,
    bench_settings,
    temporary_postgres,
)
from bench.processes import free_loopback_port, running_process, wait_until_serving
from bench.shop import MERCHANT_EMAIL, PASSWORD, expect, invited_merchant, sandbox_link
from bench.workers import config_toml, invite_token, payorch_environment
from payorch.config import Settings
from payorch.dev_receiver import answer_lifespan
from payorch.storage.database import Connection, database_url, open_database

EVENT_TYPE = "session.completed"
DEFAULT_EVENTS = 300
DEFAULT_RATE = 20.0  # payments per second
DEFAULT_ONE_AT_A_TIME = 50  # payments each made once the previous one's webhook arrived
WARMUP_EVENTS = 10  # delivered but not measured: the first connection, the first claim plans
DRAIN_TIMEOUT_S = 30.0  # after the last payment, for the last webhooks to arrive
HOOK_PATH = "/hooks"
RECEIVER_KEEP_ALIVE_S = 75.0

# Notes, at commit, when each outbox event committed (see the module docstring). Benchmark only.
_COMMIT_CLOCK_SQL = """
CREATE TABLE bench_event_commits (event_id text PRIMARY KEY, committed_at timestamptz NOT NULL);
CREATE FUNCTION bench_note_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_event_commits (event_id, committed_at) VALUES (NEW.id, clock_timestamp());
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER bench_note_commit AFTER INSERT ON outbox_events
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bench_note_commit();
"""


@dataclass(frozen=True)
class StageLatency:
    """Milliseconds one stage of the path took, over the events measured."""

    stage: str
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class WebhookLatency:
    """Milliseconds from an event's commit to its webhook at the receiver, over `count` events."""

    count: int  # events measured (delivered, warm-up excluded)
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    missing: int  # events paid for but not received within the drain timeout
    connections: int  # connections the receiver accepted (each a TLS handshake)
    rate_per_s: float  # payments per second asked for
    stages: tuple[StageLatency, ...] = ()  # where the time went (see the module's text)
    one_at_a_time: WebhookLatency | None = None  # each payment once the previous webhook arrived


@dataclass
class _Receiver:
    """What arrived: the wall clock at which each event's request had been read, by event id."""

    url: str = ""
    ca_path: Path = Path()
    received_at: dict[str, float] = field(default_factory=dict)
    clients: set[tuple[str, int]] = field(default_factory=set)  # (address, port) of each connection
    arrived: trio.Event = field(default_factory=trio.Event)
    expected: int = 0

    def note(self, event_id: str, at: float) -> None:
        self.received_at.setdefault(event_id, at)
        if len(self.received_at) >= self.expected:
            self.arrived.set()


ASGIReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
ASGISend = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _receiving_app(receiver: _Receiver) -> Callable[..., Awaitable[None]]:
    """A bare ASGI app: takes every POST, answers 200 with a small JSON body (a merchant's receiver
    should answer fast, and a framework would measure itself, not payorch)."""

    async def app(scope: MutableMapping[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        at = time.time()
        receiver.clients.add(tuple(scope["client"]))
        headers = dict(scope["headers"])
        event_id = headers.get(b"webhook-id")
        if event_id is not None:
            receiver.note(event_id.decode(), at)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"received":true}'})

    return app


def write_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A fresh CA and a certificate for localhost under `directory`: (CA, chain, key) PEM files."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    ca_path, cert_path, key_path = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca.cert_pem.write_to_path(str(ca_path))
    for index, blob in enumerate(server.cert_chain_pems):
        blob.write_to_path(str(cert_path), append=index > 0)
    server.private_key_pem.write_to_path(str(key_path))
    return ca_path, cert_path, key_path


@asynccontextmanager
async def _https_receiver(directory: Path) -> AsyncIterator[_Receiver]:
    """The receiver on https://localhost:<free port>/hooks, its CA written under `directory`."""
    ca_path, cert_path, key_path = await trio.to_thread.run_sync(write_certificates, directory)
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.certfile, config.keyfile = str(cert_path), str(key_path)
    config.accesslog = None
    config.errorlog = logging.getLogger("bench.webhooks.receiver")
    # Idle connections kept as long as nginx keeps them by default (hypercorn's own default is 5 s):
    # whether payorch reuses its connection between deliveries then depends on payorch alone.
    config.keep_alive_timeout = RECEIVER_KEEP_ALIVE_S
    receiver = _Receiver(ca_path=ca_path)
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(hypercorn_serve, _receiving_app(receiver), config))
        receiver.url = f"https://localhost:{urlsplit(binds[0]).port}{HOOK_PATH}"
        yield receiver
        nursery.cancel_scope.cancel()


def _settings(work_dir: Path, ca_path: Path, bind: str) -> Settings:
    """`bench_settings`, with the receiver's CA trusted and loopback receivers allowed."""
    settings = bench_settings(work_dir, bind=bind)
    webhooks = settings.webhooks.model_copy(update={"ca_bundle": ca_path, "allow_private_networks": True})
    return settings.model_copy(update={"webhooks": webhooks})


async def install_commit_clock(conn: Connection) -> None:
    await conn.execute(_COMMIT_CLOCK_SQL)


# For each event's first attempt: the round that claimed it and when the attempt started (Unix time).
_ATTEMPT_TIMES_SQL = """
    SELECT e.id AS event_id, extract(epoch FROM d.last_attempt_at)::float8 AS claimed,
           extract(epoch FROM a.attempted_at)::float8 - a.latency_ms / 1000.0 AS sent
    FROM webhook_deliveries d
    JOIN outbox_events e ON e.seq = d.event_seq
    JOIN webhook_attempts a ON a.delivery_id = d.id
    WHERE d.attempts = 1"""


async def _attempt_times(conn: Connection) -> dict[str, tuple[float, float]]:
    """(claimed, sent) Unix times of each event's first and only attempt, by event id."""
    return {row["event_id"]: (row["claimed"], row["sent"]) for row in await conn.fetch(_ATTEMPT_TIMES_SQL)}


async def _commit_times(conn: Connection) -> dict[str, float]:
    """Unix time at which each `EVENT_TYPE` event committed, by event id (payorch's other events,
    a reconciliation's, are not sent to the receiver)."""
    rows = await conn.fetch(
        """SELECT c.event_id, extract(epoch FROM c.committed_at)::float8 AS at
           FROM bench_event_commits c JOIN outbox_events e ON e.id = c.event_id WHERE e.type = $1""",
        EVENT_TYPE,
    )
    return {row["event_id"]: row["at"] for row in rows}


async def _subscribe(base_url: str, application_id: str, receiver_url: str) -> None:
    """Subscribe the receiver to `session.completed` of the application, as its merchant."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        login = await expect(
            await http.post("/api/v1/auth/login", json={"email": MERCHANT_EMAIL, "password": PASSWORD}), 200
        )
        await expect(
            await http.post(
                f"/api/v1/applications/{application_id}/webhooks",
                json={"url": receiver_url, "subscribedEvents": [EVENT_TYPE]},
                headers={"Authorization": f"Bearer {login['accessToken']}"},
            ),
            201,
        )


async def _pay_one(http: httpx.AsyncClient, api_key: str, key: str) -> None:
    created = await expect(
        await http.post(
            SESSIONS_PATH,
            content=SESSION_BODY,
            headers={
                API_KEY_HEADER: api_key,
                "Content-Type": "application/json",
                IDEMPOTENCY_HEADER: key,
            },
        ),
        201,
    )
    response = await http.post(
        urlsplit(created["checkoutUrl"]).path, data={"card_number": "4242424242424242"}
    )
    if response.status_code >= 400:
        raise RuntimeError(f"paying a sandbox checkout: {response.status_code}: {response.text[:300]}")


async def pay_steadily(
    base_url: str, api_key: str, events: int, rate_per_s: float, *, key_prefix: str = "bench-webhook"
) -> None:
    """Create and pay `events` sessions, one started every 1/`rate_per_s` s (each runs on its own),
    their Idempotency-Keys `key_prefix`-0, -1 and so on."""
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
        trio.open_nursery() as nursery,
    ):
        start = trio.current_time()
        for index in range(events):
            await trio.sleep_until(start + index / rate_per_s)
            nursery.start_soon(_pay_one, http, api_key, f"{key_prefix}-{index}")


async def pay_one_at_a_time(base_url: str, api_key: str, receiver: _Receiver, events: int) -> None:
    """Create and pay `events` sessions, each once the previous one's webhook has arrived."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        for index in range(events):
            receiver.expected, receiver.arrived = len(receiver.received_at) + 1, trio.Event()
            await _pay_one(http, api_key, f"bench-webhook-single-{index}")
            with trio.fail_after(DRAIN_TIMEOUT_S):
                await receiver.arrived.wait()


def _percentile(sorted_ms: list[float], share: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(share * len(sorted_ms)))
    return sorted_ms[rank - 1]


def stage_figures(
    events: list[str],
    committed: dict[str, float],
    attempts: dict[str, tuple[float, float]],
    received: dict[str, float],
) -> tuple[StageLatency, ...]:
    """p50 and p99 of each stage (see the module's text) over `events` that have every time."""
    known = [event for event in events if event in attempts and event in received]
    if not known:
        return ()
    spans = {
        "commit -> claiming round": [attempts[e][0] - committed[e] for e in known],
        "round -> attempt started": [attempts[e][1] - attempts[e][0] for e in known],
        "attempt -> receiver": [received[e] - attempts[e][1] for e in known],
    }
    figures = []
    for stage, seconds in spans.items():
        ms = sorted(1000 * span for span in seconds)
        figures.append(StageLatency(stage, round(_percentile(ms, 0.50), 1), round(_percentile(ms, 0.99), 1)))
    return tuple(figures)


def latency_figures(
    committed: dict[str, float], received: dict[str, float], rate_per_s: float, warmup: int, connections: int
) -> WebhookLatency:
    in_commit_order = sorted(committed, key=committed.__getitem__)
    measured = in_commit_order[warmup:]
    latencies = sorted((received[event] - committed[event]) * 1000 for event in measured if event in received)
    missing = sum(1 for event in in_commit_order if event not in received)
    if not latencies:
        raise RuntimeError("no webhook arrived")
    return WebhookLatency(
        count=len(latencies),
        p50_ms=round(_percentile(latencies, 0.50), 1),
        p95_ms=round(_percentile(latencies, 0.95), 1),
        p99_ms=round(_percentile(latencies, 0.99), 1),
        max_ms=round(latencies[-1], 1),
        missing=missing,
        connections=connections,
        rate_per_s=rate_per_s,
    )


async def measure_webhook_latency(
    work_dir: Path,
    *,
    events: int = DEFAULT_EVENTS,
    rate_per_s: float = DEFAULT_RATE,
    one_at_a_time: int = DEFAULT_ONE_AT_A_TIME,
) -> WebhookLatency:
    """Pay `events` sandbox sessions at `rate_per_s` and measure commit-to-receiver latency of their
    `session.completed` webhooks (the first `WARMUP_EVENTS` not counted), with where the time went;
    then `one_at_a_time` more, each once the previous webhook arrived (0: not measured). payorch
    runs as a process of its own (`payorch serve`), so the receiver's TLS and the payments' clients,
    here, do not share its interpreter. Everything runs under `work_dir` and on loopback, and is
    stopped and deleted when it returns."""
    total = events + WARMUP_EVENTS
    async with _https_receiver(work_dir / "receiver") as receiver:
        receiver.expected = total
        port = free_loopback_port()
        base_url = f"http://127.0.0.1:{port}"
        settings = _settings(work_dir, receiver.ca_path, bind=f"127.0.0.1:{port}")
        config_path, log_path = work_dir / "config.toml", work_dir / "payorch.log"
        config_path.write_text(config_toml(settings))
        env = payorch_environment()
        command = [sys.executable, "-m", "payorch", "serve", f"--config={config_path}"]
        async with (
            temporary_postgres(settings.database.data_dir),
            running_process(command, log_path, env, apart=("postgres",)) as (process, _),
        ):
            await wait_until_serving(f"{base_url}/readyz", process, log_path)
            async with open_database(await database_url(settings), min_size=1, max_size=1) as db:
                token = await invite_token(config_path, env)
                async with invited_merchant(base_url, token) as merchant:
                    application = await merchant.new_application("Bench webhooks", sandbox_link())
                await db.autocommit(install_commit_clock)
                await _subscribe(base_url, application.id, receiver.url)
                await pay_steadily(base_url, application.api_key, total, rate_per_s)
                with trio.move_on_after(DRAIN_TIMEOUT_S):
                    await receiver.arrived.wait()
                committed = await db.autocommit(_commit_times)
                attempts = await db.autocommit(_attempt_times)
                received, connections = dict(receiver.received_at), len(receiver.clients)
                single = None
                if one_at_a_time > 0:
                    await pay_one_at_a_time(base_url, application.api_key, receiver, one_at_a_time)
                    all_committed = await db.autocommit(_commit_times)
                    single = latency_figures(
                        {event: at for event, at in all_committed.items() if event not in committed},
                        receiver.received_at,
                        0.0,
                        0,
                        len(receiver.clients) - connections,
                    )
    steady = latency_figures(committed, received, rate_per_s, WARMUP_EVENTS, connections)
    measured = sorted(committed, key=committed.__getitem__)[WARMUP_EVENTS:]
    return replace(
        steady, stages=stage_figures(measured, committed, attempts, received), one_at_a_time=single
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.webhooks", description="webhook latency from commit to an HTTPS receiver"
    )
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS, help=f"default {DEFAULT_EVENTS}")
    parser.add_argument(
        "--rate", type=float, default=DEFAULT_RATE, help=f"per second, default {DEFAULT_RATE:g}"
    )
    parser.add_argument(
        "--one-at-a-time",
        type=int,
        default=DEFAULT_ONE_AT_A_TIME,
        help=f"payments each made once the previous webhook arrived, default {DEFAULT_ONE_AT_A_TIME}",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.events <= 5000 or not 0 < args.rate <= 200 or not 0 <= args.one_at_a_time <= 1000:
        parser.error("need 1 <= --events <= 5000, 0 < --rate <= 200 and 0 <= --one-at-a-time <= 1000")
    print(
        f"bench: paying {args.events + WARMUP_EVENTS} sandbox sessions at {args.rate:g}/s ...",
        file=sys.stderr,
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="payorch-bench-webhooks-") as work_dir:
        figures = trio.run(
            partial(
                measure_webhook_latency,
                Path(work_dir),
                events=args.events,
                rate_per_s=args.rate,
                one_at_a_time=args.one_at_a_time,
            )
        )
    print(json.dumps(asdict(figures)))
    print(
        f"webhook latency, commit to HTTPS receiver: p50 {figures.p50_ms:g} ms, p95 {figures.p95_ms:g} ms, "
        f"p99 {figures.p99_ms:g} ms, max {figures.max_ms:g} ms over {figures.count} events "
        f"at {figures.rate_per_s:g}/s ({figures.missing} missing, {figures.connections} connections)"
    )
    for stage in figures.stages:
        print(f"  {stage.stage}: p50 {stage.p50_ms:g} ms, p99 {stage.p99_ms:g} ms")
    if figures.one_at_a_time is not None:
        single = figures.one_at_a_time
        print(
            f"one at a time: p50 {single.p50_ms:g} ms, p99 {single.p99_ms:g} ms over {single.count} events "
            f"({single.missing} missing, {single.connections} new connections)"
        )


if __name__ == "__main__":
    main()
