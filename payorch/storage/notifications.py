"""LISTEN: PostgreSQL's notifications, heard on the node's dedicated connection on the database's
loop thread (`storage.nodes`: the connection that holds the node lock listens to every channel
too, so a process keeps one connection beside its pool) and handed to Trio, one `Notifications`
for each channel.

asyncpg calls the listener on the loop thread, for each notification. It must never block that
thread (every unit of work of the process runs there), so it only asks Trio to take the payload
(`TrioToken.run_sync_soon`, which queues and returns), and Trio puts it in `Notifications`: a buffer
of at most `buffer` payloads. A notification is a doorbell, not a message that must arrive: when the
buffer is full, what it holds is dropped and replaced by one `MISSED`, which tells the reader that
anything may have changed (the application-change listener forgets everything, the delivery loop
looks for work). So a burst never grows memory nor waits on a slow reader.

The connection is kept: when it is lost (the server or the network closed it, or it stopped
answering), `storage.nodes` opens another after a pause that grows, to whichever server the
database's address then leads (after a failover, the new primary). Notifications sent meanwhile are
lost, so the reader is told `MISSED` when the connection is lost (`Notifications.listening` is then
False) and again once it listens anew (True).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Mapping

import trio
from asyncpg import Connection

from payorch.storage.database_thread import on_database_thread

# What asyncpg calls on the loop thread for each notification: the connection, the sender's backend
# pid, the channel and the payload.
Listener = Callable[[Connection, int, str, object], None]


class Missed(enum.Enum):
    MISSED = "missed"


MISSED = Missed.MISSED  # notifications may have been missed: treat everything as changed


class Notifications:
    """What one channel's listener heard, for one Trio reader: payloads in the order they came, and
    `MISSED` when some may be lost. Iterate it (`async for note in notes`)."""

    def __init__(self, buffer: int) -> None:
        if buffer < 1:
            raise ValueError("a buffer holds at least one notification")
        self._buffer = buffer
        self._payloads: deque[str] = deque()
        self._missed = True  # nothing was heard before the first LISTEN
        self._changed = trio.Event()
        self.listening = False  # True while the channel is listened to: only then is nothing missed

    def heard(self, payload: str) -> None:
        """A notification arrived (in the Trio thread): kept, or, when the buffer is full, dropped with
        every one waiting, for one `MISSED`."""
        if len(self._payloads) >= self._buffer:
            self._payloads.clear()
            self._missed = True
        else:
            self._payloads.append(payload)
        self._changed.set()

    def lost(self) -> None:
        """The connection is lost: notifications are missed until `resumed`."""
        self.listening = False
        self._missed = True
        self._changed.set()

    def resumed(self) -> None:
        """The channel is listened to again; what was sent meanwhile was missed."""
        self.listening = True
        self._missed = True
        self._changed.set()

    def __aiter__(self) -> Notifications:
        return self

    async def __anext__(self) -> str | Missed:
        """The next payload, or `MISSED` (before any payload still waiting: it covers them)."""
        await trio.lowlevel.checkpoint()
        while not self._missed and not self._payloads:
            self._changed = trio.Event()
            await self._changed.wait()
        if self._missed:
            self._missed = False
            self._payloads.clear()
            return MISSED
        return self._payloads.popleft()


def listeners(channels: Mapping[str, Notifications]) -> dict[str, Listener]:
    """For each channel, the asyncpg listener that hands its payloads to the channel's `Notifications`:
    run on the loop thread, it only queues a call for Trio and returns. Called from Trio."""
    token = trio.lowlevel.current_trio_token()

    def handing_to(notes: Notifications) -> Listener:
        def on_notification(_conn: Connection, _pid: int, _channel: str, payload: object) -> None:
            token.run_sync_soon(notes.heard, str(payload))

        return on_notification

    return {channel: handing_to(notes) for channel, notes in channels.items()}


@on_database_thread
async def add_listeners(conn: Connection, listening: Mapping[str, Listener]) -> None:
    """LISTEN on each channel of `listening` on `conn` (run on the loop thread, `DedicatedConnection.run`)."""
    for channel, listener in listening.items():
        await conn.add_listener(channel, listener)
