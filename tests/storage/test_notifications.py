"""LISTEN on the node's connection, on the database's loop thread: a notification reaches Trio, a
burst too large for the buffer becomes one MISSED, and a connection that is cut is opened again,
listening again, the reader told that notifications were missed meanwhile."""

from __future__ import annotations

from functools import partial

import trio

from payorch.storage.database import Connection, Database
from payorch.storage.nodes import NodeIdentity, hold_node_identity
from payorch.storage.notifications import MISSED, Missed, Notifications
from tests.helpers import eventually

CHANNEL = "payorch_test_channel"


async def _notify(conn: Connection, payload: str) -> None:
    await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)


async def _listening_backends(conn: Connection) -> list[int]:
    rows = await conn.fetch(
        """SELECT pid FROM pg_stat_activity
           WHERE application_name = $1 AND datname = current_database()""",
        "payorch node",
    )
    return [row["pid"] for row in rows]


async def _terminate(conn: Connection, pid: int) -> None:
    # Waits (up to 10 s) until the backend is gone, so the connection is closed when this returns.
    assert await conn.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)


def _listening(notes: Notifications) -> partial[object]:
    return partial(hold_node_identity, channels={CHANNEL: notes})


async def test_a_notification_reaches_trio_through_the_loop_threads_listener(db: Database) -> None:
    notes = Notifications(buffer=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(_listening(notes), db, NodeIdentity())
        assert notes.listening
        assert await anext(notes) is MISSED  # whatever was notified before it listened
        await db.autocommit(_notify, "hello")
        await db.autocommit(_notify, "again")
        assert [await anext(notes), await anext(notes)] == ["hello", "again"]
        nursery.cancel_scope.cancel()


async def test_notifications_beyond_the_buffer_are_dropped_for_one_missed() -> None:
    notes = Notifications(buffer=2)
    notes.resumed()
    assert await anext(notes) is MISSED
    for payload in ("a", "b", "c", "d"):
        notes.heard(payload)
    # "c" found the buffer full: "a" and "b" made way for MISSED, which covers "d" too.
    assert await anext(notes) is MISSED
    notes.heard("e")
    assert await anext(notes) == "e"


async def test_a_cut_listening_connection_is_opened_again_and_the_reader_told_what_was_missed(
    db: Database,
) -> None:
    notes = Notifications(buffer=10)
    identity = NodeIdentity()
    async with trio.open_nursery() as nursery:
        await nursery.start(_listening(notes), db, identity)
        assert await anext(notes) is MISSED
        (first,) = await db.autocommit(_listening_backends)
        held = identity.id
        await db.autocommit(_terminate, first)

        # Told as soon as it is lost (listening False), and again once it listens anew (True).
        heard: list[str | Missed] = []
        while not (heard[-1:] == [MISSED] and notes.listening):
            heard.append(await anext(notes))
        assert set(heard) == {MISSED}

        async def listening_again() -> list[int] | None:
            return await db.autocommit(_listening_backends) or None

        (second,) = await eventually(listening_again)
        assert second != first
        assert identity.id is not None and identity.id != held  # the node's id came back with it
        await db.autocommit(_notify, "after")
        assert await anext(notes) == "after"
        nursery.cancel_scope.cancel()
