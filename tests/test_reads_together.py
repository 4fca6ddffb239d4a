"""Sessions read by id at the same moment, by several merchants' requests, are read by one statement
for them all (`Together.read`): and each caller still gets exactly its own session's record, checked
against its own access. A shared read that fails in any way (its leader cancelled too) fails nobody:
each caller then reads alone; a read alone meets its own failure."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from decimal import Decimal
from functools import partial
from typing import Any

import pytest
import trio

from payorch.config import Settings
from payorch.engine.payments.reads import session_with_record, sessions_with_records
from payorch.http.operations import sessions as session_operations
from payorch.jsonexact import loads_exact
from payorch.runtime import Runtime
from payorch.storage.database import Connection, Database
from payorch.storage.together import Together
from tests.helpers import SLEEPING_A_MINUTE, Client, Shop, create_session, eventually, new_shop
from tests.http.test_refunds import paid_session, record_when, refund
from tests.test_creates_together import _hold


class SharedReadFailed(Exception):
    pass


@pytest.fixture
async def shops(client: Client, db: Database, runtime: Runtime) -> list[Shop]:
    settings: Settings = runtime.services.context.settings
    return [await new_shop(client, db, settings) for _ in range(3)]


@pytest.fixture
async def session_ids(client: Client, shops: list[Shop]) -> list[str]:
    """A session of each shop: the first's paid and refunded twice (refunds completed), the second's
    paid, the third's pending (created, not paid)."""
    first, second, third = shops
    refunded = await paid_session(client, first)
    for key, amount in (("r1", "30.00"), ("r2", "20.00")):
        assert (await refund(client, first, refunded, key, amount=Decimal(amount))).status_code == 201
    await record_when(
        client,
        first,
        refunded,
        lambda record: [item["status"] for item in record["refunds"]] == ["COMPLETED", "COMPLETED"],
    )
    paid = await paid_session(client, second)
    created = await (await create_session(client, third, "open")).get_json()
    return [refunded, paid, created["sessionId"]]


@pytest.fixture
def together(db: Database, monkeypatch: pytest.MonkeyPatch) -> Together:
    """The database's meeting place for reads, waiting as long as a test needs for a shared unit to
    end."""
    waiting_long = Together(wait_s=60)
    monkeypatch.setattr(db, "reads_together", waiting_long)
    return waiting_long


async def _read(client: Client, shop: Shop, session_id: str) -> Any:
    return await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)


async def _body(response: Any) -> Any:
    return loads_exact(await response.get_data())


async def _meet(db: Database, together: Together, calls: Sequence[Any]) -> list[Any]:
    """What each of `calls` (each awaited with no argument) answers, all handed to `together` while
    a unit of its own is under way there: they wait for it, and meet when it ends."""
    answers: list[Any] = [None] * len(calls)

    async def call(index: int) -> None:
        answers[index] = await calls[index]()

    async with trio.open_nursery() as nursery:
        release = await _hold(nursery, db, together)
        for index in range(len(calls)):
            nursery.start_soon(call, index)

        async def all_waiting() -> bool:
            return together.waiting == len(calls)

        await eventually(all_waiting)
        release.set()
    return answers


async def _read_together(
    client: Client, db: Database, together: Together, reads_of: Sequence[tuple[Shop, str]]
) -> list[Any]:
    """The responses to `GET /api/v1/sessions/{id}` of each (shop, session id), sent at once."""
    return await _meet(
        db, together, [partial(_read, client, shop, session_id) for shop, session_id in reads_of]
    )


async def test_reads_of_several_merchants_sessions_at_the_same_moment_are_answered_by_one_statement(
    client: Client, db: Database, shops: list[Shop], session_ids: list[str], together: Together
) -> None:
    alone = [
        await _body(await _read(client, shop, id_)) for shop, id_ in zip(shops, session_ids, strict=True)
    ]
    assert [record["status"] for record in alone] == ["PARTIALLY_REFUNDED", "SUCCEEDED", "PENDING"]
    assert len(alone[0]["refunds"]) == 2
    before = (together.shared_units, together.shared_parts)
    responses = await _read_together(client, db, together, list(zip(shops, session_ids, strict=True)))
    assert [response.status_code for response in responses] == [200, 200, 200]
    assert (together.shared_units - before[0], together.shared_parts - before[1]) == (1, 3)
    assert [await _body(response) for response in responses] == alone


async def test_a_read_of_another_merchants_session_or_of_none_is_404_for_its_caller_only(
    client: Client, db: Database, shops: list[Shop], session_ids: list[str], together: Together
) -> None:
    first, second, third = shops
    theirs = await _body(await _read(client, second, session_ids[1]))
    own = await _body(await _read(client, third, session_ids[2]))
    reads_of = [
        (second, session_ids[0]),  # the first shop's session
        (second, session_ids[1]),
        (first, str(uuid.uuid4())),  # nobody's
        (third, session_ids[2]),
    ]
    responses = await _read_together(client, db, together, reads_of)
    assert [response.status_code for response in responses] == [404, 200, 404, 200]
    assert (together.shared_units, together.shared_parts) == (1, 4)
    for refused in (responses[0], responses[2]):
        assert (await refused.get_json())["message"] == "session not found"
    assert await _body(responses[1]) == theirs
    assert await _body(responses[3]) == own


async def test_reads_whose_shared_statement_fails_are_each_answered_alone(
    client: Client,
    db: Database,
    shops: list[Shop],
    session_ids: list[str],
    together: Together,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alone = [
        await _body(await _read(client, shop, id_)) for shop, id_ in zip(shops, session_ids, strict=True)
    ]
    groups: list[int] = []

    async def failing_when_shared(conn: Connection, ids: Sequence[uuid.UUID]) -> Any:
        groups.append(len(ids))
        if len(ids) > 1:
            raise SharedReadFailed
        return await sessions_with_records(conn, ids)

    monkeypatch.setattr(session_operations, "sessions_with_records", failing_when_shared)
    responses = await _read_together(client, db, together, list(zip(shops, session_ids, strict=True)))
    assert groups == [3]
    assert (together.shared_units, together.shared_parts) == (0, 0)
    assert [response.status_code for response in responses] == [200, 200, 200]
    assert [await _body(response) for response in responses] == alone


async def _sleeping(db: Database) -> bool:
    async def sleepers(conn: Connection) -> int:
        return len(await conn.fetch(SLEEPING_A_MINUTE))

    return bool(await db.autocommit(sleepers))


async def test_reads_whose_shared_statement_is_cancelled_with_its_leader_are_each_read_alone(
    db: Database, session_ids: list[str], together: Together, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [uuid.UUID(id_) for id_ in session_ids]
    alone = [await db.autocommit(session_with_record, id_) for id_ in ids]
    scopes: dict[trio.lowlevel.Task, trio.CancelScope] = {}
    leaders: list[trio.lowlevel.Task] = []
    answers: dict[uuid.UUID, Any] = {}
    hand = db.autocommit

    async def sleep_then_read(conn: Connection, wanted: Sequence[uuid.UUID]) -> Any:
        await conn.execute("SELECT pg_sleep(60)")
        return await sessions_with_records(conn, wanted)

    async def watched(unit: Any, *args: Any, **kwargs: Any) -> Any:
        if unit is sleep_then_read:
            leaders.append(trio.lowlevel.current_task())
        return await hand(unit, *args, **kwargs)

    monkeypatch.setattr(db, "autocommit", watched)

    async def call(wanted: uuid.UUID) -> None:
        with trio.CancelScope() as scope:
            scopes[trio.lowlevel.current_task()] = scope
            answers[wanted] = await together.read(
                db, sleep_then_read, wanted, alone=partial(hand, session_with_record, wanted)
            )

    async with trio.open_nursery() as nursery:
        release = await _hold(nursery, db, together)
        for wanted in ids:
            nursery.start_soon(call, wanted)

        async def all_waiting() -> bool:
            return together.waiting == len(ids)

        await eventually(all_waiting)
        release.set()

        async def sleeping() -> bool:
            return bool(leaders) and await _sleeping(db)

        await eventually(sleeping)
        scopes[leaders[0]].cancel()

    assert len(leaders) == 1 and len(answers) == 2
    assert together.shared_units == 0
    for wanted, answer in answers.items():
        assert answer == alone[ids.index(wanted)]

    async def released() -> bool:
        return not await _sleeping(db)

    await eventually(released)


async def test_the_same_session_read_by_several_callers_at_once_gives_each_an_equal_record_of_its_own(
    db: Database, session_ids: list[str], together: Together
) -> None:
    wanted = uuid.UUID(session_ids[0])
    alone = await db.autocommit(session_with_record, wanted)
    assert alone is not None
    answers = await _meet(
        db,
        together,
        [
            partial(
                together.read,
                db,
                sessions_with_records,
                wanted,
                alone=partial(db.autocommit, session_with_record, wanted),
            )
            for _ in range(3)
        ],
    )
    assert (together.shared_units, together.shared_parts) == (1, 3)
    assert answers == [alone, alone, alone]
    records = [record for _, record in answers]
    assert len({id(record) for record in records}) == 3
    assert len({id(record["refunds"]) for record in records}) == 3
    assert len({id(record["attempts"]) for record in records}) == 3
    assert alone[1]["attempts"]  # paid: one attempt at least
    records[0]["attempts"].clear()  # one caller's change is its own
    assert answers[1] == answers[2] == alone


async def test_a_read_alone_whose_statement_raises_gives_its_caller_that_exception(db: Database) -> None:
    failure = SharedReadFailed("the read's own statement")
    read_alone: list[bool] = []

    async def raising(conn: Connection, ids: Sequence[uuid.UUID]) -> Any:
        raise failure

    async def alone() -> Any:
        read_alone.append(True)
        return None

    with pytest.raises(SharedReadFailed) as raised:
        await Together(wait_s=60).read(db, raising, uuid.uuid4(), alone=alone)
    assert raised.value is failure
    assert read_alone == []


async def test_a_read_that_waits_longer_than_its_wait_for_a_shared_unit_under_way_reads_alone(
    db: Database,
) -> None:
    impatient = Together(wait_s=0)
    shared_calls: list[int] = []

    async def shared(conn: Connection, ids: Sequence[uuid.UUID]) -> Any:
        shared_calls.append(len(ids))
        return [None for _ in ids]

    async def alone() -> str:
        return "read alone"

    async with trio.open_nursery() as nursery:
        release = await _hold(nursery, db, impatient)
        answer = await impatient.read(db, shared, uuid.uuid4(), alone=alone)
        release.set()
    assert answer == "read alone"
    assert shared_calls == []
    assert impatient.waiting == 0
