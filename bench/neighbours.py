"""The neighbours scenario: other merchants' creates, and one merchant's webhooks, beside what one party
can do to a payorch it shares: flood login with unknown e-mails from many addresses, leave
a backlog of webhook deliveries to drain, loop routing backtests, flood routing documents.

payorch runs here with its default rate limits, on a fresh embedded PostgreSQL, trusting a throwaway
CA for its webhooks. Two receivers run as processes of their own (`bench/receiver.py`), HTTPS on
loopback: one answers 204 to the backlog, the other notes when each of the others' webhooks arrived.
Three merchants sign up:
- the others: `applications` applications on the sandbox, their creates due at a steady
  `rate_per_s` spread over every application's key (open loop, 16 connections); and one more whose
  `session.completed` goes to the noting receiver, paid at `webhook_rate_per_s` for the webhook
  latency (commit to receiver: `bench/webhooks.py`);
- X and Y: each an application holding `backtest_sessions` settled sessions with their routing
  outcomes (written straight into the database); X an application whose routing it floods; Y two
  applications with `endpoints` webhook endpoints between them, at the 204 receiver.
The others' creates are measured alone, then beside each of:
- routing: X's JWT sending `PUT .../routing` (a valid document of as many rules as a document may
  hold, some 35 KB, each request a new one) and `POST .../routing/evaluate` (a session and that
  document), each at half the JWT's default rate limit (they share its bucket: together at the
  limit), over `routing_connections` connections each;
- backtests: X and Y each looping `POST .../routing/backtest` over their sessions, one at a time;
- backlog: Y's `backlog` deliveries pending, written straight into the database (an event to each
  of its endpoints), draining meanwhile; the others' webhook latency is measured beside it too,
  against its figure alone; then what is left of the backlog is given up;
- logins: `login_addresses` client addresses (127.N.0.1: on Linux all of 127.0.0.0/8 is loopback,
  payorch sees each as the TCP peer) with `logins_per_address` connections each posting logins of
  e-mails never used before, as fast as payorch answers; this process's memory (payorch's) is
  sampled throughout, against what it was before.
Refusals (429, 503) are the limits doing their work: they are counted, not failures of the run.

The figures: the others' create p99 beside each, against alone (goal: within 25%), counting a create
still unanswered when the window closed at its wait by then (`bench.load`); the webhook p50 beside
the backlog against alone (within 25%, none missing); payorch's RSS under the login flood
(within +100 MiB of before).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from bench.load import LoadResult
from bench.measure import Measurement, Shape, measure, measure_beside_all, progress, rss_bytes
from bench.neighbour_seeds import (
    analysed_at,
    backlog_state,
    clear_commit_times,
    commit_times_of,
    end_backlog,
    seed_backlog,
    seed_past_sessions,
)
from bench.payorch_target import (
    SESSION_BODY,
    Payorch,
    Target,
    bench_settings,
    create_target,
    running_payorch,
)
from bench.receiver import Receiver, running_receiver
from bench.shop import Application, Merchant, sandbox_link, signed_up_merchant
from bench.webhooks import (
    DRAIN_TIMEOUT_S,
    EVENT_TYPE,
    WARMUP_EVENTS,
    WebhookLatency,
    install_commit_clock,
    latency_figures,
    pay_steadily,
    write_certificates,
)
from payorch.config import LimitSettings, Settings
from payorch.engine.routing.validation import MAX_RULES
from payorch.storage.database import Database, open_database

# Replaced in each request's body by a value of its own (`bench.load`).
UNIQUE = "BENCH_UNIQUE"
LOGIN_BODY = json.dumps({"email": f"nobody-{UNIQUE}@stranger.example", "password": "not-the-password-1"})
# The backtests' candidate document: as many rules as the decision-cost benchmark's; the routing
# flood's: as many as a document may hold (each request some 35 KB, within the 64 KiB a body may be).
BACKTEST_RULES = 20
FLOOD_RULES = MAX_RULES
EU_COUNTRIES = (
    "AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "HU", "IE",
    "IT", "LV", "LT", "LU", "MT", "NL", "PL", "PT", "RO", "SK", "SI", "ES", "SE",
)  # fmt: skip
OTHERS_CONNECTIONS = 16
RSS_SAMPLE_S = 0.05
POLL_S = 0.2
ANALYSIS_TIMEOUT_S = 30.0  # payorch checks every 5 s: far more than it needs


@dataclass(frozen=True)
class NeighbourShape:
    applications: int  # the others'
    rate_per_s: float  # the others' creates, due at this rate
    login_addresses: int
    logins_per_address: int  # connections from each address
    backlog: int  # Y's pending deliveries
    endpoints: int  # Y's webhook endpoints, over two applications
    backtest_sessions: int  # of X's and of Y's application
    routing_connections: int  # of the PUT flood, and of the evaluate flood
    webhook_rate_per_s: float  # the others' payments whose webhooks are timed
    warmup_s: float
    measured_s: float


@dataclass(frozen=True)
class Backlog:
    """Y's backlog: how many deliveries were written, and how many were delivered and how long it
    drained while the others were measured beside it, and what was left pending then."""

    analysed_after_s: float  # when payorch had analysed the table, after the backlog was written
    deliveries: int
    delivered: int
    drained_s: float
    left: int


@dataclass(frozen=True)
class Neighbours:
    """The others' creates alone and beside each party, what each party got, the others' webhook
    latency alone and beside the backlog, and payorch's memory under the login flood."""

    shape: NeighbourShape
    alone: Measurement
    beside_routing: Measurement
    puts: LoadResult
    evaluations: LoadResult
    beside_backtests: Measurement
    backtests: list[LoadResult]  # X's loop, Y's loop
    beside_backlog: Measurement
    backlog: Backlog
    webhooks_alone: WebhookLatency
    webhooks_beside_backlog: WebhookLatency
    beside_logins: Measurement
    logins: LoadResult
    rss_before: int
    rss_peak: int

    @staticmethod
    def p99(measurement: Measurement) -> float:
        """The p99 the goals compare: with the creates unanswered when the window closed."""
        result = measurement.result
        return result.p99_ms if math.isnan(result.p99_with_unanswered_ms) else result.p99_with_unanswered_ms

    def p99_change(self, beside: Measurement) -> float:
        alone = self.p99(self.alone)
        return self.p99(beside) / alone - 1 if alone else 0.0

    @property
    def webhook_p50_change(self) -> float:
        alone = self.webhooks_alone.p50_ms
        return self.webhooks_beside_backlog.p50_ms / alone - 1 if alone else 0.0

    @property
    def rss_growth(self) -> int:
        return self.rss_peak - self.rss_before

    def measurements(self) -> list[Measurement]:
        return [
            self.alone,
            self.beside_routing,
            self.beside_backtests,
            self.beside_backlog,
            self.beside_logins,
        ]


def routing_document(rules: int = BACKTEST_RULES, first_rule_name: str = "pln-card") -> dict[str, Any]:
    """A sound routing document of `rules` rules over the sandbox, its first rule named
    `first_rule_name`: each rule card, a currency, a few countries (with more rules, every EU
    country and longer names: a large document, as a flood would send) and an amount band."""
    large = rules > BACKTEST_RULES
    countries = list(EU_COUNTRIES) if large else ["DE", "FR"]
    document_rules: list[dict[str, Any]] = [
        {
            "name": first_rule_name,
            "when": {"paymentMethods": ["card"], "currencies": ["PLN"], "countries": ["PL"]},
            "route": {"type": "priority", "providers": ["sandbox"]},
        }
    ]
    for number in range(1, rules):
        name = f"band-{number}" + ("-cards-of-the-union-in-one-currency-each-by-amount" if large else "")
        document_rules.append(
            {
                "name": name,
                "when": {
                    "paymentMethods": ["card"],
                    "currencies": ["EUR" if number % 2 else "PLN"],
                    "countries": countries if number % 3 else ["PL"],
                    "amount": {"min": number * 100, "max": number * 100 + 99},
                },
                "route": (
                    {"type": "split", "weights": {"sandbox": 100}}
                    if number % 2
                    else {"type": "dynamic", "providers": ["sandbox"]}
                ),
            }
        )
    return {
        "rules": document_rules,
        "default": {"type": "dynamic"},
        "fees": {"sandbox": {"percent": "1.4", "fixed": {"PLN": "1.00", "EUR": "0.25"}}},
        "objective": "approval",
    }


def _settings(work_dir: Path, ca_path: Path) -> Settings:
    """payorch's default limits, its webhooks trusting the receivers' CA and allowed to loopback."""
    settings = bench_settings(work_dir, limits=LimitSettings())
    webhooks = settings.webhooks.model_copy(update={"ca_bundle": ca_path, "allow_private_networks": True})
    return settings.model_copy(update={"webhooks": webhooks})


def _login_addresses(count: int) -> list[str]:
    """`count` loopback addresses, each in a /16 of its own (127.1.0.1, 127.2.0.1...): however
    payorch groups client addresses short of the whole of 127/8, each is a client of its own."""
    return [f"127.{number}.0.1" for number in range(1, count + 1)]


@dataclass(frozen=True)
class _Parties:
    """Everything the runs need, once set up."""

    payorch: Payorch
    db: Database
    creates: Target
    webhook_application: Application
    noted: Receiver
    routing_application: Application
    x: Merchant
    backtest_x: Application
    y: Merchant
    backtest_y: Application
    backlog_applications: list[Application]


def _routing_targets(parties: _Parties) -> tuple[Target, Target]:
    """X's PUT of a new document each time, and its evaluate of a session with that document."""
    base = f"{parties.payorch.base_url}/api/v1/applications/{parties.routing_application.id}/routing"
    put = Target(
        url=base,
        headers=parties.x.authorization,
        method="PUT",
        body=json.dumps(routing_document(FLOOD_RULES, f"pln-card-{UNIQUE}")),
        unique_header=None,
        unique_in_body=UNIQUE,
    )
    evaluation = {**json.loads(SESSION_BODY), "routing": routing_document(FLOOD_RULES)}
    evaluate = Target(
        url=f"{base}/evaluate",
        headers=parties.x.authorization,
        body=json.dumps(evaluation),
        unique_header=None,
    )
    return put, evaluate


def _backtest_target(payorch: Payorch, merchant: Merchant, application: Application) -> Target:
    body = {"routing": routing_document(), "days": 30, "limit": 100_000}
    return Target(
        url=f"{payorch.base_url}/api/v1/applications/{application.id}/routing/backtest",
        headers=merchant.authorization,
        body=json.dumps(body),
        unique_header=None,
    )


async def _webhook_latency(parties: _Parties, shape: NeighbourShape, run: str) -> WebhookLatency:
    """Pay the others' webhook application's sessions at `webhook_rate_per_s` for the measured
    window (and `WARMUP_EVENTS` more first), and time their webhooks from commit to the receiver."""
    application, received = parties.webhook_application, parties.noted.received_at
    application_id = uuid.UUID(application.id)
    total = WARMUP_EVENTS + max(1, round(shape.webhook_rate_per_s * shape.measured_s))
    await parties.db.autocommit(clear_commit_times)
    rate = shape.webhook_rate_per_s
    progress(f"neighbours: paying {total} sessions at {rate:g}/s, timing their webhooks ({run})")
    await pay_steadily(
        parties.payorch.base_url,
        application.api_key,
        total,
        shape.webhook_rate_per_s,
        key_prefix=f"bench-neighbours-{run}",
    )
    committed: dict[str, float] = {}
    with trio.move_on_after(DRAIN_TIMEOUT_S):
        while len(committed) < total or not all(event in received for event in committed):
            await trio.sleep(POLL_S)
            committed = await parties.db.autocommit(commit_times_of, application_id)
    committed = await parties.db.autocommit(commit_times_of, application_id)
    if not any(event in received for event in committed):
        nan = float("nan")
        return WebhookLatency(0, nan, nan, nan, nan, len(committed), 0, shape.webhook_rate_per_s)
    return latency_figures(committed, received, shape.webhook_rate_per_s, WARMUP_EVENTS, 0)


@asynccontextmanager
async def _rss_peak() -> AsyncIterator[list[int]]:
    """This process's RSS sampled every `RSS_SAMPLE_S` for the block: the peak, in the list's one
    item."""
    peak = [rss_bytes()]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], rss_bytes())
            await trio.sleep(RSS_SAMPLE_S)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample)
        yield peak
        nursery.cancel_scope.cancel()
    peak[0] = max(peak[0], rss_bytes())


async def _set_up(
    payorch: Payorch,
    db: Database,
    merchants: tuple[Merchant, Merchant, Merchant],
    receivers: tuple[Receiver, Receiver],
    shape: NeighbourShape,
) -> _Parties:
    """The merchants' applications, endpoints and past sessions."""
    others, x, y = merchants
    sink, noted = receivers
    progress(f"neighbours: {shape.applications} applications of the others, one with a webhook")
    many = await others.new_applications(shape.applications, sandbox_link())
    webhook_application = await others.new_application("Bench webhooks timed", sandbox_link())
    await others.subscribe(webhook_application, noted.url, [EVENT_TYPE])
    routing_application = await x.new_application("Bench routing", sandbox_link())
    backtest_x = await x.new_application("Bench backtests", sandbox_link())
    backtest_y = await y.new_application("Bench backtests", sandbox_link())
    progress(f"neighbours: {shape.endpoints} webhook endpoints of Y over two applications")
    backlog_applications = [await y.new_application(f"Bench backlog {n}", sandbox_link()) for n in (1, 2)]
    for number in range(shape.endpoints):
        application = backlog_applications[number % 2]
        await y.subscribe(application, f"{sink.url}/{number}", [EVENT_TYPE])
    progress(f"neighbours: writing {shape.backtest_sessions} past sessions of X's and of Y's")
    for application in (backtest_x, backtest_y):
        await db.transaction(seed_past_sessions, uuid.UUID(application.id), shape.backtest_sessions)
    await db.autocommit(install_commit_clock)
    return _Parties(
        payorch=payorch,
        db=db,
        creates=create_target(payorch.base_url, [application.api_key for application in many]),
        webhook_application=webhook_application,
        noted=noted,
        routing_application=routing_application,
        x=x,
        backtest_x=backtest_x,
        y=y,
        backtest_y=backtest_y,
        backlog_applications=backlog_applications,
    )


async def _beside_backlog(
    parties: _Parties, shape: NeighbourShape, label: str, paced: Shape
) -> tuple[Measurement, Backlog, WebhookLatency]:
    """Y's backlog written, then the others' creates and webhooks measured while it drains; then
    what is left of it given up."""
    ids = [uuid.UUID(application.id) for application in parties.backlog_applications]
    events = math.ceil(shape.backlog / max(shape.endpoints, 1))
    progress(f"neighbours: writing Y's backlog, {events} events to each of its {shape.endpoints} endpoints")
    written_at = time.time()
    for application_id in ids:
        await parties.db.transaction(seed_backlog, application_id, events)
    # Measured once payorch has noticed the backlog and analysed its table (within 5 s: docs/
    # webhooks.md, "Statistics after a sudden backlog"): the analysis is a moment's work once, the
    # backlog's cost to the others while it drains is what is measured.
    analysed_after_s = float("nan")
    with trio.move_on_after(ANALYSIS_TIMEOUT_S):
        while True:
            at = await parties.db.autocommit(analysed_at)
            if at >= written_at:
                analysed_after_s = at - written_at
                break
            await trio.sleep(POLL_S)
    started = trio.current_time()
    delivered_before, pending = await parties.db.autocommit(backlog_state, ids)
    beside = await measure(f"{label}, backlog beside", parties.creates, paced)
    webhooks = await _webhook_latency(parties, shape, "backlog")
    delivered, left = await parties.db.autocommit(backlog_state, ids)
    drained_s = trio.current_time() - started
    await parties.db.autocommit(end_backlog, ids)
    backlog = Backlog(
        analysed_after_s=analysed_after_s,
        deliveries=delivered_before + pending,
        delivered=delivered - delivered_before,
        drained_s=drained_s,
        left=left,
    )
    return beside, backlog, webhooks


async def measure_neighbours(work_dir: Path, shape: NeighbourShape) -> Neighbours:
    """The runs, on one payorch with its default limits (see the module docstring)."""
    ca_path, cert_path, key_path = await trio.to_thread.run_sync(write_certificates, work_dir / "receivers")
    paced = Shape(
        connections=OTHERS_CONNECTIONS,
        warmup_s=shape.warmup_s,
        measured_s=shape.measured_s,
        rate_per_s=shape.rate_per_s,
    )

    def flood(connections: int, rate_per_s: float = 0.0) -> Shape:
        return Shape(
            connections=connections,
            warmup_s=shape.warmup_s,
            measured_s=shape.measured_s,
            rate_per_s=rate_per_s,
        )

    # The routing flood at the JWT's limit: PUT and evaluate share the merchant's one bucket.
    jwt_share = LimitSettings().requests_per_second / 2

    label = f"others' creates, {shape.rate_per_s:g}/s due"
    async with (
        running_receiver(cert_path, key_path, status=204) as sink,
        running_receiver(cert_path, key_path, status=200, note=True) as noted,
        running_payorch(_settings(work_dir, ca_path), work_dir / "payorch.log") as payorch,
        open_database(payorch.service.db.dsn, min_size=1, max_size=2) as db,
        signed_up_merchant(payorch) as others,
        signed_up_merchant(payorch, "x@merchant.example", 2) as x,
        signed_up_merchant(payorch, "y@merchant.example", 3) as y,
    ):
        parties = await _set_up(payorch, db, (others, x, y), (sink, noted), shape)
        alone = await measure(f"{label}, alone", parties.creates, paced)
        webhooks_alone = await _webhook_latency(parties, shape, "alone")
        put, evaluate = _routing_targets(parties)
        beside_routing, (puts, evaluations) = await measure_beside_all(
            f"{label}, routing flood beside",
            parties.creates,
            paced,
            [
                (put, flood(shape.routing_connections, jwt_share)),
                (evaluate, flood(shape.routing_connections, jwt_share)),
            ],
        )
        backtest_loops = [
            (_backtest_target(payorch, x, parties.backtest_x), flood(1)),
            (_backtest_target(payorch, y, parties.backtest_y), flood(1)),
        ]
        beside_backtests, backtests = await measure_beside_all(
            f"{label}, backtests beside", parties.creates, paced, backtest_loops
        )
        beside_backlog, backlog, webhooks_beside = await _beside_backlog(parties, shape, label, paced)
        logins = Target(
            url=f"{payorch.base_url}/api/v1/auth/login",
            headers={},
            body=LOGIN_BODY,
            unique_header=None,
            unique_in_body=UNIQUE,
            local_addresses=_login_addresses(shape.login_addresses),
        )
        rss_before = rss_bytes()
        async with _rss_peak() as peak:
            beside_logins, (login_result,) = await measure_beside_all(
                f"{label}, login flood beside",
                parties.creates,
                paced,
                [(logins, flood(shape.login_addresses * shape.logins_per_address))],
                probed=False,
            )
        progress("stopping payorch")
    return Neighbours(
        shape=shape,
        alone=alone,
        beside_routing=beside_routing,
        puts=puts,
        evaluations=evaluations,
        beside_backtests=beside_backtests,
        backtests=backtests,
        beside_backlog=beside_backlog,
        backlog=backlog,
        webhooks_alone=webhooks_alone,
        webhooks_beside_backlog=webhooks_beside,
        beside_logins=beside_logins,
        logins=login_result,
        rss_before=rss_before,
        rss_peak=peak[0],
    )
