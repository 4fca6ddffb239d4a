"""Prometheus metrics: one `Metrics` per runtime, each with its own registry.

Events (requests, provider calls, state transitions, delivery attempts) are counted where they
happen, through the methods below. What is a state rather than an event (live actors, mailbox depth,
outbox backlog, supervisors) is read at scrape time from a `RuntimeSnapshot` the `/metrics` route
assembles, so it is never stale and nothing has to keep it up to date.

Nothing here is global: two runtimes in one process (tests) never share a counter. See
`docs/metrics.md` for each metric and what to alert on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

UNMATCHED_ROUTE = "unmatched"
# Request methods are labels as they are; anything else a client invents is one label, not many.
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "OTHER"

# Provider calls are cut off at engine.provider_timeout_s (default 10) or refunds.submit_timeout_s
# (default 5): buckets reach past both, so a timeout lands in its own bucket, not in +Inf.
_PROVIDER_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0)


class _Children:
    """A labelled metric's children, each looked up once: prometheus_client's `labels()` checks
    and converts its values and takes the metric's lock at every call, a few microseconds each, and
    a create makes five such calls. Only for label values from a bounded set (methods, route
    patterns, statuses, providers, outcomes); nothing here removes a child from its metric."""

    def __init__(self, metric: Counter | Histogram) -> None:
        self.metric = metric
        self.children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = self.metric.labels(*values)
        return child


@dataclass(frozen=True)
class OutboxBacklog:
    """Work the outbox still holds, read from the database at scrape time."""

    fan_out: int  # outbox events not yet fanned out into deliveries
    due: int  # PENDING deliveries to an active configuration, due now
    scheduled: int  # the same, not due yet: waiting for a retry, or claimed by an attempt in flight


@dataclass(frozen=True)
class RuntimeSnapshot:
    """The state gauges read at one scrape."""

    mailbox_depths: Sequence[int]  # per live application actor: messages waiting
    mailbox_capacity: int  # engine.mailbox_size
    actor_crashes: int  # since the runtime started
    supervisors: Mapping[str, bool]  # name -> running now
    supervisor_restarts: Mapping[str, int]  # name -> restarts after a crash since the process started
    outbox: OutboxBacklog | None  # None when the database did not answer in time
    config_generation: int  # configurations loaded: 1 at start, one more per successful reload
    config_loaded_at: float  # Unix time the running configuration was loaded (start or last reload)
    # By provider name: whether its provider-wide circuit is not closed, and how many of its
    # accounts' circuits are not closed (routing health, docs/routing.md).
    provider_circuit_open: Mapping[str, bool] = field(default_factory=dict)
    account_circuits_open: Mapping[str, int] = field(default_factory=dict)
    # Units of work that failed because their connection's server was gone, shutting down or
    # read-only, or no writable server was found (`Database.server_losses`), since the process started.
    database_server_losses: int = 0
    # Units of work handed to the database's thread since the process started (`Database.units_handed`).
    database_units: int = 0


class _SnapshotCollector:
    """Turns the snapshot of the current scrape into metric families."""

    def __init__(self) -> None:
        self.snapshot: RuntimeSnapshot | None = None

    def describe(self) -> Iterable[Metric]:
        # Describing nothing keeps registration from calling `collect` before the first scrape.
        return []

    def collect(self) -> Iterable[Metric]:
        snapshot = self.snapshot
        if snapshot is None:
            return
        depths = snapshot.mailbox_depths
        yield GaugeMetricFamily(
            "payorch_actor_mailboxes", "Live application actors (one mailbox each).", value=len(depths)
        )
        depth = GaugeMetricFamily(
            "payorch_actor_mailbox_depth",
            "Messages waiting in application actor mailboxes: the fullest one (aggregate=max) and "
            "all of them together (aggregate=sum).",
            labels=["aggregate"],
        )
        depth.add_metric(["max"], max(depths, default=0))
        depth.add_metric(["sum"], sum(depths))
        yield depth
        yield GaugeMetricFamily(
            "payorch_actor_mailbox_capacity",
            "Messages one actor mailbox holds (engine.mailbox_size); a full mailbox answers 503.",
            value=snapshot.mailbox_capacity,
        )
        yield CounterMetricFamily(
            "payorch_actor_crashes",
            "Application actors that crashed since the process started.",
            value=snapshot.actor_crashes,
        )
        up = GaugeMetricFamily(
            "payorch_supervisor_up",
            "1 while the supervised background loop runs, 0 while it waits to restart after a crash.",
            labels=["name"],
        )
        for name, running in sorted(snapshot.supervisors.items()):
            up.add_metric([name], 1 if running else 0)
        yield up
        restarts = CounterMetricFamily(
            "payorch_supervisor_restarts",
            "Restarts of the supervised background loop after a crash, since the process started.",
            labels=["name"],
        )
        for name, count in sorted(snapshot.supervisor_restarts.items()):
            restarts.add_metric([name], count)
        yield restarts
        backlog = GaugeMetricFamily(
            "payorch_outbox_backlog",
            "Outbox work not done yet: events not fanned out (stage=fan_out), deliveries due now "
            "(stage=due) and deliveries not due yet (stage=scheduled: waiting for a retry, or in flight).",
            labels=["stage"],
        )
        if snapshot.outbox is not None:
            backlog.add_metric(["fan_out"], snapshot.outbox.fan_out)
            backlog.add_metric(["due"], snapshot.outbox.due)
            backlog.add_metric(["scheduled"], snapshot.outbox.scheduled)
        yield backlog
        yield CounterMetricFamily(
            "payorch_database_server_lost",
            "Units of work that failed because the server of their connection was gone, shutting down "
            "or read-only, or because no host of database.url was a writable primary (a failover, a "
            "switchover, a restart of PostgreSQL); each made the pool replace all its connections.",
            value=snapshot.database_server_losses,
        )
        yield CounterMetricFamily(
            "payorch_database_units",
            "Units of work handed to the database's thread (one crossing there and one back each), "
            "whatever their outcome; divided by requests, the crossings a request costs.",
            value=snapshot.database_units,
        )
        yield GaugeMetricFamily(
            "payorch_metrics_database_up",
            "1 when this scrape could read the outbox backlog from the database, else 0.",
            value=1 if snapshot.outbox is not None else 0,
        )
        yield GaugeMetricFamily(
            "payorch_config_generation",
            "The running configuration's generation: 1 as loaded at start, one more for each "
            "successful reload (SIGHUP).",
            value=snapshot.config_generation,
        )
        yield GaugeMetricFamily(
            "payorch_config_last_reload_timestamp_seconds",
            "Unix time the running configuration was loaded: at start, or by the last successful reload.",
            value=snapshot.config_loaded_at,
        )
        circuit = GaugeMetricFamily(
            "payorch_provider_circuit_open",
            "1 while the provider's provider-wide circuit is open or half-open (not routed for anyone).",
            labels=["provider"],
        )
        for name, is_open in sorted(snapshot.provider_circuit_open.items()):
            circuit.add_metric([name], 1 if is_open else 0)
        yield circuit
        accounts = GaugeMetricFamily(
            "payorch_provider_account_circuits_open",
            "Linked accounts (an application's key) whose own circuit for the provider is open or "
            "half-open: the provider is not routed for them alone.",
            labels=["provider"],
        )
        for name, count in sorted(snapshot.account_circuits_open.items()):
            accounts.add_metric([name], count)
        yield accounts


class Metrics:
    """The instruments of one runtime, in a registry of its own (never the global default)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._http_requests = Counter(
            "payorch_http_requests",
            "HTTP requests answered, by route pattern (not the raw path) and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self._http_duration = Histogram(
            "payorch_http_request_duration_seconds",
            "Time to answer an HTTP request, by route pattern.",
            ["method", "route"],
            registry=self.registry,
        )
        self._provider_calls = Counter(
            "payorch_provider_calls",
            "Calls to payment providers, by outcome: ok, error, timeout, refused (refund refused).",
            ["provider", "operation", "outcome"],
            registry=self.registry,
        )
        self._provider_duration = Histogram(
            "payorch_provider_call_duration_seconds",
            "Time a payment provider took to answer (or to time out).",
            ["provider", "operation"],
            buckets=_PROVIDER_BUCKETS,
            registry=self.registry,
        )
        self._session_transitions = Counter(
            "payorch_session_transitions",
            "Checkout session status changes.",
            ["from_status", "to_status"],
            registry=self.registry,
        )
        self._refund_transitions = Counter(
            "payorch_refund_transitions",
            "Refunds entering a status (PENDING when created, then COMPLETED or FAILED).",
            ["to_status"],
            registry=self.registry,
        )
        self._delivery_attempts = Counter(
            "payorch_webhook_delivery_attempts",
            "Webhook delivery attempts, by what became of the delivery: DELIVERED, PENDING (will be "
            "retried) or FAILED (given up).",
            ["outcome"],
            registry=self.registry,
        )
        self._attempt_failures = Counter(
            "payorch_webhook_attempt_failures",
            "Webhook delivery attempts that did not deliver, by reason: http_status (a non-2xx answer), "
            "timeout, network (connection, TLS or protocol error), refused (the SSRF guard), internal "
            "(an error inside payorch, logged with the delivery id).",
            ["reason"],
            registry=self.registry,
        )
        self._claims_taken_over = Counter(
            "payorch_claims_taken_over",
            "Claims of processes that were gone, released by this process so the work is done again: "
            "webhook_delivery, sandbox_delivery, refund_submission.",
            ["kind"],
            registry=self.registry,
        )
        self._config_reload_failures = Counter(
            "payorch_config_reload_failures",
            "Reloads (SIGHUP) refused because the configuration did not validate; the running one stayed.",
            registry=self.registry,
        )
        self._connections_refused = Counter(
            "payorch_http_connections_refused",
            "HTTP connections answered 503 and closed unread, by the limit they were over: node "
            "(server.max_connections) or address (server.max_connections_per_address).",
            ["limit"],
            registry=self.registry,
        )
        self._routing_decisions = Counter(
            "payorch_routing_decisions",
            "Sessions created, by why their provider took them (docs/routing.md): rule, split, dynamic, "
            "exploration, or cascade (a provider after the decision's first created the checkout).",
            ["reason"],
            registry=self.registry,
        )
        self._routing_outcomes = Counter(
            "payorch_routing_outcomes",
            "Payment attempts' outcomes recorded for learned routing, at each attempt's provider: success, "
            "failure (declined) or abandonment (expired unpaid); a declined attempt later paid at the same "
            "checkout is counted again, as the success it became.",
            ["provider", "payment_method", "outcome"],
            registry=self.registry,
        )
        self._attempts_ended = Counter(
            "payorch_payment_attempts_ended",
            "Payment attempts ended, by provider and outcome (its last verdict): success (paid), failure "
            "(declined, then the session expired or went on to the next provider) or abandonment.",
            ["provider", "outcome"],
            registry=self.registry,
        )
        self._sessions_recovered = Counter(
            "payorch_sessions_recovered",
            "Sessions paid at an attempt after their first (recovery at the next provider).",
            registry=self.registry,
        )
        self._duplicates_refunded = Counter(
            "payorch_duplicate_payments_refunded",
            "Payments refunded in full by payorch because another attempt of their session was paid first.",
            registry=self.registry,
        )
        self._reconciliation_items = Counter(
            "payorch_reconciliation_items",
            "Items reconciliation runs stored, by provider and outcome (docs/reconciliation.md).",
            ["provider", "outcome"],
            registry=self.registry,
        )
        self._reconciliation_repairs = Counter(
            "payorch_reconciliation_repairs",
            "Sessions reconciliation paid: a settled payment payorch had unpaid, applied as its event.",
            ["provider"],
            registry=self.registry,
        )
        self._snapshot = _SnapshotCollector()
        self.registry.register(self._snapshot)
        # The metrics counted at every request and create, their children kept (`_Children`).
        self._http_request_children = _Children(self._http_requests)
        self._http_duration_children = _Children(self._http_duration)
        self._provider_call_children = _Children(self._provider_calls)
        self._provider_duration_children = _Children(self._provider_duration)
        self._routing_decision_children = _Children(self._routing_decisions)

    def http_request(self, method: str, route: str | None, status: int, seconds: float) -> None:
        """Count one answered request; `route` is the URL rule pattern, None when no rule matched."""
        method = method if method in _KNOWN_METHODS else OTHER_METHOD
        route = route or UNMATCHED_ROUTE
        self._http_request_children(method, route, str(status)).inc()
        self._http_duration_children(method, route).observe(seconds)

    def provider_call(self, provider: str, operation: str, outcome: str, seconds: float) -> None:
        """Count one call to a provider (`operation` e.g. create_checkout) and its latency."""
        self._provider_call_children(provider, operation, outcome).inc()
        self._provider_duration_children(provider, operation).observe(seconds)

    def session_transition(self, from_status: str, to_status: str) -> None:
        """Count a session status change; a change that keeps the status is not one."""
        if from_status != to_status:
            self._session_transitions.labels(from_status, to_status).inc()

    def routing_decision(self, reason: str) -> None:
        """Count a created session by its `routing.reason`."""
        self._routing_decision_children(reason).inc()

    def routing_outcome(self, provider: str, payment_method: str, outcome: str) -> None:
        """Count an attempt's outcome recorded at `provider`: success, failure or abandonment."""
        self._routing_outcomes.labels(provider, payment_method, outcome).inc()

    def payment_attempt_ended(self, provider: str, outcome: str) -> None:
        """Count a payment attempt ended at `provider` with `outcome`: success, failure or abandonment."""
        self._attempts_ended.labels(provider, outcome).inc()

    def session_recovered(self) -> None:
        """Count a session paid at an attempt after its first."""
        self._sessions_recovered.inc()

    def duplicate_payment_refunded(self) -> None:
        """Count a payment refunded in full because its session was paid through another attempt."""
        self._duplicates_refunded.inc()

    def reconciliation_items(self, provider: str, outcome: str, count: int) -> None:
        """Count `count` items of a reconciliation run at `provider` with `outcome`."""
        if count:
            self._reconciliation_items.labels(provider, outcome).inc(count)

    def reconciliation_repair(self, provider: str) -> None:
        """Count a session reconciliation paid."""
        self._reconciliation_repairs.labels(provider).inc()

    def refund_transition(self, to_status: str) -> None:
        """Count a refund entering `to_status`."""
        self._refund_transitions.labels(to_status).inc()

    def webhook_delivery_attempt(self, outcome: str) -> None:
        """Count one delivery attempt by the delivery's status after it."""
        self._delivery_attempts.labels(outcome).inc()

    def webhook_attempt_failure(self, reason: str) -> None:
        """Count one delivery attempt that did not deliver, by `reason` (see `outbound.attempt`)."""
        self._attempt_failures.labels(reason).inc()

    def claims_taken_over(self, kind: str, count: int) -> None:
        """Count `count` claims of gone processes released by this one (`supervisors.takeover_loop`)."""
        if count:
            self._claims_taken_over.labels(kind).inc(count)

    def config_reload_failed(self) -> None:
        """Count one reload refused: the configuration did not validate."""
        self._config_reload_failures.inc()

    def connection_refused(self, limit: str) -> None:
        """Count one connection refused over `limit`: node or address."""
        self._connections_refused.labels(limit).inc()

    def exposition(self, snapshot: RuntimeSnapshot) -> bytes:
        """Every metric in the Prometheus text format, the state gauges read from `snapshot`."""
        # No await between setting the snapshot and rendering it: a concurrent scrape cannot mix in.
        self._snapshot.snapshot = snapshot
        try:
            return generate_latest(self.registry)
        finally:
            self._snapshot.snapshot = None
