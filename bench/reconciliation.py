"""Reconciliation: a period of 100,000 payments and 10,000 refunds at one sandbox account, reconciled
through the API as a merchant would (POST the run, then poll GET until it ends), beside other
merchants' creates.

The period's data is written straight into payorch's database (one INSERT ... SELECT
generate_series per table): the sandbox's paid checkouts and succeeded refunds of the account (what
the sandbox settles) and payorch's sessions and COMPLETED refunds they belong to, paid on one UTC day
and settling the next (the sandbox's default lag), so that every item is MATCHED.

Timed: one run alone, from its POST to the GET that finds it COMPLETED, and how much this process's
resident memory grew during it (payorch serves in this process; the client keeps nothing of the
run). Then other merchants' creates, due at a steady rate spread over their applications' keys
(open loop), alone and while runs of the same period follow one another without a pause: their p99
beside the runs must stay within 20% of alone.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_time
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.measure import Measurement, Shape, measure, progress
from bench.neighbours import _rss_peak as rss_peak
from bench.payorch_target import Payorch, Target, bench_settings, create_target, running_payorch
from bench.report import LABEL_WIDTH, goal_line
from bench.shop import SANDBOX_API_KEY, Application, Merchant, expect, sandbox_link, signed_up_merchant
from payorch.providers.base import Credentials
from payorch.providers.sandbox.adapter import sandbox_account
from payorch.storage.database import Connection, open_database

RUN_GOAL_S = 30.0
RSS_GOAL_MIB = 50
P99_GOAL = 0.20  # the others' create p99 beside the runs, at most this much above alone
POLL_S = 1.0
# A run still RUNNING this long (ten times its goal) is reported stuck and the bench goes on.
RUN_DEADLINE_S = 10 * RUN_GOAL_S
LAG_DAYS = 1  # the sandbox's default settlement lag
REFUND_MINOR = 500


@dataclass(frozen=True)
class ReconciliationShape:
    payments: int
    refunds: int
    applications: int  # the other merchant's
    rate_per_s: float  # the others' creates, due at this rate
    warmup_s: float
    measured_s: float


@dataclass(frozen=True)
class Reconciliation:
    shape: ReconciliationShape
    run_s: float  # the run alone: POST to the GET that finds it COMPLETED
    items: int
    matched: int
    rss_growth: int  # bytes: the most this process's RSS grew over its start during the run
    alone: Measurement
    beside: Measurement
    runs_beside: int  # runs completed while the others' creates were measured beside them

    def p99_change(self) -> float:
        alone = self.alone.result.p99_ms
        return self.beside.result.p99_ms / alone - 1 if alone else 0.0


async def _seed(
    conn: Connection, application_id: uuid.UUID, account: str, paid_on: date, payments: int, refunds: int
) -> None:
    """`payments` sessions paid on the day `paid_on` at the sandbox account (its checkouts and
    payorch's sessions), the first `refunds` of every tenth refunded in part that day, COMPLETED."""
    start = datetime.combine(paid_on, day_time(), UTC)
    step = timedelta(seconds=80_000 / max(payments, 1))  # all within the day
    # Payment g is paid at `start + g * step`; refund g refunds payment 10 g a minute later.
    await conn.execute(
        """INSERT INTO sandbox_checkouts (id, account, idempotency_key, amount_minor, currency,
               payment_method, order_reference, customer_email, client_reference, application_id,
               expires_at, status, paid_at, created_at)
           SELECT 'cs_sbx_bench_' || g, $5, 'bench-' || g, 1000 + (g % 500) * 10, 'PLN', 'card',
               'order-' || g, 'buyer@example.com', md5('bench-session-' || g)::uuid::text, $1,
               at + interval '30 minutes', 'paid', at, at
           FROM (SELECT g, $2::timestamptz + g * $3::interval AS at FROM generate_series(1, $4) AS g) AS p""",
        application_id,
        start,
        step,
        payments,
        account,
    )
    await conn.execute(
        """INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency,
               status, payment_method, provider_name, provider_reference, customer, expires_at,
               created_at, updated_at)
           SELECT md5('bench-session-' || g)::uuid, $1, 'order-' || g, 1000 + (g % 500) * 10, 'PLN',
               CASE WHEN g % 10 = 0 AND g / 10 <= $5 THEN 'PARTIALLY_REFUNDED' ELSE 'SUCCEEDED' END,
               'card', 'sandbox', 'cs_sbx_bench_' || g, '{"email": "buyer@example.com"}'::jsonb,
               at + interval '30 minutes', at, at
           FROM (SELECT g, $2::timestamptz + g * $3::interval AS at FROM generate_series(1, $4) AS g) AS p""",
        application_id,
        start,
        step,
        payments,
        refunds,
    )
    await conn.execute(
        """INSERT INTO sandbox_refunds (id, account, idempotency_key, checkout_id, amount_minor, currency,
               client_reference, outcome, completes_at, created_at)
           SELECT 're_sbx_bench_' || g, $1, 'bench-refund-' || g, 'cs_sbx_bench_' || (g * 10), $5, 'PLN',
               md5('bench-refund-' || g)::uuid::text, 'succeeded', at, at
           FROM (SELECT g, $2::timestamptz + (g * 10) * $3::interval + interval '1 minute' AS at
                 FROM generate_series(1, $4) AS g) AS r""",
        account,
        start,
        step,
        refunds,
        REFUND_MINOR,
    )
    await conn.execute(
        """INSERT INTO refunds (id, session_id, application_id, amount_minor, currency, status, reason,
               provider_name, provider_reference, created_at, updated_at)
           SELECT md5('bench-refund-' || g)::uuid, md5('bench-session-' || (g * 10))::uuid, $1, $5, 'PLN',
               'COMPLETED', 'REQUESTED_BY_CUSTOMER', 'sandbox', 're_sbx_bench_' || g, at, at
           FROM (SELECT g, $2::timestamptz + (g * 10) * $3::interval + interval '1 minute' AS at
                 FROM generate_series(1, $4) AS g) AS r""",
        application_id,
        start,
        step,
        refunds,
        REFUND_MINOR,
    )
    for table in ("sandbox_checkouts", "sandbox_refunds", "checkout_sessions", "refunds"):
        await conn.execute(f"ANALYZE {table}")


async def _reconcile(
    http: httpx.AsyncClient, merchant: Merchant, application: Application, day: str
) -> dict[str, Any]:
    """One run of the account over `day`, started and polled through the API as a merchant would:
    the run once it ended (its first item only)."""
    path = f"/api/v1/applications/{application.id}/reconciliations"
    body = {"provider": "sandbox", "from": day, "to": day}
    started = await expect(await http.post(path, json=body, headers=merchant.authorization), 202)
    deadline = trio.current_time() + RUN_DEADLINE_S
    while True:
        if trio.current_time() > deadline:
            raise RuntimeError(f"the run was still RUNNING after {RUN_DEADLINE_S:g} s: stuck")
        await trio.sleep(POLL_S)
        run: dict[str, Any] = await expect(
            await http.get(f"{path}/{started['id']}?limit=1", headers=merchant.authorization), 200
        )
        if run["status"] != "RUNNING":
            if run["status"] != "COMPLETED":
                raise RuntimeError(f"the run ended {run['status']}: {run.get('error')}")
            return run


async def _timed_run(
    http: httpx.AsyncClient, merchant: Merchant, application: Application, day: str
) -> tuple[float, dict[str, Any], int]:
    """One run alone: its seconds, the run, and the most RSS grew over its start meanwhile."""
    async with rss_peak() as peak:
        before = peak[0]
        began = time.perf_counter()
        run = await _reconcile(http, merchant, application, day)
        elapsed = time.perf_counter() - began
    return elapsed, run, peak[0] - before


async def measure_reconciliation(work_dir: Path, shape: ReconciliationShape) -> Reconciliation:
    settings = bench_settings(work_dir)
    paced = Shape(
        connections=16, warmup_s=shape.warmup_s, measured_s=shape.measured_s, rate_per_s=shape.rate_per_s
    )
    paid_on = datetime.now(UTC).date() - timedelta(days=LAG_DAYS + 1)
    day = (paid_on + timedelta(days=LAG_DAYS)).isoformat()
    async with (
        running_payorch(settings, work_dir / "payorch.log") as payorch,
        signed_up_merchant(payorch) as merchant,
        signed_up_merchant(payorch, "others@merchant.example", 2) as others,
    ):
        progress(f"reconciliation: {shape.applications} applications of the others, one reconciled")
        many = await others.new_applications(shape.applications, sandbox_link())
        creates = create_target(payorch.base_url, [application.api_key for application in many])
        reconciled = await merchant.new_application("Bench reconciled", sandbox_link())
        progress(
            f"reconciliation: writing {shape.payments} payments and {shape.refunds} refunds paid on {paid_on}"
        )
        await _prepare(payorch, reconciled, paid_on, shape)
        async with httpx.AsyncClient(base_url=payorch.base_url, timeout=120) as http:
            progress(f"reconciliation: one run over {day}, alone")
            run_s, run, rss_growth = await _timed_run(http, merchant, reconciled, day)
            progress(f"reconciliation: the run took {run_s:.1f} s")
            label = f"others' creates, {shape.rate_per_s:g}/s due"
            alone = await measure(f"{label}, alone", creates, paced)
            beside, runs_beside = await _beside_runs(http, merchant, reconciled, day, label, creates, paced)
        progress("stopping payorch")
    return Reconciliation(
        shape=shape,
        run_s=run_s,
        items=int(run["items"]["totalItems"]),
        matched=int(run["counts"].get("MATCHED", 0)),
        rss_growth=rss_growth,
        alone=alone,
        beside=beside,
        runs_beside=runs_beside,
    )


async def _beside_runs(
    http: httpx.AsyncClient,
    merchant: Merchant,
    application: Application,
    day: str,
    label: str,
    creates: Target,
    paced: Shape,
) -> tuple[Measurement, int]:
    """The others' creates measured while runs of the period follow one another; how many ended."""
    completed = 0

    async def runs() -> None:
        nonlocal completed
        while True:
            await _reconcile(http, merchant, application, day)
            completed += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(runs)
        beside = await measure(f"{label}, runs beside", creates, paced)
        nursery.cancel_scope.cancel()
    return beside, completed


async def _prepare(
    payorch: Payorch, application: Application, paid_on: date, shape: ReconciliationShape
) -> None:
    account = sandbox_account(Credentials(api_key=SANDBOX_API_KEY))
    async with open_database(payorch.service.db.dsn, min_size=1, max_size=1) as db:
        await db.transaction(
            _seed, uuid.UUID(application.id), account, paid_on, shape.payments, shape.refunds
        )


def reconciliation_lines(result: Reconciliation) -> Iterator[str]:
    """The figures, then the goals beside them."""
    shape = result.shape
    yield (
        f"reconciliation: a day of {shape.payments:,} payments and {shape.refunds:,} refunds at one sandbox "
        "account, through the API (POST, then GET every second)"
    )
    rate = result.items / result.run_s if result.run_s else 0.0
    yield (
        f"{'one run, alone':<{LABEL_WIDTH}}{result.run_s:>10.2f} s   ({result.items:,} items, "
        f"{result.matched:,} matched, {rate:,.0f} items/s, server RSS +{result.rss_growth / 2**20:.1f} MiB)"
    )
    yield f"{'':<{LABEL_WIDTH}}{'p50 ms':>11}{'p99 ms':>9}"
    for measurement in (result.alone, result.beside):
        yield (
            f"{measurement.label:<{LABEL_WIDTH}}{measurement.result.p50_ms:>11.1f}"
            f"{measurement.result.p99_ms:>9.1f}"
        )
    yield f"runs completed while the others' creates were measured beside them: {result.runs_beside}"
    yield ""
    yield goal_line(
        "reconciliation: 100k payments + 10k refunds",
        f"{result.run_s:.1f} s",
        f"under {RUN_GOAL_S:g} s",
        result.run_s < RUN_GOAL_S and result.matched == shape.payments + shape.refunds,
    )
    growth_mib = result.rss_growth / 2**20
    yield goal_line(
        "reconciliation: server RSS growth during run",
        f"{growth_mib:.1f} MiB",
        f"under {RSS_GOAL_MIB} MiB",
        growth_mib < RSS_GOAL_MIB,
    )
    change = result.p99_change()
    yield goal_line(
        "reconciliation: others' create p99 vs alone",
        f"{change:+.0%}",
        f"within +{P99_GOAL:.0%}",
        change <= P99_GOAL,
    )
