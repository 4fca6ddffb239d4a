"""Payments search: a merchant's sessions across its applications (`GET /api/v1/sessions`) with
100,000 sessions spread over 10 applications (written straight into the database, one INSERT ...
SELECT generate_series), one request at a time (200 of each after 20 unmeasured, timed as
`bench/lists.py` times its pages), so each figure is a request's own cost.

Timed: the first page; a page 1,000 pages deep (its cursor, the key of the 20,000th session, read
from the database), which must cost what the first does (within 1.5x: keyset pages read their own
rows and no others); a search by order reference and one by customer e-mail; and the CSV export of
all the sessions, its time and how much this process's resident memory grew while it streamed
(payorch serves in this process; the client reads the stream and keeps none of it). Beside them,
the plan PostgreSQL chooses for the deep page (EXPLAIN), which must be an index scan.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import trio

from bench.lists import Timing, _times
from bench.measure import progress, rss_bytes
from bench.payorch_target import Payorch, bench_settings, running_payorch
from bench.report import LABEL_WIDTH, goal_line
from bench.shop import sandbox_link, signed_up_merchant
from payorch.http.operations.session_search import cursor_of
from payorch.storage.database import Connection, open_database
from payorch.storage.session_search import SessionSearch, search_statement
from payorch.storage.sessions import PAGE_COLUMNS
from payorch.values.statuses import SessionStatus

APPLICATIONS = 10
PAGE = 20  # the default limit
DEEP_PAGES = 1000
EXPORTS = 2
DEEP_PAGE_GOAL = 1.5  # the deep page's p50 at most this many times the first page's
EXPORT_RSS_GOAL_MIB = 64  # growth of the server's memory while the whole list streams


@dataclass(frozen=True)
class PaymentsSearch:
    sessions: int
    first_page: Timing
    deep_page: Timing
    by_order_reference: Timing
    by_email: Timing
    export_s: float  # the fastest of the exports of every session
    export_rows: int
    export_rss_growth: int  # bytes: the most this process's RSS grew over its start while exporting
    deep_page_plan: str  # the scan of EXPLAIN's plan for the deep page
    filter_plans: list[tuple[str, str]]  # the scan of each filter's first page


async def _seed(conn: Connection, application_ids: list[uuid.UUID], count: int) -> None:
    """`count` sessions spread over the applications, one a second back from the newest: 5,000
    customers' e-mails, three providers, three statuses, amounts from 10.00 to 59.90 EUR."""
    await conn.execute(
        """INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency,
               status, payment_method, provider_name, provider_reference, customer, created_at, updated_at)
           SELECT gen_random_uuid(), ($1::uuid[])[1 + g % cardinality($1::uuid[])], 'order-' || g,
               1000 + (g % 500) * 10, 'EUR', (ARRAY['SUCCEEDED', 'PENDING', 'FAILED'])[1 + g % 3], 'card',
               (ARRAY['sandbox', 'stripe', 'mollie'])[1 + g % 3], 'bench-' || g,
               jsonb_build_object('email', 'buyer' || (g % 5000) || '@example.com'),
               now() - g * interval '1 second', now()
           FROM generate_series(1, $2) AS g""",
        application_ids,
        count,
    )
    await conn.execute("ANALYZE checkout_sessions")


def deep_pages(sessions: int) -> int:
    """How deep the deep page is: `DEEP_PAGES`, or fewer when the list is shorter (a small run)."""
    return max(1, min(DEEP_PAGES, sessions // PAGE - 1))


async def _deep_key_and_plan(conn: Connection, merchant_id: uuid.UUID, pages: int) -> tuple[str, str]:
    """The cursor of the page `pages` deep, and the scan of EXPLAIN's plan for that page."""
    row = await conn.fetchrow(
        """SELECT created_at, id FROM checkout_sessions WHERE merchant_id = $1
           ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT 1""",
        merchant_id,
        pages * PAGE - 1,
    )
    key = (row["created_at"], row["id"])
    statement, args = search_statement(PAGE_COLUMNS, SessionSearch(merchant_id), key, PAGE + 1)
    return cursor_of(key), await _scan(conn, statement, args)


async def _scan(conn: Connection, statement: str, args: list[object]) -> str:
    """The scan of the plan PostgreSQL chooses for `statement`."""
    plan = [str(row[0]) for row in await conn.fetch(f"EXPLAIN {statement}", *args)]
    return next((line for line in plan if "Scan" in line), plan[0]).replace("->", "").strip()


async def _filter_scans(conn: Connection, merchant_id: uuid.UUID) -> list[tuple[str, str]]:
    """The scan of each filter's first page, by the filter's name."""
    filters = {
        "orderReference": SessionSearch(merchant_id, order_reference="order-1"),
        "customerEmail": SessionSearch(merchant_id, customer_email="buyer1@example.com"),
        "status": SessionSearch(merchant_id, status=SessionStatus.FAILED),
        "provider": SessionSearch(merchant_id, provider="stripe"),
        "currency+amount": SessionSearch(
            merchant_id, currency="EUR", amount_min_minor=1000, amount_max_minor=1000
        ),
        "createdFrom/To": SessionSearch(
            merchant_id,
            created_from=datetime.now(UTC) - timedelta(hours=2),
            created_before=datetime.now(UTC) - timedelta(hours=1),
        ),
    }
    found = []
    for name, search in filters.items():
        statement, args = search_statement(PAGE_COLUMNS, search, None, PAGE + 1)
        found.append((name, await _scan(conn, statement, args)))
    return found


async def _merchant_of(conn: Connection, application_id: uuid.UUID) -> uuid.UUID:
    merchant_id: uuid.UUID = await conn.fetchval(
        "SELECT merchant_id FROM applications WHERE id = $1", application_id
    )
    return merchant_id


async def _export(http: httpx.AsyncClient, headers: dict[str, str]) -> tuple[float, int, int]:
    """One export of every session: seconds, rows, and the most RSS grew over its start."""
    before = peak = rss_bytes()
    done = trio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_bytes())
            await trio.sleep(0.02)

    lines = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample)
        started = time.perf_counter()
        async with http.stream(
            "GET", "/api/v1/sessions", headers={**headers, "Accept": "text/csv"}
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"export: {response.status_code}")
            async for chunk in response.aiter_bytes():
                lines += chunk.count(b"\n")
        elapsed = time.perf_counter() - started
        done.set()
    return elapsed, lines - 1, peak - before


async def measure_payments_search(work_dir: Path, sessions: int) -> PaymentsSearch:
    settings = bench_settings(work_dir)
    async with (
        running_payorch(settings, work_dir / "payorch.log") as payorch,
        signed_up_merchant(payorch) as merchant,
    ):
        progress(f"payments search: {APPLICATIONS} applications, {sessions} sessions across them")
        applications = await merchant.new_applications(APPLICATIONS, sandbox_link())
        ids = [uuid.UUID(application.id) for application in applications]
        deep_cursor, plan, filter_plans = await _prepare(payorch, ids, sessions)
        headers = merchant.authorization
        async with httpx.AsyncClient(base_url=payorch.base_url, timeout=120) as http:
            progress("payments search: the first page, a deep page, two searches, one request at a time")
            first = await _times(http, f"/api/v1/sessions?limit={PAGE}", headers)
            deep = await _times(http, f"/api/v1/sessions?limit={PAGE}&after={deep_cursor}", headers)
            by_reference = await _times(
                http, f"/api/v1/sessions?orderReference=order-{sessions // 2}", headers
            )
            by_email = await _times(http, "/api/v1/sessions?customerEmail=buyer1234@example.com", headers)
            progress(f"payments search: exporting every session as CSV, {EXPORTS} times")
            exports = [await _export(http, headers) for _ in range(EXPORTS)]
        progress("stopping payorch")
    if any(rows != sessions for _, rows, _ in exports):
        raise RuntimeError(f"the export held {[rows for _, rows, _ in exports]} sessions, not {sessions}")
    return PaymentsSearch(
        sessions=sessions,
        first_page=first,
        deep_page=deep,
        by_order_reference=by_reference,
        by_email=by_email,
        export_s=min(seconds for seconds, _, _ in exports),
        export_rows=sessions,
        export_rss_growth=max(growth for _, _, growth in exports),
        deep_page_plan=plan,
        filter_plans=filter_plans,
    )


async def _prepare(
    payorch: Payorch, application_ids: list[uuid.UUID], sessions: int
) -> tuple[str, str, list[tuple[str, str]]]:
    async with open_database(payorch.service.db.dsn, min_size=1, max_size=1) as db:
        await db.transaction(_seed, application_ids, sessions)
        merchant_id = await db.autocommit(_merchant_of, application_ids[0])
        cursor, plan = await db.autocommit(_deep_key_and_plan, merchant_id, deep_pages(sessions))
        return cursor, plan, await db.autocommit(_filter_scans, merchant_id)


def payments_search_lines(result: PaymentsSearch) -> Iterator[str]:
    """The figures, then the goals beside them."""
    yield (
        f"payments search: GET /api/v1/sessions of a merchant with {result.sessions:,} sessions across "
        f"{APPLICATIONS} applications, one request at a time"
    )
    yield f"{'':<{LABEL_WIDTH}}{'p50 ms':>11}{'p99 ms':>9}"
    for label, timing in (
        (f"first page (limit {PAGE})", result.first_page),
        (f"page {deep_pages(result.sessions):,} deep (keyset cursor)", result.deep_page),
        ("search by order reference", result.by_order_reference),
        ("search by customer e-mail", result.by_email),
    ):
        yield f"{label:<{LABEL_WIDTH}}{timing.p50_ms:>11.1f}{timing.p99_ms:>9.1f}"
    rate = result.export_rows / result.export_s if result.export_s else 0.0
    yield (
        f"{'CSV export of every session':<{LABEL_WIDTH}}{result.export_s:>10.2f} s   "
        f"({rate:,.0f} rows/s, server RSS +{result.export_rss_growth / 2**20:.1f} MiB)"
    )
    yield f"deep page's plan: {result.deep_page_plan}"
    for name, scan in result.filter_plans:
        yield f"{name} first page's plan: {scan}"
    yield ""
    ratio = result.deep_page.p50_ms / result.first_page.p50_ms if result.first_page.p50_ms else 0.0
    yield goal_line(
        "payments: deep page p50 / first page p50",
        f"{ratio:.2f}x",
        f"at most {DEEP_PAGE_GOAL:g}x",
        ratio <= DEEP_PAGE_GOAL,
    )
    yield goal_line(
        "payments: deep page is an index scan",
        "yes" if "Index Scan" in result.deep_page_plan else "no",
        "yes",
        "Index Scan" in result.deep_page_plan,
    )
    growth_mib = result.export_rss_growth / 2**20
    yield goal_line(
        "payments: server RSS growth during export",
        f"{growth_mib:.1f} MiB",
        f"under {EXPORT_RSS_GOAL_MIB} MiB",
        growth_mib < EXPORT_RSS_GOAL_MIB,
    )
