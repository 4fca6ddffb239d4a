"""Nodes: each running payorch process, as the claims it makes name it.

A process draws a node id from the `payorch_nodes` sequence as it starts and holds a session-level
advisory lock on it (`pg_try_advisory_lock(NODE_LOCK_CLASS, id)`) on a connection of its own (a
dedicated connection on the database's loop thread, `storage.dedicated`, named `payorch node`) for
as long as it runs. The same connection LISTENs to every channel the process hears
(`storage.notifications`: application changes, the outbox), so a process keeps one connection beside
its pool, and a connection lost takes its id and its listening together, to come back together.
Every claim it makes records that id beside its lease (migration 0009). When the process dies,
however it dies, PostgreSQL closes its connection and drops the lock with it, so `LIVE_NODES`, read
in the same statement as a claim, tells at once whether the claim's owner is still there.

Ids are never reused: a process that loses its connection (a network cut, a restart of PostgreSQL,
its backend terminated) knows at once, or within a check's interval and timeout when the connection
stays open but no longer answers; it takes a new id when it is back, and the claims named by its old
one are taken over by whoever sees them first, as after a crash. Until then it names its claims by
nobody (`NodeIdentity.id` is None), and those claims end only with their leases.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import trio

from payorch.storage.application_changes import APPLICATIONS_CHANNEL, CHANGES_BUFFER
from payorch.storage.database import Connection, Database
from payorch.storage.database_thread import on_database_thread
from payorch.storage.dedicated import LOST
from payorch.storage.notifications import Notifications, add_listeners, listeners
from payorch.storage.outbox import OUTBOX_CHANNEL

log = logging.getLogger("payorch.nodes")

NODE_LOCK_CLASS = 0x7061796F  # "payo": the first key of every node's advisory lock

# The ids of the nodes alive now, as an SQL array expression. pg_locks is read while the statement
# runs, after its snapshot was taken, and a node holds its lock before it claims anything: so a
# claim the statement sees was made by a node this list names, unless that node has died.
LIVE_NODES = f"""ARRAY(SELECT objid::bigint::integer FROM pg_locks
    WHERE locktype = 'advisory' AND classid = {NODE_LOCK_CLASS} AND objsubid = 2 AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))"""

# This node's `server.public_base_url`, for whoever makes links on the same database without this
# process's settings (`payorch invite`); the rows of nodes that are gone go at the same time.
_RECORD_PUBLIC_BASE_URL = f"""WITH gone AS (
        DELETE FROM node_public_base_urls WHERE node <> ALL({LIVE_NODES}) AND node <> $1
    )
    INSERT INTO node_public_base_urls (node, public_base_url) VALUES ($1, $2)
    ON CONFLICT (node) DO UPDATE SET public_base_url = EXCLUDED.public_base_url"""

RECONNECT_INITIAL_S = 0.5
RECONNECT_MAX_S = 10.0
NODE_CONNECTION = "node"  # its purpose: `payorch node` in pg_stat_activity


@dataclass
class NodeIdentity:
    """This process's node id while it holds the lock on it; None while it does not."""

    id: int | None = None


@dataclass(frozen=True)
class NodeChannels:
    """What the node's connection hears, one reader for each channel: application changes (read by
    `application_changes.keep_fresh`) and new outbox events of other processes (read by the webhook
    delivery loop, which needs one waiting: a wake-up, however many came)."""

    applications: Notifications = field(default_factory=lambda: Notifications(CHANGES_BUFFER))
    outbox: Notifications = field(default_factory=lambda: Notifications(buffer=1))

    def by_channel(self) -> dict[str, Notifications]:
        return {APPLICATIONS_CHANNEL: self.applications, OUTBOX_CHANNEL: self.outbox}


@on_database_thread
async def _take_node_id(conn: Connection, public_base_url: str | None) -> int:
    """A new node id, locked by this connection's session, and `public_base_url` recorded for it
    when there is one. The id is new, so nobody holds its lock; should somebody (by hand), the next
    id is taken."""
    while True:
        node: int = await conn.fetchval("SELECT nextval('payorch_nodes')::integer")
        if await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", NODE_LOCK_CLASS, node):
            break
    if public_base_url is not None:
        await conn.execute(_RECORD_PUBLIC_BASE_URL, node, public_base_url)
    return node


async def hold_node_identity(
    db: Database,
    identity: NodeIdentity,
    *,
    public_base_url: str | None = None,
    channels: Mapping[str, Notifications] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Take a node id and hold its lock until cancelled; `identity.id` says which. The same
    connection LISTENs to each of `channels` and hands what it hears to that channel's
    `Notifications`. Started once the first id is held and every channel listened to (a failure
    before that propagates: the service cannot name its claims). Once the connection is lost,
    `identity.id` is None and every channel's reader is told (`Notifications.lost`) until a new
    connection holds a new id and listens again (`Notifications.resumed`), after a pause that grows.
    With `public_base_url`, each id taken records it (`live_public_base_urls` reads it)."""
    heard = dict(channels or {})
    listening = listeners(heard)
    started = False
    pause = RECONNECT_INITIAL_S
    while True:
        node: int | None = None  # the id this connection holds, once it holds one
        try:
            async with db.dedicated_connection(NODE_CONNECTION) as conn:
                node = await conn.run(_take_node_id, public_base_url)
                await conn.run(add_listeners, listening)
                identity.id = node
                for notes in heard.values():
                    notes.resumed()  # what was notified while nobody listened counts as missed
                log.info("holding the node identity", extra={"node": node, "listening": sorted(heard)})
                if not started:
                    started = True
                    task_status.started()
                pause = RECONNECT_INITIAL_S
                try:
                    await conn.wait_lost()
                finally:
                    # At once: closing a connection that no longer answers takes a while.
                    identity.id = None
                    for notes in heard.values():
                        notes.lost()
        except LOST as error:
            if not started:
                log.error("no node identity: the service does not start", extra={"error": repr(error)})
                raise
            log.warning(
                "lost the node's connection; other nodes take over this node's claims, claims made "
                "until it is back end only with their leases, and notifications sent meanwhile count "
                "as missed",
                extra={"node": node, "error": repr(error), "retryInS": pause},
            )
        finally:
            identity.id = None
        await trio.sleep(pause)
        pause = min(pause * 2, RECONNECT_MAX_S)


@on_database_thread
async def live_public_base_urls(conn: Connection) -> list[str]:
    """The `server.public_base_url` of each node alive now that recorded one, the newest node's
    first (`hold_node_identity`)."""
    rows = await conn.fetch(
        f"""SELECT public_base_url FROM node_public_base_urls
            WHERE node = ANY({LIVE_NODES}) ORDER BY node DESC"""
    )
    return [row["public_base_url"] for row in rows]
