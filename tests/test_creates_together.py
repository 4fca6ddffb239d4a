"""Sandbox creates of several applications, handed to the database at the same moment, are stored by
one statement for them all (`storage.together`): and never at another's expense. A key seen
before, a session the database refuses, or the statement's caller cancelled fails nobody else's
create: each caller then stores its own alone."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import trio

from payorch.config import Settings
from payorch.runtime import Runtime
from payorch.storage.database import Connection, Database
from payorch.storage.together import Together
from tests.helpers import (
    SLEEPING_A_MINUTE,
    Client,
    Shop,
    create_session,
    eventually,
    new_shop,
    session_body,
)
from tests.test_create_in_one_unit import REFUSED, _rows, refusing_database

__all__ = ["refusing_database"]  # the fixture, used here by name


@pytest.fixture
def settings_of(runtime: Runtime) -> Settings:
    return runtime.services.context.settings


@pytest.fixture
async def shops(client: Client, db: Database, settings_of: Settings) -> list[Shop]:
    return [await new_shop(client, db, settings_of) for _ in range(3)]


@pytest.fixture
def together(db: Database, monkeypatch: pytest.MonkeyPatch) -> Together:
    """The database's meeting place, waiting as long as a test needs for a shared unit to end."""
    waiting_long = Together(wait_s=60)
    monkeypatch.setattr(db, "together", waiting_long)
    return waiting_long


async def _held_unit(conn: Connection, parts: Sequence[object]) -> None:
    raise AssertionError("never shared: no other caller runs this statement")


async def _hold(nursery: trio.Nursery, db: Database, together: Together) -> trio.Event:
    """A unit of its own under way in `together` until the event returned is set: the creates sent
    meanwhile wait for it, and meet."""
    holding, release = trio.Event(), trio.Event()

    async def held() -> None:
        holding.set()
        await release.wait()

    nursery.start_soon(lambda: together.run(db, _held_unit, None, 1, stored=None, alone=held))
    await holding.wait()
    return release


async def _create_together(
    db: Database, client: Client, together: Together, creates: Sequence[tuple[Shop, str, dict[str, Any]]]
) -> list[Any]:
    """The responses to `creates` (shop, key, body), sent at once and handed to the database at
    the same moment."""
    responses: list[Any] = [None] * len(creates)

    async def create(index: int, shop: Shop, key: str, body: dict[str, Any]) -> None:
        responses[index] = await create_session(client, shop, key, body)

    async with trio.open_nursery() as nursery:
        release = await _hold(nursery, db, together)
        for index, (shop, key, body) in enumerate(creates):
            nursery.start_soon(create, index, shop, key, body)

        async def all_waiting() -> bool:
            return together.waiting == len(creates)

        await eventually(all_waiting)
        release.set()
    return responses


async def _sessions_of(db: Database, shop: Shop) -> list[dict[str, Any]]:
    return await _rows(
        db,
        "SELECT id::text, order_reference FROM checkout_sessions WHERE application_id = $1::uuid",
        shop.application_id,
    )


async def test_creates_of_several_applications_at_the_same_moment_are_stored_by_one_statement(
    client: Client, db: Database, shops: list[Shop], together: Together
) -> None:
    creates = [(shop, f"together-{index}", session_body()) for index, shop in enumerate(shops)]
    responses = await _create_together(db, client, together, creates)
    assert [response.status_code for response in responses] == [201, 201, 201]
    assert (together.shared_units, together.shared_parts) == (1, 3)
    for shop, response in zip(shops, responses, strict=True):
        body = await response.get_json()
        assert await _sessions_of(db, shop) == [{"id": body["sessionId"], "order_reference": "order-1001"}]
        checkouts = await _rows(
            db, "SELECT id FROM sandbox_checkouts WHERE client_reference = $1", body["sessionId"]
        )
        assert len(checkouts) == 1
    for (shop, key, body), response in zip(creates, responses, strict=True):
        replayed = await create_session(client, shop, key, body)
        assert replayed.headers.get("Idempotent-Replayed") == "true"
        assert await replayed.get_json() == await response.get_json()


async def test_a_replay_among_creates_stored_together_is_answered_and_fails_none_of_the_others(
    client: Client, db: Database, shops: list[Shop], together: Together
) -> None:
    first, second, third = shops
    original = await create_session(client, first, "seen-before")
    assert original.status_code == 201
    creates = [
        (first, "seen-before", session_body()),
        (second, "fresh-2", session_body()),
        (third, "fresh-3", session_body()),
    ]
    replayed, created_2, created_3 = await _create_together(db, client, together, creates)
    assert together.shared_units == 0  # the statement met the key seen before, and stored nothing
    assert replayed.status_code == 201
    assert replayed.headers.get("Idempotent-Replayed") == "true"
    assert await replayed.get_json() == await original.get_json()
    assert (created_2.status_code, created_3.status_code) == (201, 201)
    assert [len(await _sessions_of(db, shop)) for shop in shops] == [1, 1, 1]


async def test_a_session_the_database_refuses_among_creates_stored_together_fails_only_its_own(
    client: Client, db: Database, shops: list[Shop], together: Together, refusing_database: None
) -> None:
    creates = [
        (shops[0], "refused", session_body(orderReference=REFUSED)),
        (shops[1], "accepted-1", session_body(orderReference="order-1")),
        (shops[2], "accepted-2", session_body(orderReference="order-2")),
    ]
    responses = await _create_together(db, client, together, creates)
    assert [response.status_code for response in responses] == [500, 201, 201]
    keys = await _rows(db, "SELECT key FROM idempotency_keys ORDER BY key")
    assert keys == [{"key": "accepted-1"}, {"key": "accepted-2"}]
    assert await _sessions_of(db, shops[0]) == []
    assert [row["order_reference"] for row in await _sessions_of(db, shops[1])] == ["order-1"]
    assert [row["order_reference"] for row in await _sessions_of(db, shops[2])] == ["order-2"]


@pytest.fixture
async def marks(db: Database) -> AsyncIterator[None]:
    async def create(conn: Connection) -> None:
        await conn.execute("CREATE TABLE together_marks (caller text NOT NULL, how text NOT NULL)")

    async def drop(conn: Connection) -> None:
        await conn.execute("DROP TABLE IF EXISTS together_marks")

    await db.autocommit(create)
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            await db.autocommit(drop)


async def _mark_then_sleep(conn: Connection, callers: Sequence[str]) -> None:
    await conn.execute(
        """INSERT INTO together_marks
           SELECT caller, 'shared' FROM unnest($1::text[]) AS caller, (SELECT pg_sleep(60)) AS slept""",
        list(callers),
    )


async def test_a_shared_statement_whose_caller_is_cancelled_leaves_nothing_and_the_others_store_alone(
    db: Database, together: Together, marks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    scopes: dict[trio.lowlevel.Task, trio.CancelScope] = {}
    leaders: list[trio.lowlevel.Task] = []
    results: dict[str, str] = {}
    hand = db.autocommit

    async def watched(unit: Any, *args: Any, **kwargs: Any) -> Any:
        if unit is _mark_then_sleep:
            leaders.append(trio.lowlevel.current_task())
        return await hand(unit, *args, **kwargs)

    monkeypatch.setattr(db, "autocommit", watched)

    async def call(caller: str) -> None:
        async def alone_unit(conn: Connection) -> None:
            await conn.execute("INSERT INTO together_marks VALUES ($1, 'alone')", caller)

        async def alone() -> str:
            await hand(alone_unit)
            return "alone"

        with trio.CancelScope() as scope:
            scopes[trio.lowlevel.current_task()] = scope
            results[caller] = await together.run(
                db, _mark_then_sleep, caller, 1, stored="shared", alone=alone
            )

    async with trio.open_nursery() as nursery:
        release = await _hold(nursery, db, together)
        for caller in ("a", "b", "c"):
            nursery.start_soon(call, caller)

        async def all_waiting() -> bool:
            return together.waiting == 3

        await eventually(all_waiting)
        release.set()

        async def sleeping() -> bool:
            return bool(leaders) and bool(await _rows(db, SLEEPING_A_MINUTE))

        await eventually(sleeping)
        scopes[leaders[0]].cancel()

    assert len(results) == 2 and set(results.values()) == {"alone"}
    marked = await _rows(db, "SELECT caller, how FROM together_marks ORDER BY caller")
    assert marked == [{"caller": caller, "how": "alone"} for caller in sorted(results)]

    async def released() -> bool:
        return not await _rows(db, SLEEPING_A_MINUTE)

    await eventually(released)
