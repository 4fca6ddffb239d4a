"""`python -m bench` (`make bench`): payorch's speed scenarios, each figure next to its goal.

- create: `POST /api/v1/sessions` with 32 connections, for one application, then spread over 50
  applications (each request with the next application's API key), against a bare Quart-Trio POST;
- read: `GET /api/v1/sessions/{id}` of one session, against a bare Quart-Trio GET;
- workers: creates for one application and reads with `payorch serve --workers N` (1, then 2), run
  apart, each against the bare app on as many hypercorn workers in the same run: CPU of the whole
  process tree, RSS per worker (`bench/workers.py`);
- isolation: the 50 applications' creates alone, then right after beside 4 more connections creating
  sessions for one more application whose provider (Stripe, through payorch's Stripe adapter, at a
  fake Stripe on loopback) answers each checkout after 1 s; their creates/s must stay within 10% of
  the run without;
- idle: 10,000 applications, one create each, then idle: every actor must stop and this process's
  memory come back to within 10% of what it was before (`bench/idle.py`);
- webhooks: delivery latency to a real HTTPS receiver on loopback, payorch serving as a process of its
  own (`bench/webhooks.py`);
- lists: a session list's first page and a page past its end, one request at a time, with a
  million sessions in the application: p50 under 10 ms and 5 ms (`bench/lists.py`);
- floods: other merchants' creates at a steady rate, alone, then while one merchant floods deep pages
  of its 100,000 sessions at its limits, then while a stranger floods a provider-event route, on a
  payorch with its default rate limits: their p99 must stay within 20% (`bench/floods.py`);
- neighbours: other merchants' creates at a steady rate alone, then beside a routing PUT and
  evaluate flood from one merchant's JWT, beside two merchants looping backtests over 100,000
  sessions each, beside a merchant's backlog of 100,000 webhook deliveries draining to a receiver
  answering 204, and beside 40 client addresses flooding login with unknown e-mails, on a payorch
  with its default limits: their p99 must stay within 25%, another merchant's webhook p50 beside
  the backlog within 25% of alone, and payorch's memory under the login flood within +100 MiB of
  before (`bench/neighbours.py`; its receivers run as processes of their own);
- steady: creates for one application due at a steady 50, 100 and 200/s for 20 s each (open loop,
  latency from each request's due time): p50, p99, p99.9, errors and server CPU per create, and the
  bare Quart-Trio POST at the same rates for its CPU per request; then reads and bare GETs due at
  100/s; for each, where the CPU went: Trio's thread, the database's, the others, with the context
  switches and the units of work handed to the database's thread per request (`bench/steady.py`);
- payments_search: a merchant's sessions across its 10 applications (`GET /api/v1/sessions`), with
  100,000 sessions: the first page, a page 1,000 deep (p50 within 1.5x of the first's), a search by
  order reference and by e-mail, and the CSV export of them all with the server's memory growth
  (`bench/payments_search.py`);
- reconciliation: a day of 100,000 payments and 10,000 refunds at one sandbox account (written
  straight into the database) reconciled through the API, POST then GET until it ends: under 30 s,
  the server's RSS growing under 50 MiB meanwhile, and other merchants' creates' p99 beside runs
  within 20% of alone (`bench/reconciliation.py`);
- routing: a simulation of routing quality driving payorch's real routing code (approvals against
  an oracle's, recovery after an outage, exploration's cost), and microseconds per routing
  decision with 20 rules and 3 providers (`bench/routing.py`); then the same sessions with 1, 2
  and 3 attempts under a recovery policy, against an oracle (`bench/recovery.py`); no payorch is
  started.

payorch runs in this process (`payorch.service.run`) on a fresh embedded PostgreSQL, and the bare app
(`bench/bare.py`) beside it in a process of its own for as long; each figure a ratio goal compares
with the bare app's is measured in pairs, payorch's window and the bare app's one right after the
other, in `--rounds` rounds that alternate which goes first, the median round's figures shown
(`bench/paired.py`). The workers scenario runs both as processes of their own, side by side;
webhooks runs payorch as one (its receiver and the paying clients stay in this process).
The load comes from a separate process (`bench/load.py`).
Everything goes to loopback, and every run is bounded in time and in request count. The figures go to
stdout; what the benchmark is doing goes to stderr. `--only` picks scenarios; `--switch-interval-ms`
sets this process's interpreter switch interval (`sys.setswitchinterval`), and so payorch's where it
runs in it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from bench.floods import FloodShape, measure_floods
from bench.idle import measure_idle
from bench.lists import measure_lists
from bench.measure import (
    Measurement,
    Shape,
    background_cores,
    measure,
    measure_beside,
    progress,
    scraped_units,
)
from bench.neighbours import NeighbourShape, measure_neighbours
from bench.paired import BareApart, Paired, paired, running_bare_apart
from bench.payments_search import measure_payments_search, payments_search_lines
from bench.payorch_target import (
    Payorch,
    Target,
    bench_settings,
    create_target,
    problems_logged,
    read_target,
    running_payorch,
)
from bench.reconciliation import ReconciliationShape, measure_reconciliation, reconciliation_lines
from bench.recovery import measure_recovery
from bench.report import Isolation, Results, report
from bench.routing import measure_decision_cost, measure_quality
from bench.shop import Merchant, new_session, sandbox_link, signed_up_merchant, stripe_link
from bench.slow_stripe import open_slow_stripe
from bench.steady import CPU_GOAL_RATE, RATES_PER_S, SECONDS, SteadyRun, measure_steady
from bench.webhooks import measure_webhook_latency
from bench.workers import ANY_SESSION_ID, WORKER_COUNTS, measure_workers
from payorch.config import MAX_WORKERS

SCENARIOS = (
    "create",
    "steady",
    "read",
    "workers",
    "isolation",
    "idle",
    "webhooks",
    "lists",
    "floods",
    "neighbours",
    "payments_search",
    "reconciliation",
    "routing",
)
BARE_CREATE_LABEL, BARE_READ_LABEL = "bare Quart-Trio POST", "bare Quart-Trio GET"
READ_LABEL = "GET /api/v1/sessions/{id}"
# Rounds of each pair behind a ratio goal: creates at peak (1 application), reads at peak, CPU per
# create at CPU_GOAL_RATE (`bench/paired.py`).
ROUNDS = 3


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="payorch's speed scenarios, each figure next to its goal",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measured phase per run (default 10)")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured warm-up per run (default 2)")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections (default 32)")
    parser.add_argument(
        "--only",
        default=",".join(SCENARIOS),
        help=f"scenarios to run, comma-separated (default {','.join(SCENARIOS)})",
    )
    parser.add_argument(
        "--steady-rates",
        default=",".join(f"{rate:g}" for rate in RATES_PER_S),
        help="creates/s of the steady scenario, comma-separated (default 50,100,200)",
    )
    parser.add_argument(
        "--steady-seconds", type=float, default=SECONDS, help="measured phase per steady rate (default 20)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=ROUNDS,
        help=f"rounds of each payorch and bare pair behind a ratio goal (default {ROUNDS})",
    )
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=None,
        help="this process's interpreter switch interval, ms (default Python's, 5)",
    )
    parser.add_argument(
        "--workers-list",
        default=",".join(str(count) for count in WORKER_COUNTS),
        help="worker processes of the workers scenario, comma-separated (default 1,2)",
    )
    parser.add_argument(
        "--applications",
        type=int,
        default=50,
        help="applications of the many-application creates (default 50)",
    )
    parser.add_argument(
        "--slow-connections", type=int, default=4, help="connections on the slow application (default 4)"
    )
    parser.add_argument(
        "--slow-delay", type=float, default=1.0, help="seconds the slow provider takes (default 1)"
    )
    parser.add_argument(
        "--idle-applications", type=int, default=10_000, help="applications touched once (default 10000)"
    )
    parser.add_argument(
        "--idle-actor-s", type=float, default=2.0, help="engine.actor_idle_s of the idle scenario (default 2)"
    )
    parser.add_argument(
        "--flood-rate",
        type=float,
        default=40.0,
        help="the others' creates/s in floods and neighbours (default 40)",
    )
    parser.add_argument(
        "--flood-sessions", type=int, default=100_000, help="sessions of the flooder (default 100000)"
    )
    parser.add_argument(
        "--flood-seconds",
        type=float,
        default=30.0,
        help="measured phase per run of floods, alone and beside each flood (default 30: a p99 of"
        " 1,200 creates at 40/s, not of 400)",
    )
    parser.add_argument(
        "--backlog",
        type=int,
        default=100_000,
        help="webhook deliveries pending in neighbours (default 100000)",
    )
    parser.add_argument(
        "--neighbour-seconds",
        type=float,
        default=30.0,
        help="measured phase per run of neighbours, each alone and beside (default 30: a p99 of"
        " 1,200 creates at 40/s, not of 400)",
    )
    parser.add_argument(
        "--backtest-sessions",
        type=int,
        default=100_000,
        help="sessions of each backtesting merchant in neighbours (default 100000)",
    )
    parser.add_argument(
        "--login-addresses", type=int, default=40, help="client addresses flooding login (default 40)"
    )
    parser.add_argument(
        "--search-sessions",
        type=int,
        default=100_000,
        help="sessions of the merchant whose payments are searched (default 100000)",
    )
    parser.add_argument(
        "--reconcile-payments",
        type=int,
        default=100_000,
        help="payments of the reconciled day (default 100000)",
    )
    parser.add_argument(
        "--reconcile-refunds", type=int, default=10_000, help="refunds of the reconciled day (default 10000)"
    )
    parser.add_argument(
        "--list-sessions",
        type=int,
        default=1_000_000,
        help="sessions of the application whose list is timed (default 1000000)",
    )
    args = parser.parse_args(argv)
    args.scenarios = {name.strip() for name in args.only.split(",") if name.strip()}
    if unknown := args.scenarios - set(SCENARIOS):
        parser.error(f"unknown scenarios {', '.join(sorted(unknown))}: pick from {', '.join(SCENARIOS)}")
    if not 0 < args.seconds <= 300 or not 0 <= args.warmup <= 60 or not 1 <= args.connections <= 256:
        parser.error("need 0 < --seconds <= 300, 0 <= --warmup <= 60, 1 <= --connections <= 256")
    if not 1 <= args.rounds <= 9:
        parser.error("need 1 <= --rounds <= 9")
    if not 0 < args.neighbour_seconds <= 300 or not 0 < args.flood_seconds <= 300:
        parser.error("need 0 < --neighbour-seconds <= 300, 0 < --flood-seconds <= 300")
    if (
        not 1 <= args.applications <= 1000
        or not 1 <= args.slow_connections <= 64
        or not 0 <= args.slow_delay <= 10
    ):
        parser.error(
            "need 1 <= --applications <= 1000, 1 <= --slow-connections <= 64, 0 <= --slow-delay <= 10"
        )
    if not 2 <= args.idle_applications <= 100_000 or not 0 < args.idle_actor_s <= 600:
        parser.error("need 2 <= --idle-applications <= 100000, 0 < --idle-actor-s <= 600")
    if not 1 <= args.flood_rate <= 1000 or not 1 <= args.flood_sessions <= 10_000_000:
        parser.error("need 1 <= --flood-rate <= 1000, 1 <= --flood-sessions <= 10000000")
    try:
        rates = [float(rate) for rate in args.steady_rates.split(",")]
    except ValueError:
        parser.error("--steady-rates takes numbers separated by commas")
    if not rates or not all(1 <= rate <= 5000 for rate in rates) or not 0 < args.steady_seconds <= 300:
        parser.error("need each steady rate in 1..5000 and 0 < --steady-seconds <= 300")
    if (
        not 1 <= args.backlog <= 10_000_000
        or not 1 <= args.backtest_sessions <= 10_000_000
        or not 1 <= args.login_addresses <= 250
    ):
        parser.error("need 1 <= --backlog, --backtest-sessions <= 10000000 and 1 <= --login-addresses <= 250")
    if args.switch_interval_ms is not None and not 0.01 <= args.switch_interval_ms <= 1000:
        parser.error("need 0.01 <= --switch-interval-ms <= 1000")
    if not 1 <= args.list_sessions <= 10_000_000:
        parser.error("need 1 <= --list-sessions <= 10000000")
    if not 1 <= args.search_sessions <= 10_000_000:
        parser.error("need 1 <= --search-sessions <= 10000000")
    if (
        not 10 <= args.reconcile_payments <= 10_000_000
        or not 0 <= args.reconcile_refunds * 10 <= args.reconcile_payments
    ):
        parser.error(
            "need 10 <= --reconcile-payments <= 10000000 and --reconcile-refunds at most a tenth of them"
        )
    try:
        args.worker_counts = list(dict.fromkeys(int(count) for count in args.workers_list.split(",")))
    except ValueError:
        parser.error("--workers-list takes whole numbers separated by commas")
    if not args.worker_counts or not all(1 <= count <= MAX_WORKERS for count in args.worker_counts):
        parser.error(f"need each of --workers-list in 1..{MAX_WORKERS}")
    return args


def _shape(args: argparse.Namespace) -> Shape:
    return Shape(connections=args.connections, warmup_s=args.warmup, measured_s=args.seconds)


def _neighbour_shape(args: argparse.Namespace) -> NeighbourShape:
    return NeighbourShape(
        applications=10,
        rate_per_s=args.flood_rate,
        login_addresses=args.login_addresses,
        logins_per_address=10,
        backlog=args.backlog,
        endpoints=100,
        backtest_sessions=args.backtest_sessions,
        routing_connections=4,
        webhook_rate_per_s=20.0,
        warmup_s=args.warmup,
        measured_s=args.neighbour_seconds,
    )


def _split_of(base_url: str) -> dict[str, Any]:
    """What `measure` takes to split this process's CPU between its threads and count the units of
    work the payorch at `base_url` (in this process) hands to its database's thread."""
    return {"threads_of": os.getpid(), "units": partial(scraped_units, base_url)}


# A steady measurement: target, rates, seconds, warm-up, label (`measure_steady` with a server's clocks).
Steady = Callable[[Target, tuple[float, ...], float, float, str], Awaitable[list[SteadyRun]]]


def _throughput(payorch: Measurement, bare: Measurement) -> float:
    rate = bare.result.requests_per_s
    return payorch.result.requests_per_s / rate if rate else 0.0


def _cpu(payorch: SteadyRun, bare: SteadyRun) -> float:
    return payorch.cpu_per_create_ms / bare.cpu_per_create_ms if bare.cpu_per_create_ms else float("nan")


async def _payorch_scenarios(
    payorch: Payorch, bare: BareApart | None, merchant: Merchant, args: argparse.Namespace, results: Results
) -> None:
    """create, read, steady and isolation, on one payorch; each figure a ratio compares with the
    bare app's (running beside, `bare`) paired with it (`bench/paired.py`)."""
    base_url, wanted = payorch.base_url, args.scenarios
    one = await merchant.new_application("Bench", sandbox_link())
    bare_headers = {"X-API-Key": "sk_bench_unused"}
    if "create" in wanted and bare is not None:
        target = create_target(base_url, [one.api_key])
        bare_target = create_target(bare.base_url, ["sk_bench_unused"])
        creates: Paired[Measurement] = await paired(
            partial(
                measure, "POST /api/v1/sessions, 1 application", target, _shape(args), **_split_of(base_url)
            ),
            partial(bare.measured, BARE_CREATE_LABEL, bare_target, _shape(args)),
            _throughput,
            args.rounds,
        )
        results.create_one, results.bare_create = creates.payorch, creates.bare
        results.rounds["create, 1 application"] = creates.ratios
        # Latency where the server is not saturated: creates due at half the rate just measured.
        results.paced_rate_per_s = max(1.0, results.create_one.result.requests_per_s / 2)
        paced = Shape(
            connections=args.connections,
            warmup_s=args.warmup,
            measured_s=args.seconds,
            rate_per_s=results.paced_rate_per_s,
        )
        results.create_paced = await measure(
            f"POST /api/v1/sessions, 1 app, {results.paced_rate_per_s:.0f}/s due", target, paced
        )
    if "steady" in wanted and bare is not None:
        ours: Steady = partial(measure_steady, **_split_of(base_url))
        for rate in sorted(float(rate) for rate in args.steady_rates.split(",")):
            steady = await paired(
                partial(
                    _one_steady,
                    ours,
                    create_target(base_url, [one.api_key]),
                    rate,
                    args,
                    "POST /api/v1/sessions, 1 app",
                ),
                partial(
                    _one_steady,
                    bare.steady,
                    create_target(bare.base_url, ["sk_bench_unused"]),
                    rate,
                    args,
                    BARE_CREATE_LABEL,
                ),
                _cpu,
                args.rounds if rate == CPU_GOAL_RATE else 1,
            )
            results.steady.append(steady.payorch)
            results.bare_steady.append(steady.bare)
            if rate == CPU_GOAL_RATE:
                results.rounds[f"server CPU per create at {CPU_GOAL_RATE:g}/s"] = steady.ratios
        session_id = await new_session(base_url, one.api_key)
        steady_reads = await paired(
            partial(
                _one_steady,
                ours,
                read_target(base_url, session_id, {"X-API-Key": one.api_key}),
                CPU_GOAL_RATE,
                args,
                READ_LABEL,
            ),
            partial(
                _one_steady,
                bare.steady,
                read_target(bare.base_url, ANY_SESSION_ID, bare_headers),
                CPU_GOAL_RATE,
                args,
                BARE_READ_LABEL,
            ),
            _cpu,
            1,
        )
        results.steady_read, results.bare_steady_read = [steady_reads.payorch], [steady_reads.bare]
    if wanted & {"create", "isolation"}:
        progress(f"creating {args.applications} applications, each linked to the sandbox")
        many = await merchant.new_applications(args.applications, sandbox_link())
        many_target = create_target(base_url, [application.api_key for application in many])
        many_label = f"POST /api/v1/sessions, {args.applications} applications"
        if "create" in wanted and bare is not None:
            creates_many = await paired(
                partial(measure, many_label, many_target, _shape(args), **_split_of(base_url)),
                partial(
                    bare.measured,
                    f"{BARE_CREATE_LABEL}, paired with {args.applications} apps",
                    create_target(bare.base_url, ["sk_bench_unused"]),
                    _shape(args),
                ),
                _throughput,
                args.rounds,
            )
            results.create_many, results.bare_create_many = creates_many.payorch, creates_many.bare
            results.rounds[f"create, {args.applications} applications"] = creates_many.ratios
    if "isolation" in wanted:
        slow = await merchant.new_application("Bench slow", stripe_link())
        # Alone right before beside, whatever the creates scenario measured minutes earlier: the
        # machine moves between windows minutes apart as much as the goal allows (docs/benchmarks.md).
        alone = await measure(
            f"POST /api/v1/sessions, {args.applications} apps, alone", many_target, _shape(args)
        )
        slow_shape = Shape(connections=args.slow_connections, warmup_s=args.warmup, measured_s=args.seconds)
        beside, slow_result = await measure_beside(
            f"POST /api/v1/sessions, {args.applications} apps, slow beside",
            many_target,
            _shape(args),
            create_target(base_url, [slow.api_key]),
            slow_shape,
        )
        results.isolation = Isolation(
            alone=alone,
            beside=beside,
            slow=slow_result,
            slow_connections=args.slow_connections,
            slow_delay_s=args.slow_delay,
            applications=args.applications,
        )
    if "read" in wanted and bare is not None:
        session_id = await new_session(base_url, one.api_key)
        target = read_target(base_url, session_id, {"X-API-Key": one.api_key})
        reads = await paired(
            partial(measure, READ_LABEL, target, _shape(args), **_split_of(base_url)),
            partial(
                bare.measured,
                BARE_READ_LABEL,
                read_target(bare.base_url, ANY_SESSION_ID, bare_headers),
                _shape(args),
            ),
            _throughput,
            args.rounds,
        )
        results.read, results.bare_read = reads.payorch, reads.bare
        results.rounds["read"] = reads.ratios


async def _one_steady(
    measuring: Steady, target: Target, rate: float, args: argparse.Namespace, label: str
) -> SteadyRun:
    """`target` due at `rate` for --steady-seconds, measured by `measuring` (payorch's clocks or the
    bare app's: `measure_steady` with them)."""
    (run,) = await measuring(target, (rate,), args.steady_seconds, args.warmup, label)
    return run


@asynccontextmanager
async def _bare_beside(work_dir: Path, wanted: set[str]) -> AsyncIterator[BareApart | None]:
    """The bare app in a process of its own where a scenario compares with it, else None."""
    if not wanted & {"create", "read", "steady"}:
        yield None
        return
    async with running_bare_apart(work_dir) as bare:
        yield bare


async def _webhooks(work_dir: Path, results: Results) -> None:
    progress("webhooks: starting payorch and an HTTPS receiver on loopback")
    try:
        results.webhooks = await measure_webhook_latency(work_dir)
    finally:
        results.problems += problems_logged(work_dir / "payorch.log")


async def main(args: argparse.Namespace) -> None:
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    background = await background_cores()
    wanted = args.scenarios
    results = Results(
        connections=args.connections, seconds=args.seconds, warmup=args.warmup, applications=args.applications
    )
    payments_lines: list[str] = []
    reconciliation_figures: list[str] = []
    if "routing" in wanted:  # pure computation: first, while nothing else runs
        progress("routing: simulating routing quality, then timing decisions")
        results.routing = measure_quality()
        results.recovery = measure_recovery()
        results.decision_cost = measure_decision_cost()
    with tempfile.TemporaryDirectory(prefix="payorch-bench-") as temporary:
        work_dir = Path(temporary)
        if wanted & {"create", "steady", "read", "isolation"}:
            progress("starting payorch on a fresh embedded PostgreSQL, and a slow Stripe on loopback")
            (work_dir / "main").mkdir()
            try:
                async with open_slow_stripe(args.slow_delay) as stripe:
                    settings = bench_settings(work_dir / "main", stripe_api_base=stripe.url)
                    async with (
                        _bare_beside(work_dir, wanted) as bare,
                        running_payorch(settings, work_dir / "main" / "payorch.log") as payorch,
                        signed_up_merchant(payorch) as merchant,
                    ):
                        await _payorch_scenarios(payorch, bare, merchant, args, results)
                        progress("stopping payorch and the bare app")
            finally:
                results.problems += problems_logged(work_dir / "main" / "payorch.log")
        if "workers" in wanted:
            steady_rates = tuple(float(rate) for rate in args.steady_rates.split(","))
            for count in args.worker_counts:
                run_dir = work_dir / f"workers-{count}"
                run_dir.mkdir()
                try:
                    run = await measure_workers(
                        run_dir, count, _shape(args), steady_rates, args.steady_seconds
                    )
                    results.workers.append(run)
                finally:
                    results.problems += problems_logged(run_dir / "payorch.log")
        if "idle" in wanted:
            progress("idle: starting payorch on a fresh embedded PostgreSQL")
            (work_dir / "idle").mkdir()
            try:
                results.idle = await measure_idle(
                    work_dir / "idle", args.idle_applications, args.idle_actor_s, args.connections
                )
            finally:
                results.problems += problems_logged(work_dir / "idle" / "payorch.log")
        if "webhooks" in wanted:
            (work_dir / "webhooks").mkdir()
            await _webhooks(work_dir / "webhooks", results)
        if "lists" in wanted:
            progress("lists: starting payorch on a fresh embedded PostgreSQL")
            (work_dir / "lists").mkdir()
            try:
                results.lists = await measure_lists(work_dir / "lists", args.list_sessions)
            finally:
                results.problems += problems_logged(work_dir / "lists" / "payorch.log")
        if "floods" in wanted:
            progress("floods: starting payorch, with its default limits, on a fresh embedded PostgreSQL")
            (work_dir / "floods").mkdir()
            shape = FloodShape(
                applications=10,
                rate_per_s=args.flood_rate,
                sessions=args.flood_sessions,
                keys=12,
                connections=8,
                warmup_s=args.warmup,
                measured_s=args.flood_seconds,
            )
            try:
                results.floods = await measure_floods(work_dir / "floods", shape)
            finally:
                results.problems += problems_logged(work_dir / "floods" / "payorch.log")
        if "payments_search" in wanted:
            progress("payments search: starting payorch on a fresh embedded PostgreSQL")
            (work_dir / "payments").mkdir()
            try:
                payments = await measure_payments_search(work_dir / "payments", args.search_sessions)
                payments_lines = list(payments_search_lines(payments))
            finally:
                results.problems += problems_logged(work_dir / "payments" / "payorch.log")
        if "reconciliation" in wanted:
            progress("reconciliation: starting payorch on a fresh embedded PostgreSQL")
            (work_dir / "reconciliation").mkdir()
            reconcile_shape = ReconciliationShape(
                payments=args.reconcile_payments,
                refunds=args.reconcile_refunds,
                applications=10,
                rate_per_s=args.flood_rate,
                warmup_s=args.warmup,
                measured_s=args.seconds,
            )
            try:
                reconciled = await measure_reconciliation(work_dir / "reconciliation", reconcile_shape)
                reconciliation_figures = list(reconciliation_lines(reconciled))
            except* RuntimeError as failed:  # a run that failed or stuck: said, and the others go on
                reconciliation_figures = [f"reconciliation: not measured: {failed.exceptions[0]}", ""]
            finally:
                results.problems += problems_logged(work_dir / "reconciliation" / "payorch.log")
        if "neighbours" in wanted:
            progress("neighbours: starting payorch, with its default limits, and two webhook receivers")
            (work_dir / "neighbours").mkdir()
            try:
                results.neighbours = await measure_neighbours(work_dir / "neighbours", _neighbour_shape(args))
            finally:
                results.problems += problems_logged(work_dir / "neighbours" / "payorch.log")
    for line in report(results, background):
        print(line)
    for line in payments_lines:
        print(line)
    for line in reconciliation_figures:
        print(line)


if __name__ == "__main__":
    trio.run(main, _parse_args(None))
