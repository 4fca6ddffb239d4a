"""What `make bench` prints: a table per scenario, where the cores went, and every figure that has a
goal beside its goal, marked PASS or MISS."""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from bench.floods import Floods
from bench.idle import IdleResult
from bench.lists import ListTimes
from bench.load import STRAGGLER_DEADLINE_S, LoadResult
from bench.measure import Measurement, cpu_count
from bench.neighbours import Neighbours
from bench.recovery import ORACLE_RECOVERY_GOAL, SOURCE, RecoveryQuality
from bench.routing import (
    DECISION_US_GOAL,
    EXPLORATION_COST_GOAL,
    ORACLE_SHARE_GOAL,
    RECOVERY_SESSIONS_GOAL,
    STEADY_APPROVAL_GOAL,
    DecisionCost,
    RoutingQuality,
)
from bench.steady import CPU_GOAL_RATE, CPU_PER_CREATE_GOAL_RATIO, P99_GOALS_MS, SteadyRun
from bench.webhooks import WebhookLatency
from bench.workers import WorkersRun, workers_label

# Cores found busy before the run beyond which the figures are flagged: other work shares the machine.
BUSY_MACHINE_CORES = 0.2
# payorch's goals: throughput as a share of the bare endpoint's, and create latency;
# the other applications' creates/s beside a slow provider; memory once idle.
CREATE_RATIO_GOAL, CREATE_P99_GOAL_MS, READ_RATIO_GOAL = 0.5, 50.0, 0.8
ISOLATION_CHANGE_GOAL = 0.10
FLOOD_P99_CHANGE_GOAL = 0.20
# Beside a login flood from many addresses, a merchant's webhook backlog, two merchants' backtest
# loops and a routing flood: the others' create p99 and webhook p50 against alone, and
# payorch's memory under the login flood against before.
NEIGHBOURS_P99_CHANGE_GOAL = 0.25
NEIGHBOURS_WEBHOOK_P50_CHANGE_GOAL = 0.25
LOGIN_FLOOD_RSS_GROWTH_GOAL_MIB = 100
# A session list at a million sessions: its first page (20, the default size: a counter read and 20
# rows with their refunds) and a page past its end (the counter read alone), p50.
LIST_FIRST_PAGE_P50_GOAL_MS, LIST_PAST_THE_END_P50_GOAL_MS = 10.0, 5.0
IDLE_RSS_GROWTH_GOAL = 0.10
# payorch serve --workers N: creates and reads as a share of the bare
# endpoint on as many hypercorn workers, and creates/s with two workers against one.
WORKERS_CREATE_RATIO_GOAL, WORKERS_READ_RATIO_GOAL, WORKERS_SCALING_GOAL = 0.6, 0.8, 1.4
WEBHOOK_P50_GOAL_MS, WEBHOOK_P99_GOAL_MS = 20.0, 60.0
WEBHOOK_ONE_AT_A_TIME_P50_GOAL_MS = 10.0  # each payment once the previous webhook arrived
MIB = 1024 * 1024
LABEL_WIDTH = 44


@dataclass(frozen=True)
class Isolation:
    """The normal applications' creates alone and beside a slow application, and the slow one's."""

    alone: Measurement
    beside: Measurement
    slow: LoadResult
    slow_connections: int
    slow_delay_s: float
    applications: int

    @property
    def change(self) -> float:
        alone = self.alone.result.requests_per_s
        return self.beside.result.requests_per_s / alone - 1 if alone else 0.0


@dataclass
class Results:
    """Everything one `make bench` measured; None where a scenario was not run."""

    connections: int
    seconds: float
    warmup: float
    applications: int
    create_one: Measurement | None = None
    create_many: Measurement | None = None
    create_paced: Measurement | None = None  # one application, creates due at `paced_rate_per_s`
    paced_rate_per_s: float = 0.0
    read: Measurement | None = None
    bare_create: Measurement | None = None
    bare_create_many: Measurement | None = None  # the bare POST paired with `create_many`
    bare_read: Measurement | None = None
    isolation: Isolation | None = None
    idle: IdleResult | None = None
    webhooks: WebhookLatency | None = None
    floods: Floods | None = None
    neighbours: Neighbours | None = None
    lists: ListTimes | None = None
    routing: RoutingQuality | None = None
    recovery: RecoveryQuality | None = None
    decision_cost: DecisionCost | None = None
    steady: list[SteadyRun] = field(default_factory=list)
    bare_steady: list[SteadyRun] = field(default_factory=list)  # the bare POST at the same rates
    steady_read: list[SteadyRun] = field(default_factory=list)  # reads due at CPU_GOAL_RATE
    bare_steady_read: list[SteadyRun] = field(default_factory=list)  # the bare GET at the same rate
    workers: list[WorkersRun] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # warnings and errors payorch logged
    # Each paired ratio goal's ratio in every round, in the order measured (`bench/paired.py`).
    rounds: dict[str, list[float]] = field(default_factory=dict)

    def measurements(self) -> list[Measurement]:
        found = [
            self.create_one,
            self.create_paced,
            self.create_many,
            self.bare_create,
            self.bare_create_many,
            self.read,
            self.bare_read,
        ]
        if self.isolation:
            if self.isolation.alone is not self.create_many:
                found.append(self.isolation.alone)
            found.append(self.isolation.beside)
        if self.floods:
            found += [self.floods.alone, self.floods.beside_pages, self.floods.beside_events]
        if self.neighbours:
            found += self.neighbours.measurements()
        steady = self.steady + self.bare_steady + self.steady_read + self.bare_steady_read
        found += [run.measurement for run in steady]
        return [m for m in found if m is not None]

    def workers_measurements(self) -> list[Measurement]:
        """The workers scenario's, whose cores are those of process trees (its own table shows them)."""
        found = []
        for run in self.workers:
            found += [run.create, run.bare_create, run.read, run.bare_read]
            found += [steady.measurement for steady in run.steady]
        return found


def _row(label: str, r: LoadResult) -> str:
    errors = sum(r.errors.values())
    return f"{label:<{LABEL_WIDTH}}{r.requests_per_s:>11.1f}{r.p50_ms:>9.1f}{r.p99_ms:>9.1f}{errors:>8}"


def _header(title: str) -> str:
    return f"{title:<{LABEL_WIDTH}}{'req/s':>11}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"


def _ratio(value: float) -> str:
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.3f}x"


def _mib(value: int) -> str:
    return f"{value / MIB:.1f}"


def goal_line(name: str, figure: str, goal: str, met: bool) -> str:
    return f"{name:<{LABEL_WIDTH}}{figure:>11}   {goal:<16}{'PASS' if met else 'MISS'}"


def _requests(results: Results) -> Iterator[str]:
    rows = [
        results.create_one,
        results.create_paced,
        results.create_many,
        results.bare_create,
        results.bare_create_many,
        results.read,
        results.bare_read,
    ]
    if not any(rows):
        return
    yield _header("request")
    for m in rows:
        if m is not None:
            yield _row(m.label, m.result)
    yield ""


def _isolation(iso: Isolation) -> Iterator[str]:
    yield (
        f"isolation: {iso.alone.result.measured_s:g} s of creates on {iso.applications} applications, "
        f"alone, then beside {iso.slow_connections} connections"
    )
    yield f"on one more application whose provider (Stripe, on loopback) answers after {iso.slow_delay_s:g} s"
    yield _header("")
    yield _row(f"{iso.applications} applications alone", iso.alone.result)
    yield _row(f"{iso.applications} applications, slow one beside", iso.beside.result)
    yield _row("the slow application", iso.slow)
    yield ""


def _workers(runs: list[WorkersRun]) -> Iterator[str]:
    yield "workers: payorch serve --workers N, and the bare app on N hypercorn trio workers, side by side"
    yield "(each bare figure measured right after payorch's it is compared with)"
    yield "(cores: the server's process tree, parent and workers; PG: embedded PostgreSQL; load: load gen)"
    for run in runs:
        yield (
            f"{workers_label(run.workers):<{LABEL_WIDTH}}{'req/s':>11}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
            f"{'of bare':>9}{'cores':>7}{'PG':>6}{'load':>6}"
        )
        rows = [
            (run.create, _ratio(run.create_ratio)),
            (run.bare_create, ""),
            (run.read, _ratio(run.read_ratio)),
            (run.bare_read, ""),
        ]
        for m, of_bare in rows:
            cores = m.cores
            database = "" if cores.database is None else f"{cores.database:.2f}"
            yield f"{_row(m.label, m.result)}{of_bare:>9}{cores.server:>7.2f}{database:>6}{cores.load:>6.2f}"
        for steady in run.steady:
            m = steady.measurement
            database = "" if m.cores.database is None else f"{m.cores.database:.2f}"
            yield (
                f"{_row(f'{workers_label(run.workers)}, due at {steady.rate_per_s:g}/s', m.result)}"
                f"{'':>9}{m.cores.server:>7.2f}{database:>6}{m.cores.load:>6.2f}"
                f"  CPU/create {steady.cpu_per_create_ms:.2f} ms, p99.9 {m.result.p999_ms:.1f} ms"
            )
        payorch_rss = ", ".join(_mib(rss) for rss in run.rss_per_worker) or "n/a"
        bare_rss = ", ".join(_mib(rss) for rss in run.bare_rss_per_worker) or "n/a"
        yield f"RSS per worker after the runs, MiB: payorch {payorch_rss}; bare {bare_rss}"
    yield ""


def _workers_goals(runs: list[WorkersRun]) -> Iterator[str]:
    for run in runs:
        name = workers_label(run.workers)
        for kind, ratio, goal in (
            ("create, 1 app", run.create_ratio, WORKERS_CREATE_RATIO_GOAL),
            ("read", run.read_ratio, WORKERS_READ_RATIO_GOAL),
        ):
            yield goal_line(f"{kind}, {name}: payorch / bare", _ratio(ratio), f">= {goal:g}x", ratio >= goal)
        for steady in run.steady:
            p99_goal = P99_GOALS_MS.get(steady.rate_per_s)
            if p99_goal is not None:
                r = steady.measurement.result
                errors = sum(r.errors.values())
                yield goal_line(
                    f"create at a steady {steady.rate_per_s:g}/s, {name}: p99, errors",
                    f"{r.p99_ms:.1f} ms, {errors}",
                    f"<= {p99_goal:g} ms, 0",
                    r.p99_ms <= p99_goal and errors == 0,
                )
    by_count = {run.workers: run.create.result.requests_per_s for run in runs}
    if 1 in by_count and 2 in by_count:
        scaling = by_count[2] / by_count[1] if by_count[1] else 0.0
        yield goal_line(
            "creates/s, 2 workers / 1 worker",
            _ratio(scaling),
            f">= {WORKERS_SCALING_GOAL:g}x",
            scaling >= WORKERS_SCALING_GOAL,
        )


def _lists(lists: ListTimes) -> Iterator[str]:
    yield f"lists: GET .../sessions of an application with {lists.sessions:,} sessions, one request at a time"
    yield f"{'':<{LABEL_WIDTH}}{'p50 ms':>11}{'p99 ms':>9}"
    for label, timing in (
        ("first page (limit 20)", lists.first_page),
        ("page 99999999999 (past the end)", lists.past_the_end),
        ("  for scale: count(*) on the database", lists.plain_count),
    ):
        yield f"{label:<{LABEL_WIDTH}}{timing.p50_ms:>11.1f}{timing.p99_ms:>9.1f}"
    yield ""


def _floods(floods: Floods) -> Iterator[str]:
    shape = floods.shape
    yield (
        f"floods: the others' creates ({shape.applications} applications, {shape.rate_per_s:g}/s due, "
        f"{shape.measured_s:g} s each), alone, then beside one merchant's deep pages"
    )
    yield (
        f"(1 application, {shape.sessions} sessions, {shape.keys} keys, {shape.connections} connections, "
        f"default limits), then beside a stranger's forged provider events ({shape.connections} connections)"
    )
    yield _header("")
    yield _row("others' creates alone", floods.alone.result)
    yield _row("others' creates, deep pages beside", floods.beside_pages.result)
    yield _row("  the flooder's deep pages", floods.pages)
    yield _row("others' creates, forged events beside", floods.beside_events.result)
    yield _row("  the stranger's forged events", floods.events)
    for name, flood in (("deep pages", floods.pages), ("forged events", floods.events)):
        if flood.errors:
            shown = ", ".join(f"{kind}: {count}" for kind, count in sorted(flood.errors.items()))
            yield f"  answers to the {name} that were not 2xx: {shown}"
    yield ""


def _answers(result: LoadResult) -> str:
    """A flood's answers by status: the 2xx, then each other status or failure."""
    shown = [f"2xx: {result.successes}"]
    shown += [f"{kind}: {count}" for kind, count in sorted(result.errors.items())]
    if result.unanswered:
        shown.append(f"unanswered at the window's end: {result.unanswered}")
    if result.abandoned:
        shown.append(f"given up {STRAGGLER_DEADLINE_S:g} s after it: {result.abandoned}")
    return ", ".join(shown)


def _neighbours(n: Neighbours) -> Iterator[str]:
    shape = n.shape
    yield (
        f"neighbours: the others' creates ({shape.applications} applications, {shape.rate_per_s:g}/s due), "
        "alone, then beside each party, payorch's default limits"
    )
    yield (
        "(p99+: the p99 with the creates unanswered when the window closed counted at their wait by then, "
        "as the goals compare)"
    )
    yield f"{'':<{LABEL_WIDTH}}{'req/s':>11}{'p50 ms':>9}{'p99 ms':>9}{'p99+ ms':>9}{'errors':>8}"
    for label, m in (
        ("others' creates alone", n.alone),
        ("beside the routing flood", n.beside_routing),
        ("beside two backtest loops", n.beside_backtests),
        ("beside the webhook backlog", n.beside_backlog),
        ("beside the login flood", n.beside_logins),
    ):
        r = m.result
        yield (
            f"{label:<{LABEL_WIDTH}}{r.requests_per_s:>11.1f}{r.p50_ms:>9.1f}{r.p99_ms:>9.1f}"
            f"{n.p99(m):>9.1f}{sum(r.errors.values()):>8}"
        )
    yield (
        f"  routing flood, one JWT, {shape.routing_connections} connections each: "
        f"PUT .../routing {_answers(n.puts)}; POST .../routing/evaluate {_answers(n.evaluations)}"
    )
    for name, loop in zip(("X", "Y"), n.backtests, strict=True):
        yield (
            f"  {name}'s backtest loop over {shape.backtest_sessions:,} sessions: {_answers(loop)}, "
            f"{loop.p50_ms:.0f} ms p50"
        )
    backlog = n.backlog
    rate = backlog.delivered / backlog.drained_s if backlog.drained_s else 0.0
    at_least = "at least " if not backlog.left else ""  # drained before the end: faster than shown
    yield (
        f"  Y's backlog of {backlog.deliveries:,} deliveries to {shape.endpoints} endpoints (receiver "
        f"answering 204): {backlog.delivered:,} delivered in {backlog.drained_s:.1f} s "
        f"({at_least}{rate:.0f}/s), {backlog.left:,} left pending, then given up; payorch analysed its "
        f"table {backlog.analysed_after_s:.1f} s after it was written, before the others were measured"
    )
    yield (
        f"  login flood, {shape.login_addresses} addresses x {shape.logins_per_address} connections, "
        f"unknown e-mails: {_answers(n.logins)}"
    )
    yield (
        f"  payorch's RSS: {_mib(n.rss_before)} MiB before the login flood, peak {_mib(n.rss_peak)} MiB "
        f"under it ({n.rss_growth / MIB:+.1f} MiB)"
    )
    title = "the others' webhooks, commit to receiver"
    yield (
        f"{title:<{LABEL_WIDTH}}{'events':>11}{'p50 ms':>9}"
        f"{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}{'missing':>8}"
    )
    for label, latency in (("alone", n.webhooks_alone), ("beside the backlog", n.webhooks_beside_backlog)):
        yield (
            f"{label:<{LABEL_WIDTH}}{latency.count:>11}{latency.p50_ms:>9.1f}{latency.p95_ms:>9.1f}"
            f"{latency.p99_ms:>9.1f}{latency.max_ms:>9.1f}{latency.missing:>8}"
        )
    yield ""


def _neighbours_goals(n: Neighbours) -> Iterator[str]:
    for name, beside in (
        ("login flood", n.beside_logins),
        ("webhook backlog", n.beside_backlog),
        ("2 backtest loops", n.beside_backtests),
        ("routing flood", n.beside_routing),
    ):
        change = n.p99_change(beside)
        yield goal_line(
            f"others' create p99 beside {name}",
            f"{change:+.1%}",
            f"within {NEIGHBOURS_P99_CHANGE_GOAL:.0%}",
            change <= NEIGHBOURS_P99_CHANGE_GOAL,
        )
    change, missing = n.webhook_p50_change, n.webhooks_beside_backlog.missing
    yield goal_line(
        "others' webhook p50 beside the backlog",
        f"{change:+.1%}" + (f", {missing} missing" if missing else ""),
        f"within {NEIGHBOURS_WEBHOOK_P50_CHANGE_GOAL:.0%}, 0",
        change <= NEIGHBOURS_WEBHOOK_P50_CHANGE_GOAL and missing == 0,
    )
    growth = n.rss_growth / MIB
    yield goal_line(
        "payorch's RSS under the login flood",
        f"{growth:+.1f} MiB",
        f"<= +{LOGIN_FLOOD_RSS_GROWTH_GOAL_MIB} MiB",
        growth <= LOGIN_FLOOD_RSS_GROWTH_GOAL_MIB,
    )


def _idle(idle: IdleResult) -> Iterator[str]:
    touch = idle.touch
    errors = sum(touch.errors.values())
    yield (
        f"idle: {idle.applications} applications, one create each ({touch.successes} answered 2xx, "
        f"{errors} errors, {touch.measured_s:.1f} s), engine.actor_idle_s = {idle.actor_idle_s:g} s"
    )
    yield f"{'':<{LABEL_WIDTH}}{'actors':>11}{'RSS MiB':>9}"
    rows = [
        (f"after a warm-up of {idle.warmup.successes} (baseline)", idle.actors_baseline, idle.rss_baseline),
        ("while the creates ran (peak)", idle.actors_peak, idle.rss_peak),
        (f"idle, {idle.idle_s:.1f} s after the last create", idle.actors_after, idle.rss_after),
    ]
    for label, actors, rss in rows:
        yield f"{label:<{LABEL_WIDTH}}{actors:>11}{_mib(rss):>9}"
    kept = (idle.rss_after - idle.rss_baseline) / idle.applications
    yield (
        f"(all actors stopped {idle.waited_s:.1f} s after the last create; "
        f"when it was answered: {idle.actors_at_end} actors; RSS kept per application "
        f"touched: {kept / 1024:.1f} KiB)"
    )
    yield ""


def _webhooks(latency: WebhookLatency) -> Iterator[str]:
    yield (
        f"webhooks: session.completed, from its commit to a real HTTPS receiver on loopback, "
        f"{latency.rate_per_s:g} payments/s"
    )
    yield f"{'':<{LABEL_WIDTH}}{'events':>11}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}"
    yield (
        f"{'delivered':<{LABEL_WIDTH}}{latency.count:>11}{latency.p50_ms:>9.1f}{latency.p95_ms:>9.1f}"
        f"{latency.p99_ms:>9.1f}{latency.max_ms:>9.1f}"
    )
    yield f"{'not delivered':<{LABEL_WIDTH}}{latency.missing:>11}"
    for stage in latency.stages:
        yield f"{'  ' + stage.stage:<{LABEL_WIDTH}}{'':>11}{stage.p50_ms:>9.1f}{'':>9}{stage.p99_ms:>9.1f}"
    single = latency.one_at_a_time
    if single is not None:
        yield (
            f"{'one at a time':<{LABEL_WIDTH}}{single.count:>11}{single.p50_ms:>9.1f}{single.p95_ms:>9.1f}"
            f"{single.p99_ms:>9.1f}{single.max_ms:>9.1f}"
        )
    yield f"{'connections (TLS handshakes)':<{LABEL_WIDTH}}{latency.connections:>11}"
    yield ""


def _routing(quality: RoutingQuality | None, cost: DecisionCost | None) -> Iterator[str]:
    if quality is not None:
        settings = quality.settings
        yield (
            f"routing: {quality.sessions:,} simulated sessions, 3 providers drifting over 4 segments, "
            f"one down for 2,000 sessions ({quality.seconds:.1f} s)"
        )
        yield (
            f"payorch's decide and success rates (window {settings.window}, exploration "
            f"{settings.exploration:g}, elimination below {settings.elimination_threshold:g}), "
            "rates rebuilt every 50 sessions"
        )
        yield f"{'':<{LABEL_WIDTH}}{'approved':>11}{'of oracle':>11}"
        rows = [
            ("payorch dynamic routing", quality.dynamic.approvals),
            ("payorch dynamic routing, exploration 0", quality.without_exploration.approvals),
            ("oracle (best per segment, 1,000 sessions)", quality.oracle),
            ("best static priority (per segment)", quality.static),
            ("uniform random", quality.random),
        ]
        for label, approvals in rows:
            yield f"{label:<{LABEL_WIDTH}}{approvals:>11,}{approvals / quality.oracle:>11.1%}"
        shown = ", ".join(
            f"{r.segment} {'never' if r.sessions is None else r.sessions}" for r in quality.recoveries
        )
        yield f"after the outage, its segments' sessions until the recovered provider led again: {shown}"
        yield (
            f"{quality.dynamic.explored:,} sessions explored; against their leader's true approval they lost "
            f"{quality.dynamic.exploration_cost:.0f} expected approvals"
        )
        yield (
            f"steady world, {quality.steady_sessions:,} sessions at 3 providers approving 0.90, 0.50 and "
            f"0.15: approval {quality.steady_approval:.3f} (the best provider alone "
            f"{quality.steady_best / quality.steady_sessions:.3f}), {quality.steady.explored:,} explored"
        )
    if cost is not None:
        runs = ", ".join(f"{us:.1f}" for us in cost.runs)
        yield f"decision cost: 20 rules, 3 providers, objective net; µs per decide in each run: {runs}"
    yield ""


def _routing_goals(quality: RoutingQuality | None, cost: DecisionCost | None) -> Iterator[str]:
    if quality is not None:
        share = quality.oracle_share
        yield goal_line(
            "routing: dynamic approvals / oracle's",
            f"{share:.1%}",
            f">= {ORACLE_SHARE_GOAL:.0%}",
            share >= ORACLE_SHARE_GOAL,
        )
        yield goal_line(
            "routing: steady 0.90/0.50/0.15, approval",
            f"{quality.steady_approval:.3f}",
            f"> {STEADY_APPROVAL_GOAL:.3f}",
            quality.steady_approval > STEADY_APPROVAL_GOAL,
        )
        slowest = quality.slowest_recovery
        yield goal_line(
            "routing: recovered provider leads again",
            "never" if slowest is None else f"{slowest} sess.",
            f"<= {RECOVERY_SESSIONS_GOAL} sessions",
            slowest is not None and slowest <= RECOVERY_SESSIONS_GOAL,
        )
        for name, figure in (
            ("routing: exploration cost, against none", quality.exploration_cost),
            ("routing: explored sessions' lost approvals", quality.explored_cost),
        ):
            yield goal_line(
                name, f"{figure:+.2%}", f"<= {EXPLORATION_COST_GOAL:.1%}", figure <= EXPLORATION_COST_GOAL
            )
    if cost is not None:
        yield goal_line(
            "routing: decide, 20 rules and 3 providers",
            f"{cost.microseconds:.1f} µs",
            f"under {DECISION_US_GOAL:g} µs",
            cost.microseconds < DECISION_US_GOAL,
        )


def _recovery(quality: RecoveryQuality) -> Iterator[str]:
    yield (
        f"recovery: {quality.sessions:,} simulated sessions over the same providers and segments, "
        f"each with 1, 2 and 3 attempts ({quality.seconds:.1f} s)"
    )
    yield f"declines from {SOURCE}:"
    yield (
        "  about 25% soft, about 20% of those approved at another processor (at each segment's best "
        f"provider); this world's first attempts: {quality.soft_share:.0%} of declines soft, "
        f"{quality.fallback_recovery:.0%} of those approved at the next provider"
    )
    columns = ("approved", "oracle", "of oracle", "2nd att.", "recovered")
    yield f"{'':<{LABEL_WIDTH}}" + "".join(f"{name:>11}" for name in columns)
    for run in quality.runs:
        yield (
            f"{f'payorch, at most {run.attempts} attempt' + ('s' if run.attempts > 1 else ''):<{LABEL_WIDTH}}"
            f"{run.approvals:>11,}{quality.oracle:>11,}{run.approvals / quality.oracle:>11.1%}"
            f"{run.second_attempts / quality.sessions:>11.1%}{run.recovered:>11,}"
        )
    yield (
        f"the oracle knows which providers approve each customer: it approves all {quality.oracle:,} "
        f"with any number of attempts, {quality.oracle_recovered:,} of them lost by payorch's first attempt"
    )
    yield ""


def _recovery_goals(quality: RecoveryQuality | None) -> Iterator[str]:
    if quality is None:
        return
    share = quality.oracle_share_recovered
    yield goal_line(
        "recovery: 2 attempts, recovered / oracle's",
        f"{share:.1%}",
        f">= {ORACLE_RECOVERY_GOAL:.0%}",
        share >= ORACLE_RECOVERY_GOAL,
    )
    one, two = quality.run(1).approvals, quality.run(2).approvals
    yield goal_line("recovery: approvals, 2 attempts - 1", f"{two - one:+,}", ">= 0", two >= one)


def _cores(measurements: list[Measurement]) -> Iterator[str]:
    if not measurements:
        return
    yield f"{'cores busy (measured phase)':<{LABEL_WIDTH}}{'server':>11}{'load gen':>9}{'other':>9}"
    for m in measurements:
        other = "n/a" if m.cores.other is None else f"{m.cores.other:.2f}"
        yield f"{m.label:<{LABEL_WIDTH}}{m.cores.server:>11.2f}{m.cores.load:>9.2f}{other:>9}"
    yield ""


def _throughput_goals(name: str, payorch: Measurement, bare: Measurement, goal: float) -> Iterator[str]:
    rate = bare.result.requests_per_s
    ratio = payorch.result.requests_per_s / rate if rate else 0.0
    yield goal_line(f"{name}: payorch / bare", _ratio(ratio), f">= {goal:g}x", ratio >= goal)


def _rounds(results: Results, name: str) -> Iterator[str]:
    """The ratio of each round of the pairs behind `name`'s goal, where there were several."""
    ratios = results.rounds.get(name, [])
    if len(ratios) > 1:
        each = ", ".join(_ratio(ratio) for ratio in ratios)
        yield f"  (rounds, payorch and the bare app in turn first: {each}; the median round shown)"


def _goals(results: Results) -> Iterator[str]:
    yield f"{'goal':<{LABEL_WIDTH}}{'figure':>11}   goal"
    creates = [
        ("create, 1 application", results.create_one),
        (f"create, {results.applications} applications", results.create_many),
    ]
    bare_creates = (results.bare_create, results.bare_create_many or results.bare_create)
    for (name, create), bare_create in zip(creates, bare_creates, strict=True):
        if create is not None and bare_create is not None:
            yield from _throughput_goals(name, create, bare_create, CREATE_RATIO_GOAL)
            yield from _rounds(results, name)
        if create is not None:
            p99 = create.result.p99_ms
            yield goal_line(
                f"{name}: p99", f"{p99:.1f} ms", f"<= {CREATE_P99_GOAL_MS:g} ms", p99 <= CREATE_P99_GOAL_MS
            )
    if results.create_one is not None and results.bare_create is not None:
        # Little's law: with every connection always waiting, the mean latency is connections / rate;
        # a p99 of 50 ms needs at least this many answers a second, whatever the server.
        needed = results.connections / (CREATE_P99_GOAL_MS / 1000)
        bare = results.bare_create.result.requests_per_s
        yield (
            f"  (at {results.connections} connections a p99 <= {CREATE_P99_GOAL_MS:g} ms needs "
            f">= {needed:.0f} req/s, {needed / bare:.2f}x of this run's bare endpoint, whose own p99 was "
            f"{results.bare_create.result.p99_ms:.1f} ms)"
        )
    if results.create_paced is not None:
        paced = results.create_paced.result
        yield goal_line(
            f"create at {results.paced_rate_per_s:.0f}/s (half the peak): p99",
            f"{paced.p99_ms:.1f} ms",
            f"<= {CREATE_P99_GOAL_MS:g} ms",
            paced.p99_ms <= CREATE_P99_GOAL_MS,
        )
    if results.read is not None and results.bare_read is not None:
        yield from _throughput_goals("read", results.read, results.bare_read, READ_RATIO_GOAL)
        yield from _rounds(results, "read")
    if results.isolation is not None:
        change = results.isolation.change
        yield goal_line(
            "isolation: creates/s beside the slow one",
            f"{change:+.1%}",
            f"within {ISOLATION_CHANGE_GOAL:.0%}",
            abs(change) <= ISOLATION_CHANGE_GOAL,
        )
    if results.lists is not None:
        for name, timing, goal_ms in (
            ("first page", results.lists.first_page, LIST_FIRST_PAGE_P50_GOAL_MS),
            ("page past the end", results.lists.past_the_end, LIST_PAST_THE_END_P50_GOAL_MS),
        ):
            yield goal_line(
                f"lists: {name} p50, {results.lists.sessions / 1e6:g}M sessions",
                f"{timing.p50_ms:.1f} ms",
                f"under {goal_ms:g} ms",
                timing.p50_ms < goal_ms,
            )
    if results.floods is not None:
        floods = results.floods
        for name, beside in (("deep pages", floods.beside_pages), ("forged events", floods.beside_events)):
            change = floods.p99_change(beside)
            yield goal_line(
                f"floods: others' create p99 beside {name}",
                f"{change:+.1%}",
                f"within {FLOOD_P99_CHANGE_GOAL:.0%}",
                change <= FLOOD_P99_CHANGE_GOAL,
            )
    if results.neighbours is not None:
        yield from _neighbours_goals(results.neighbours)
    if results.idle is not None:
        idle = results.idle
        yield goal_line("idle: actors left after idle", f"{idle.actors_after}", "0", idle.actors_after == 0)
        yield goal_line(
            "idle: RSS after idle against the baseline",
            f"{idle.rss_change:+.1%}",
            f"within {IDLE_RSS_GROWTH_GOAL:.0%}",
            idle.rss_change <= IDLE_RSS_GROWTH_GOAL,
        )
    if results.webhooks is not None:
        latency = results.webhooks
        yield goal_line(
            "webhooks: latency p50",
            f"{latency.p50_ms:.1f} ms",
            f"<= {WEBHOOK_P50_GOAL_MS:g} ms",
            latency.p50_ms <= WEBHOOK_P50_GOAL_MS,
        )
        yield goal_line(
            "webhooks: latency p99",
            f"{latency.p99_ms:.1f} ms",
            f"<= {WEBHOOK_P99_GOAL_MS:g} ms",
            latency.p99_ms <= WEBHOOK_P99_GOAL_MS,
        )
        if latency.one_at_a_time is not None:
            single = latency.one_at_a_time.p50_ms
            yield goal_line(
                "webhooks: one at a time, p50",
                f"{single:.1f} ms",
                f"<= {WEBHOOK_ONE_AT_A_TIME_P50_GOAL_MS:g} ms",
                single <= WEBHOOK_ONE_AT_A_TIME_P50_GOAL_MS,
            )
        yield goal_line("webhooks: events not delivered", f"{latency.missing}", "0", latency.missing == 0)
    yield from _steady_goals(results)
    yield from _workers_goals(results.workers)
    yield from _routing_goals(results.routing, results.decision_cost)
    yield from _recovery_goals(results.recovery)
    yield from _routing_share(results.create_one, results.decision_cost)


def _steady(runs: list[SteadyRun], bare: list[SteadyRun]) -> Iterator[str]:
    yield (
        f"{'steady creates, 1 application (open loop)':<{LABEL_WIDTH}}{'req/s':>11}{'p50 ms':>9}"
        f"{'p99 ms':>9}{'p99.9 ms':>10}{'errors':>8}{'cores':>7}{'CPU/req':>12}"
    )
    for name, measured in (("", runs), ("bare Quart-Trio POST, ", bare)):
        for run in measured:
            r = run.measurement.result
            yield (
                f"{f'{name}due at {run.rate_per_s:g}/s':<{LABEL_WIDTH}}{r.requests_per_s:>11.1f}"
                f"{r.p50_ms:>9.1f}{r.p99_ms:>9.1f}{r.p999_ms:>10.1f}{sum(r.errors.values()):>8}"
                f"{run.measurement.cores.server:>7.2f}{run.cpu_per_create_ms:>9.2f} ms"
            )
    yield ""


def _at_rate(runs: list[SteadyRun], rate: float) -> SteadyRun | None:
    return next((run for run in runs if run.rate_per_s == rate), None)


def _where_the_time_goes(results: Results) -> Iterator[str]:
    """The create's and the read's server CPU per request at CPU_GOAL_RATE, split between payorch's
    threads, beside the bare endpoint's at the same rate in the same run (the web stack's own cost);
    with the units of work each request handed to the database's thread (each one crossing there
    and one back) and the context switches of the server's threads."""
    yield (
        f"{f'where the server CPU goes, due at {CPU_GOAL_RATE:g}/s':<{LABEL_WIDTH}}{'bare':>8}{'payorch':>8}"
        f"{'Trio':>8}{'db':>8}{'other':>8}{'units':>7}{'switch':>8}{'bare sw':>8}"
    )
    yield "(per request: ms of CPU, units of work handed to the database's thread, the background"
    yield " loops' included, and context switches of the server's threads)"
    pairs = (
        ("create", _at_rate(results.steady, CPU_GOAL_RATE), _at_rate(results.bare_steady, CPU_GOAL_RATE)),
        (
            "read",
            _at_rate(results.steady_read, CPU_GOAL_RATE),
            _at_rate(results.bare_steady_read, CPU_GOAL_RATE),
        ),
    )
    for name, run, bare in pairs:
        if run is None or run.measurement.threads is None:
            continue
        split = run.measurement.threads
        bare_cpu = f"{bare.cpu_per_create_ms:>8.2f}" if bare else f"{'n/a':>8}"
        bare_threads = bare.measurement.threads if bare else None
        bare_switches = f"{bare_threads.switches:>8.1f}" if bare_threads else f"{'n/a':>8}"
        units = f"{split.crossings:>7.1f}" if split.crossings is not None else f"{'n/a':>7}"
        yield (
            f"{name:<{LABEL_WIDTH}}{bare_cpu}{run.cpu_per_create_ms:>8.2f}{split.trio_ms:>8.2f}"
            f"{split.database_ms:>8.2f}{split.other_ms:>8.2f}{units}{split.switches:>8.1f}{bare_switches}"
        )
        yield (
            f"{'':<{LABEL_WIDTH}}switches by Trio's thread {split.trio_switches:.1f}, "
            f"by the database's {split.database_switches:.1f}"
        )
    yield ""


def _at_peak(results: Results) -> Iterator[str]:
    """The create's (one application and many) and the read's server CPU per request at peak, split
    between payorch's threads, beside the bare endpoint's in the same run: at peak the units of work
    handed to the database's thread are shared by the requests that wait together."""
    pairs = (
        ("create, 1 application", results.create_one, results.bare_create),
        (f"create, {results.applications} applications", results.create_many, results.bare_create_many),
        ("read", results.read, results.bare_read),
    )
    rows = []
    for name, run, bare in pairs:
        split = None if run is None else run.threads
        if run is None or split is None or run.result.requests_per_s <= 0:
            continue
        bare_cpu = (
            f"{bare.cores.server / bare.result.requests_per_s * 1000:>8.2f}"
            if bare is not None and bare.result.requests_per_s > 0
            else f"{'n/a':>8}"
        )
        bare_switches = (
            f"{bare.threads.switches:>8.1f}" if bare is not None and bare.threads else f"{'n/a':>8}"
        )
        units = f"{split.crossings:>7.2f}" if split.crossings is not None else f"{'n/a':>7}"
        cpu = run.cores.server / run.result.requests_per_s * 1000
        rows.append(
            f"{name:<{LABEL_WIDTH}}{bare_cpu}{cpu:>8.2f}{split.trio_ms:>8.2f}"
            f"{split.database_ms:>8.2f}{split.other_ms:>8.2f}{units}{split.switches:>8.1f}{bare_switches}"
        )
    if not rows:
        return
    yield (
        f"{'where the server CPU goes, at peak':<{LABEL_WIDTH}}{'bare':>8}{'payorch':>8}"
        f"{'Trio':>8}{'db':>8}{'other':>8}{'units':>7}{'switch':>8}{'bare sw':>8}"
    )
    yield "(per request, as at a steady rate below)"
    yield from rows
    yield ""


def _steady_goals(results: Results) -> Iterator[str]:
    runs, bare = results.steady, results.bare_steady
    bare_cpu = {run.rate_per_s: run.cpu_per_create_ms for run in bare}
    for run in runs:
        goal = P99_GOALS_MS.get(run.rate_per_s)
        if goal is None:
            continue
        r = run.measurement.result
        errors = sum(r.errors.values())
        met = r.p99_ms <= goal and errors == 0
        yield goal_line(
            f"create at a steady {run.rate_per_s:g}/s: p99, errors",
            f"{r.p99_ms:.1f} ms, {errors}",
            f"<= {goal:g} ms, 0",
            met,
        )
        if run.rate_per_s == CPU_GOAL_RATE and run.rate_per_s in bare_cpu:
            ratio = run.cpu_per_create_ms / bare_cpu[run.rate_per_s]
            yield goal_line(
                f"server CPU per create at {CPU_GOAL_RATE:g}/s / bare POST",
                f"{ratio:.2f}x",
                f"<= {CPU_PER_CREATE_GOAL_RATIO:g}x",
                ratio <= CPU_PER_CREATE_GOAL_RATIO,
            )
            yield from _rounds(results, f"server CPU per create at {CPU_GOAL_RATE:g}/s")


def _routing_share(create: Measurement | None, cost: DecisionCost | None) -> Iterator[str]:
    """Routing's share of a create's server CPU: a 20-rule decision's microseconds against the server
    CPU one create took in the one-application scenario of the same run (cores busy / creates per s).
    The create scenario's own document is the default dynamic route, cheaper than 20 rules, so the
    share shown is an upper bound."""
    if create is None or cost is None or create.result.requests_per_s <= 0:
        return
    create_us = create.cores.server / create.result.requests_per_s * 1e6
    share = cost.microseconds / create_us
    yield (
        f"{'routing: share of a create, 1 application':<{LABEL_WIDTH}}{share:>11.1%}   "
        f"(a decision {cost.microseconds:.1f} µs of {create_us:,.0f} µs server CPU per create)"
    )


def report(results: Results, background: float | None) -> Iterator[str]:
    """The lines printed."""
    yield (
        f"payorch benchmark: {results.connections} connections, {results.seconds:g} s measured after "
        f"{results.warmup:g} s warm-up, {cpu_count()} cores, switch interval "
        f"{sys.getswitchinterval() * 1000:g} ms"
    )
    yield ""
    yield from _requests(results)
    yield from _at_peak(results)
    if results.workers:
        yield from _workers(results.workers)
    if results.isolation is not None:
        yield from _isolation(results.isolation)
    if results.idle is not None:
        yield from _idle(results.idle)
    if results.webhooks is not None:
        yield from _webhooks(results.webhooks)
    if results.lists is not None:
        yield from _lists(results.lists)
    if results.floods is not None:
        yield from _floods(results.floods)
    if results.neighbours is not None:
        yield from _neighbours(results.neighbours)
    if results.steady:
        yield from _steady(results.steady, results.bare_steady)
        yield from _where_the_time_goes(results)
    if results.routing is not None or results.decision_cost is not None:
        yield from _routing(results.routing, results.decision_cost)
    if results.recovery is not None:
        yield from _recovery(results.recovery)
    yield from _cores(results.measurements())
    yield from _goals(results)
    for m in results.measurements() + results.workers_measurements():
        if m.result.errors:
            shown = ", ".join(f"{kind}: {count}" for kind, count in sorted(m.result.errors.items()))
            yield f"errors of {m.label}: {shown}"
        if m.result.capped:
            yield f"{m.label}: stopped at the request cap before the measured phase ended"
    if results.problems:
        yield f"payorch logged {len(results.problems)} warnings or errors (the first on stderr above)"
    if background is not None and background > BUSY_MACHINE_CORES:
        yield f"before the run, other work kept {background:.2f} cores busy: these figures are not clean"
    yield ""
    yield (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}"
    )
