"""A session whose checkout is made in payorch's own database (the sandbox's) is created in one unit
of work on the database's thread: its Idempotency-Key claimed, its checkout and session stored and
its key's answer kept, in one transaction (`engine.payments.checkout`). A unit the database refuses
leaves nothing behind: no key claimed without its session, no session or checkout without its key."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

from payorch.config import Settings
from payorch.runtime import Runtime
from payorch.storage.database import Connection, Database
from tests.clock import ShiftedClock
from tests.helpers import Client, Shop, create_session, new_shop, session_body

REFUSED = "refused-by-the-database"


@pytest.fixture
async def shop(client: Client, db: Database, runtime: Runtime) -> Shop:
    return await new_shop(client, db, runtime.services.context.settings)


class UnitsOfRequests:
    """The units of work handed to the database's thread by the test's own task (its requests, which
    the test client serves in it) and by the application actors' tasks, by the name of the unit:
    the background loops' units, which come and go on their own, are left out."""

    def __init__(self, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
        self.units: list[str] = []
        test_task = trio.lowlevel.current_task()
        for method in ("transaction", "autocommit", "snapshot"):
            monkeypatch.setattr(db, method, self._counting(getattr(db, method), test_task))

    def _counting(self, hand: Callable[..., Any], test_task: trio.lowlevel.Task) -> Callable[..., Any]:
        async def counted(unit: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            task = trio.lowlevel.current_task()
            if task is test_task or "ApplicationActor" in task.name:
                self.units.append(unit.__qualname__)
            return await hand(unit, *args, **kwargs)

        return counted


async def _rows(db: Database, sql: str, *args: object) -> list[dict[str, Any]]:
    async def read(conn: Connection) -> list[dict[str, Any]]:
        return [dict(row) for row in await conn.fetch(sql, *args)]

    return await db.autocommit(read)


async def _metric(client: Client, name: str) -> float:
    exposition = await (await client.get("/metrics")).get_data(as_text=True)
    for line in exposition.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"/metrics has no {name}")


@pytest.fixture
async def refusing_database(db: Database) -> AsyncIterator[None]:
    """The database refuses to store a session whose order reference is `REFUSED` (a trigger that
    raises), until the test drops the trigger or ends."""

    async def install(conn: Connection) -> None:
        await conn.execute(
            f"""CREATE FUNCTION refuse_session() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.order_reference = '{REFUSED}' THEN
                        RAISE EXCEPTION 'this session is refused';
                    END IF;
                    RETURN NEW;
                END $$;
                CREATE TRIGGER refuse_session BEFORE INSERT ON checkout_sessions
                FOR EACH ROW EXECUTE FUNCTION refuse_session()"""
        )

    await db.autocommit(install)
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            await db.autocommit(_accept_sessions)


async def _accept_sessions(conn: Connection) -> None:
    await conn.execute("DROP TRIGGER IF EXISTS refuse_session ON checkout_sessions")
    await conn.execute("DROP FUNCTION IF EXISTS refuse_session()")


async def test_a_sandbox_create_hands_the_database_thread_one_unit_of_work(
    client: Client, db: Database, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The application's routing inputs are read by its first create, and held after it.
    assert (await create_session(client, shop, "first")).status_code == 201
    counted = UnitsOfRequests(db, monkeypatch)
    response = await create_session(client, shop, "second")
    assert response.status_code == 201
    assert len(counted.units) == 1, counted.units
    body = await response.get_json()
    stored = await _rows(
        db, "SELECT provider_name FROM checkout_sessions WHERE id = $1::uuid", body["sessionId"]
    )
    assert stored == [{"provider_name": "sandbox"}]
    checkouts = await _rows(
        db, "SELECT id FROM sandbox_checkouts WHERE client_reference = $1", body["sessionId"]
    )
    assert len(checkouts) == 1


async def test_the_database_units_metric_counts_a_sandbox_create_as_one_unit_at_least(
    client: Client, shop: Shop
) -> None:
    assert (await create_session(client, shop, "first")).status_code == 201
    before = await _metric(client, "payorch_database_units_total")
    assert (await create_session(client, shop, "second")).status_code == 201
    assert await _metric(client, "payorch_database_units_total") >= before + 1


async def test_a_replayed_sandbox_create_hands_the_database_thread_one_unit_and_the_first_answer(
    client: Client, db: Database, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await create_session(client, shop, "again")
    assert first.status_code == 201
    counted = UnitsOfRequests(db, monkeypatch)
    replayed = await create_session(client, shop, "again")
    assert replayed.status_code == 201
    assert replayed.headers.get("Idempotent-Replayed") == "true"
    assert await replayed.get_json() == await first.get_json()
    assert len(counted.units) == 1, counted.units
    sessions = await _rows(
        db, "SELECT id FROM checkout_sessions WHERE application_id = $1::uuid", shop.application_id
    )
    assert len(sessions) == 1


async def test_the_same_key_with_another_body_is_still_refused_after_a_one_unit_create(
    client: Client, shop: Shop
) -> None:
    assert (await create_session(client, shop, "mismatch")).status_code == 201
    other = await create_session(client, shop, "mismatch", session_body(total="7.00"))
    assert other.status_code == 422
    assert (await other.get_json())["code"] == "IDEMPOTENCY_KEY_MISMATCH"


async def test_a_create_whose_session_the_database_refuses_leaves_neither_its_key_nor_its_session(
    client: Client, db: Database, shop: Shop, refusing_database: None
) -> None:
    body = session_body(orderReference=REFUSED)
    refused = await create_session(client, shop, "refused", body)
    assert refused.status_code == 500, await refused.get_data(as_text=True)
    assert await _rows(db, "SELECT key FROM idempotency_keys WHERE key = 'refused'") == []
    assert await _rows(db, "SELECT id FROM checkout_sessions WHERE order_reference = $1", REFUSED) == []
    assert await _rows(db, "SELECT id FROM sandbox_checkouts WHERE order_reference = $1", REFUSED) == []


async def test_the_retry_of_a_create_the_database_refused_creates_the_session_once(
    client: Client, db: Database, shop: Shop, refusing_database: None
) -> None:
    body = session_body(orderReference=REFUSED)
    assert (await create_session(client, shop, "retried", body)).status_code == 500
    await db.autocommit(_accept_sessions)
    retried = await create_session(client, shop, "retried", body)
    assert retried.status_code == 201, await retried.get_data(as_text=True)
    session_id = (await retried.get_json())["sessionId"]
    sessions = await _rows(db, "SELECT id::text FROM checkout_sessions WHERE order_reference = $1", REFUSED)
    assert sessions == [{"id": session_id}]
    assert len(await _rows(db, "SELECT id FROM sandbox_checkouts WHERE order_reference = $1", REFUSED)) == 1
    again = await create_session(client, shop, "retried", body)
    assert again.status_code == 201
    assert (await again.get_json())["sessionId"] == session_id


async def test_a_session_the_database_refuses_fails_only_its_own_create_among_those_sent_together(
    client: Client, db: Database, shop: Shop, refusing_database: None
) -> None:
    statuses: dict[str, int] = {}

    async def create(key: str, order_reference: str) -> None:
        response = await create_session(client, shop, key, session_body(orderReference=order_reference))
        statuses[key] = response.status_code

    async with trio.open_nursery() as nursery:
        nursery.start_soon(create, "accepted-1", "order-1")
        nursery.start_soon(create, "refused", REFUSED)
        nursery.start_soon(create, "accepted-2", "order-2")
    assert statuses == {"accepted-1": 201, "refused": 500, "accepted-2": 201}
    keys = await _rows(db, "SELECT key FROM idempotency_keys ORDER BY key")
    assert keys == [{"key": "accepted-1"}, {"key": "accepted-2"}]
    stored = await _rows(db, "SELECT order_reference FROM checkout_sessions ORDER BY order_reference")
    assert stored == [{"order_reference": "order-1"}, {"order_reference": "order-2"}]


async def test_a_key_past_its_retention_creates_a_new_session_in_one_unit(
    client: Client,
    db: Database,
    shop: Shop,
    settings: Settings,
    clock: ShiftedClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = await create_session(client, shop, "kept")
    assert first.status_code == 201
    clock.advance(settings.idempotency.retention_s + 1)
    counted = UnitsOfRequests(db, monkeypatch)
    again = await create_session(client, shop, "kept", session_body(total="7.00"))
    assert again.status_code == 201, await again.get_data(as_text=True)
    assert "Idempotent-Replayed" not in again.headers
    assert (await again.get_json())["sessionId"] != (await first.get_json())["sessionId"]
    assert len(counted.units) == 1, counted.units
    replayed = await create_session(client, shop, "kept", session_body(total="7.00"))
    assert await replayed.get_json() == await again.get_json()
