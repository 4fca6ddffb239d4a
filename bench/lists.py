"""Lists: how long a session list's first page and a page past its end take when the application
holds a million sessions (written straight into the database, one INSERT ... SELECT
generate_series), one request at a time, so the figure is a request's own cost, not a queue's.

`totalItems` comes from the application's session counter (one primary-key read) and a page past
the end reads no session, so both must stay as quick as a page of a small list. Beside them, for
scale, what the `count(*)` that the counter replaced costs on the same rows.
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.floods import seed_sessions
from bench.measure import progress
from bench.payorch_target import bench_settings, running_payorch
from bench.shop import sandbox_link, signed_up_merchant
from payorch.storage.database import Connection, open_database

FIRST_PAGE = "/api/v1/applications/{application_id}/sessions?page=1&limit=20"  # the default page
PAST_THE_END = "/api/v1/applications/{application_id}/sessions?page=99999999999&limit=100"
REQUESTS = 200  # of each, after 20 unmeasured
COUNTS = 5  # of the plain count(*), for scale


@dataclass(frozen=True)
class Timing:
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class ListTimes:
    sessions: int
    first_page: Timing
    past_the_end: Timing
    plain_count: Timing  # `SELECT count(*)` of the application's sessions, straight on the database


def _timing(samples_s: list[float]) -> Timing:
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return Timing(p50_ms=statistics.median(ordered) * 1000, p99_ms=p99 * 1000)


async def _times(http: httpx.AsyncClient, path: str, headers: dict[str, str]) -> Timing:
    samples = []
    for number in range(20 + REQUESTS):
        started = time.perf_counter()
        response = await http.get(path, headers=headers)
        elapsed = time.perf_counter() - started
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:200]}")
        if number >= 20:
            samples.append(elapsed)
    return _timing(samples)


async def _plain_count(dsn: str, application_id: uuid.UUID) -> Timing:
    async def count(conn: Connection) -> int:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM checkout_sessions WHERE application_id = $1", application_id
            )
        )

    samples = []
    async with open_database(dsn, min_size=1, max_size=1) as db:
        for _ in range(COUNTS):
            started = time.perf_counter()
            await db.autocommit(count)
            samples.append(time.perf_counter() - started)
    return _timing(samples)


async def measure_lists(work_dir: Path, sessions: int) -> ListTimes:
    settings = bench_settings(work_dir)
    async with (
        running_payorch(settings, work_dir / "payorch.log") as payorch,
        signed_up_merchant(payorch) as merchant,
    ):
        application = await merchant.new_application("Bench lists", sandbox_link())
        progress(f"lists: writing {sessions} sessions of one application")
        await seed_sessions(payorch, application, sessions)
        headers = {"X-API-Key": application.api_key}
        async with httpx.AsyncClient(base_url=payorch.base_url, timeout=30) as http:
            progress("lists: the first page, then a page past the end, one request at a time")
            first = await _times(http, FIRST_PAGE.format(application_id=application.id), headers)
            past = await _times(http, PAST_THE_END.format(application_id=application.id), headers)
        progress("lists: a plain count(*) of the same sessions, for scale")
        plain = await _plain_count(payorch.service.db.dsn, uuid.UUID(application.id))
        progress("stopping payorch")
    return ListTimes(sessions=sessions, first_page=first, past_the_end=past, plain_count=plain)
