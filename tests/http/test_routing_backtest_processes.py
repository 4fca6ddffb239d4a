"""Routing backtests decided in worker processes (`engine.routing.backtest_processes`), away from the
server's interpreter, and their turns there: one per merchant running or waiting, served in the
order they came, a worker that dies answered 503 and replaced, none left once the service stops.
(What a backtest answers: tests/http/test_routing_backtest.py.)"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psutil
import pytest
import trio

from payorch.config import Settings
from payorch.engine.routing.backtest_processes import (
    LOST_RETRY_AFTER_S,
    BacktestDatabaseUnavailable,
    BacktestFailed,
    BacktestProcesses,
)
from payorch.engine.routing.backtest_worker import APPLICATION_NAME, Limits, Run
from payorch.engine.routing.document import parse_routing_document
from payorch.engine.routing.success_rates import RoutingSettings
from payorch.http.request_limits import BACKTEST_RETRY_AFTER_S, BACKTESTS_AT_ONCE
from payorch.runtime import Runtime, open_runtime
from payorch.storage.backend_priority import BACKEND_NICENESS
from payorch.storage.database import Connection, Database
from tests.clock import ShiftedClock
from tests.helpers import Client, Shop, create_session, eventually, new_shop, post_json


def _path(shop: Shop) -> str:
    return f"/api/v1/applications/{shop.application_id}/routing/backtest"


async def _backtest(client: Client, shop: Shop) -> Any:
    return await post_json(client, _path(shop), {"routing": {}}, shop.merchant.headers)


def worker_pids(backtests: BacktestProcesses) -> list[int]:
    """The process ids of the worker processes alive now."""
    return sorted(backtests._alive)


def busy_worker_pids(backtests: BacktestProcesses) -> list[int]:
    """The process ids of the worker processes a backtest holds now."""
    return sorted(backtests._busy)


@pytest.fixture
def backtests(runtime: Runtime) -> BacktestProcesses:
    return runtime.services.backtests


@asynccontextmanager
async def every_turn_taken(backtests: BacktestProcesses) -> AsyncIterator[None]:
    """Every worker process's turn held for the block, as backtests running there hold them."""
    holders = [object() for _ in range(int(backtests.turns.total_tokens))]
    for holder in holders:
        await backtests.turns.acquire_on_behalf_of(holder)
    try:
        yield
    finally:
        for holder in holders:
            backtests.turns.release_on_behalf_of(holder)


async def _waiting(backtests: BacktestProcesses, count: int) -> None:
    """Return once `count` backtests wait for their turn."""

    async def check() -> bool:
        return backtests.turns.statistics().tasks_waiting == count

    await eventually(check)


async def test_a_backtest_is_decided_in_a_worker_process_of_lower_priority(
    client: Client, db: Database, settings: Settings, backtests: BacktestProcesses
) -> None:
    shop = await new_shop(client, db, settings)
    assert (await create_session(client, shop, "one")).status_code == 201
    assert worker_pids(backtests) == []  # started at the first backtest, not before
    response = await _backtest(client, shop)
    assert response.status_code == 200
    assert (await response.get_json())["sessions"] == 1
    (pid,) = worker_pids(backtests)
    assert pid != os.getpid()
    assert psutil.Process(pid).ppid() == os.getpid()
    assert os.getpriority(os.PRIO_PROCESS, pid) > os.getpriority(os.PRIO_PROCESS, 0)
    assert os.sched_getscheduler(pid) == os.SCHED_IDLE  # a core only when no one else wants it
    assert (await _backtest(client, shop)).status_code == 200
    assert worker_pids(backtests) == [pid]  # kept for the next backtest


async def test_a_backtest_reads_the_sessions_in_its_worker_process_over_a_connection_of_its_own(
    client: Client, db: Database, settings: Settings, backtests: BacktestProcesses
) -> None:
    shop = await new_shop(client, db, settings)
    assert (await create_session(client, shop, "one")).status_code == 201
    response = await _backtest(client, shop)
    assert response.status_code == 200
    assert (await response.get_json())["sessions"] == 1
    (pid,) = worker_pids(backtests)

    async def readers(conn: Connection) -> list[Any]:
        return await conn.fetch(
            "SELECT state FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
            APPLICATION_NAME,
        )

    (reader,) = await db.autocommit(readers)  # the worker's connection, kept for the next backtest
    assert reader["state"] == "idle"  # its read-only transaction ended with the backtest
    assert psutil.Process(pid).net_connections(kind="all")  # held by the worker process


async def test_the_backend_reading_a_backtests_sessions_runs_at_the_least_priority(
    client: Client, db: Database, settings: Settings, backtests: BacktestProcesses
) -> None:
    shop = await new_shop(client, db, settings)
    assert (await create_session(client, shop, "one")).status_code == 201
    assert (await _backtest(client, shop)).status_code == 200

    async def reader_pid(conn: Connection) -> int:
        pid: int = await conn.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
            APPLICATION_NAME,
        )
        return pid

    # The embedded PostgreSQL runs here as this user: its backend for the worker is lowered.
    assert os.getpriority(os.PRIO_PROCESS, await db.autocommit(reader_pid)) == BACKEND_NICENESS


async def test_a_second_backtest_of_a_merchant_waiting_its_turn_is_429(
    client: Client, db: Database, settings: Settings, backtests: BacktestProcesses
) -> None:
    shop = await new_shop(client, db, settings)
    answers: list[int] = []

    async def first() -> None:
        answers.append((await _backtest(client, shop)).status_code)

    async with trio.open_nursery() as nursery, every_turn_taken(backtests):
        nursery.start_soon(first)
        await _waiting(backtests, 1)
        second = await _backtest(client, shop)
        assert second.status_code == 429
        assert second.headers["Retry-After"] == str(BACKTEST_RETRY_AFTER_S)
    assert answers == [200]


async def test_a_third_merchants_backtest_waits_its_turn_behind_two_others_and_succeeds(
    client: Client, db: Database, settings: Settings, backtests: BacktestProcesses
) -> None:
    shops = [await new_shop(client, db, settings) for _ in range(3)]
    answers: dict[int, int] = {}

    async def backtest(number: int) -> None:
        answers[number] = (await _backtest(client, shops[number])).status_code

    async with trio.open_nursery() as nursery, every_turn_taken(backtests):
        for number in range(3):  # two merchants waiting, then a third: it waits too, never 503
            nursery.start_soon(backtest, number)
            await _waiting(backtests, number + 1)
        assert answers == {}
    assert answers == {0: 200, 1: 200, 2: 200}


async def test_backtests_beyond_the_process_queue_are_503_with_retry_after(
    client: Client, db: Database, settings: Settings, backtests: BacktestProcesses
) -> None:
    shops = [await new_shop(client, db, settings) for _ in range(BACKTESTS_AT_ONCE + 1)]
    answers: list[int] = []

    async def backtest(shop: Shop) -> None:
        answers.append((await _backtest(client, shop)).status_code)

    async with trio.open_nursery() as nursery, every_turn_taken(backtests):
        for number, shop in enumerate(shops[:-1]):
            nursery.start_soon(backtest, shop)
            await _waiting(backtests, number + 1)
        refused = await _backtest(client, shops[-1])
        assert refused.status_code == 503
        assert (await refused.get_json())["retryAfter"] == BACKTEST_RETRY_AFTER_S
    assert answers == [200] * BACKTESTS_AT_ONCE


async def test_turns_are_given_in_the_order_they_were_asked_for(backtests: BacktestProcesses) -> None:
    served: list[int] = []

    async def ask(number: int) -> None:
        async with backtests.worker():
            served.append(number)

    async with trio.open_nursery() as nursery, every_turn_taken(backtests):
        for number in range(3):
            nursery.start_soon(ask, number)
            await _waiting(backtests, number + 1)
    assert served == [0, 1, 2]


async def test_a_worker_killed_during_a_backtest_answers_503_and_the_next_backtest_succeeds(
    client: Client, db: Database, settings: Settings, backtests: BacktestProcesses
) -> None:
    shop = await new_shop(client, db, settings)
    assert (await _backtest(client, shop)).status_code == 200
    (pid,) = worker_pids(backtests)
    os.kill(pid, signal.SIGSTOP)  # so the next backtest is still in it when it is killed
    answers: list[Any] = []

    async def backtest() -> None:
        answers.append(await _backtest(client, shop))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(backtest)

        async def held() -> bool:
            return busy_worker_pids(backtests) == [pid]

        await eventually(held)
        os.kill(pid, signal.SIGKILL)
    (lost,) = answers
    assert lost.status_code == 503
    assert lost.headers["Retry-After"] == str(LOST_RETRY_AFTER_S)
    assert (await _backtest(client, shop)).status_code == 200
    (replacement,) = worker_pids(backtests)
    assert replacement != pid


async def test_a_worker_killed_while_idle_is_replaced_at_the_next_backtest(
    client: Client, db: Database, settings: Settings, backtests: BacktestProcesses
) -> None:
    shop = await new_shop(client, db, settings)
    assert (await _backtest(client, shop)).status_code == 200
    (pid,) = worker_pids(backtests)
    os.kill(pid, signal.SIGKILL)

    async def gone() -> bool:
        return pid not in worker_pids(backtests)

    await eventually(gone)
    assert (await _backtest(client, shop)).status_code == 200
    assert len(worker_pids(backtests)) == 1


async def test_the_worker_processes_end_with_the_service(
    settings: Settings, db: Database, clock: ShiftedClock
) -> None:
    async with open_runtime(settings, db, clock) as running:
        client = running.app.test_client()
        shop = await new_shop(client, db, settings)
        assert (await _backtest(client, shop)).status_code == 200
        pids = worker_pids(running.services.backtests)
        assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # ended and reaped: no such process any more


async def test_a_backtest_whose_request_is_cancelled_ends_its_worker_process(
    client: Client, db: Database, settings: Settings, backtests: BacktestProcesses
) -> None:
    shop = await new_shop(client, db, settings)
    assert (await _backtest(client, shop)).status_code == 200
    (pid,) = worker_pids(backtests)
    os.kill(pid, signal.SIGSTOP)  # it would finish at once otherwise
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_backtest, client, shop)

        async def held() -> bool:
            return busy_worker_pids(backtests) == [pid]

        await eventually(held)
        nursery.cancel_scope.cancel()  # as when its client goes away, or the service stops

    async def gone() -> bool:
        return worker_pids(backtests) == []

    await eventually(gone)
    assert (await _backtest(client, shop)).status_code == 200


async def test_a_worker_that_fails_a_message_is_an_error_and_is_not_used_again(
    backtests: BacktestProcesses,
) -> None:
    with pytest.raises(BacktestFailed, match="unexpected message Limits"):
        async with backtests.worker() as worker:
            await worker.ask(Limits({}))  # not asked for: a fault of the server's, not a 503

    async def gone() -> bool:
        return worker.pid not in worker_pids(backtests)

    await eventually(gone)


async def test_a_worker_that_cannot_reach_the_database_answers_503_and_is_not_used_again(
    backtests: BacktestProcesses, clock: ShiftedClock
) -> None:
    now = clock.now()
    run = Run(
        dsn="postgresql://payorch@127.0.0.1:1/payorch",  # nothing listens there
        application_id=uuid.uuid4(),
        since=now,
        until=now,
        limit=10,
        document=parse_routing_document({}, frozenset({"sandbox"})),
        in_force=parse_routing_document({}, frozenset({"sandbox"})),
        configs=(),
        segments=(),
        settings=RoutingSettings(),
    )
    with pytest.raises(BacktestDatabaseUnavailable) as raised:
        async with backtests.worker() as worker:
            await worker.backtest(run, lambda kinds: {})
    assert raised.value.retry_after == LOST_RETRY_AFTER_S

    async def gone() -> bool:
        return worker.pid not in worker_pids(backtests)

    await eventually(gone)
