"""The backtest worker process: it reads a routing backtest's sessions over a database connection
of its own and decides them (`engine.routing.backtest`) away from the server, so neither the rows'
reading nor the CPU a backtest takes ever holds the lock or the database thread the serving
threads need (docs/routing.md, "Backtest").

The server starts it (`engine.routing.backtest_processes`) as `python -c "<START>"`: a fresh interpreter,
never a fork of the threaded server. It talks over its standard input and output, one message at
a time, each a frame (`framed`: an 8-byte length, then the message pickled), and answers each
message with one frame:

| message | what the worker does | answer |
|---|---|---|
| (on start) | | its process id, once it is ready |
| `Run` | reads the window's sessions (and their documents) in batches, decides them | `Ran` |
| `Limits` | knows what the catalogue's providers take of the kinds it asked of | |

A `Run` is answered `Ran` once every session is decided, the worker resting after each batch to
hold `Run.cpu_share` of a core (`values.cpu_share`); before each batch that holds kinds of
session (payment method and currency) the worker was not told of, it asks `NeedLimits`, and waits
for the server's `Limits`. The sessions are read by `storage.routing_history.read_past_sessions`,
the one statement that reads them; before each batch that names versions of the routing document it
has not read yet, it reads those (`routing_documents_of`), in the same transaction.

It reads the sessions on one connection it keeps between backtests (the DSN comes in `Run`, over
the pipe, never in its arguments), in a read-only REPEATABLE READ transaction, through a
server-side cursor, each statement bounded by `STATEMENT_TIMEOUT_S`. A message it fails on is
answered `Failed` (the traceback; `unavailable` when the database was), and the server stops the
worker. The worker ends when its input ends: the server closed it, or is gone. Anything printed
goes to its standard error, never into the frames. Only the server's own messages are unpickled
here, and only its own worker's answers there: the pipe joins two processes of one program.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import struct
import sys
import time
import traceback
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO

import asyncpg

from payorch.engine.routing.backtest import (
    AmountLimits,
    LinkedProvider,
    Replay,
    Replayer,
    accepts_within,
)
from payorch.engine.routing.document import RoutingDocument, stored_routing_document
from payorch.engine.routing.success_rates import RoutingSettings, SegmentFigures, SuccessRates
from payorch.storage.backend_priority import lower_local_backend_priority
from payorch.storage.dedicated import CONNECT_TIMEOUT_S
from payorch.storage.failures import StorageFailure, storage_failure
from payorch.storage.routing_history import PastSession, read_past_sessions, routing_documents_of
from payorch.values.cpu_share import CpuShare
from payorch.values.errors import InvalidInput

# What the server runs with its own interpreter (`sys.executable -c START`).
START = "from payorch.engine.routing.backtest_worker import serve; serve()"
HEADER = struct.Struct(">Q")  # a frame's length
# Sessions fetched from the cursor and decided at a time: small enough that the rests held to the
# run's share of a core (`Run.cpu_share`) come every few tens of milliseconds, not in bursts.
BATCH = 2_000
STATEMENT_TIMEOUT_S = 60  # the most one statement of a backtest's reading may take (each fetch is one)
# How the worker's connection is named in pg_stat_activity.
APPLICATION_NAME = "payorch backtest"


@dataclass(frozen=True)
class Run:
    """Replay `document`, beside `in_force` (the application's document in force), over the
    application's sessions created from `since` until `until`, the newest `limit` at most, on the
    application's `configs` and the rates of `segments`, reading them from the database at `dsn`."""

    dsn: str
    application_id: uuid.UUID
    since: datetime
    until: datetime
    limit: int
    document: RoutingDocument
    in_force: RoutingDocument
    configs: tuple[LinkedProvider, ...]
    segments: tuple[SegmentFigures, ...]
    settings: RoutingSettings
    cpu_share: float = 1.0  # of one core: the worker rests after each batch (`values.cpu_share`)


@dataclass(frozen=True)
class NeedLimits:
    """The worker asks what the catalogue's providers take of these kinds of session (payment method
    and currency): the server answers `Limits`."""

    kinds: frozenset[tuple[str, str]]


@dataclass(frozen=True)
class Limits:
    """What the catalogue's providers take of the kinds of session a `NeedLimits` asked of."""

    limits: AmountLimits


@dataclass(frozen=True)
class Ran:
    """A run's answer: what the replay found, and the creation time of the oldest session replayed
    when the window held more than the limit (None when it did not)."""

    replay: Replay
    oldest: datetime | None


@dataclass(frozen=True)
class Failed:
    """The worker could not do what it was asked: `description` is the traceback; `unavailable`:
    the database was unavailable (not answering, too slow, shutting down)."""

    description: str
    unavailable: bool = False


Message = Run | Limits


def framed(message: object) -> bytes:
    """`message` as one frame."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


class _Worker:
    """The worker's database connection (opened at its first run, kept for the next) and its pipe."""

    def __init__(self, inbox: BinaryIO, outbox: BinaryIO) -> None:
        self._inbox = inbox
        self._outbox = outbox
        self._conn: asyncpg.Connection | None = None
        self._dsn: str | None = None

    def send(self, answer: object) -> None:
        self._outbox.write(framed(answer))
        self._outbox.flush()

    async def _connection(self, dsn: str) -> asyncpg.Connection:
        if self._conn is not None and (self._dsn != dsn or self._conn.is_closed()):
            await self.close()
        if self._conn is None:
            self._conn = await asyncpg.connect(
                dsn,
                timeout=CONNECT_TIMEOUT_S,
                server_settings={
                    "application_name": APPLICATION_NAME,
                    "statement_timeout": f"{STATEMENT_TIMEOUT_S}s",
                    "idle_in_transaction_session_timeout": f"{STATEMENT_TIMEOUT_S}s",
                    "default_transaction_read_only": "on",
                },
            )
            self._dsn = dsn
            lower_local_backend_priority(self._conn.get_server_pid())
        return self._conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def run(self, run: Run) -> Ran:
        """Read and decide the sessions of `run`."""
        limits: AmountLimits = {}
        rates = SuccessRates.from_rows(run.segments, run.settings)
        decided_by: dict[int, RoutingDocument] = {}  # the stored documents that decided, by version
        replayer = Replayer(
            run.document,
            run.configs,
            accepts_within(limits),
            rates,
            run.settings,
            in_force=run.in_force,
            decided_by=decided_by,
        )
        pacing = CpuShare(run.cpu_share, time.process_time)
        told: set[tuple[str, str]] = set()  # the kinds of session whose limits the server told
        asked: set[int] = {0}  # the versions read (0: the default document, never stored)

        async def decide(batch: list[PastSession]) -> None:
            kinds = {(past.payment_method, past.currency) for past in batch} - told
            if kinds:
                limits.update(self._limits_of(frozenset(kinds)))
                told.update(kinds)
            versions = {past.version for past in batch if past.version is not None} - asked
            if versions:
                decided_by.update(_parsed(await routing_documents_of(conn, run.application_id, versions)))
                asked.update(versions)
            replayer.replay(batch)
            await asyncio.sleep(pacing.rest_s())

        conn = await self._connection(run.dsn)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            oldest = await read_past_sessions(
                conn, run.application_id, run.since, run.until, run.limit, BATCH, decide
            )
        return Ran(replayer.result(), oldest)

    def _limits_of(self, kinds: frozenset[tuple[str, str]]) -> AmountLimits:
        self.send(NeedLimits(kinds))
        answer = _read_frame(self._inbox)
        if answer is None:
            raise SystemExit(0)  # the server is gone
        if not isinstance(answer, Limits):
            raise ValueError(f"unexpected message {type(answer).__name__} (limits asked)")
        return answer.limits


def _parsed(stored: dict[int, dict[str, Any]]) -> dict[int, RoutingDocument]:
    """The stored documents `stored` by version; one that no longer reads (a shape payorch stopped
    taking) is left out, and its sessions' chances are taken as sure."""
    found = {}
    for version, raw in stored.items():
        try:
            found[version] = stored_routing_document(raw)
        except InvalidInput:
            continue
    return found


def _read_frame(inbox: BinaryIO) -> object | None:
    """The next message; None once the input ended."""
    header = inbox.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    payload = inbox.read(size)
    if len(payload) < size:
        return None
    message: object = pickle.loads(payload)  # noqa: S301 - the server's own messages, over its own pipe
    return message


def serve() -> None:
    """The worker's life: announce itself, then answer each message until the input ends."""
    # Ctrl-C reaches the whole process group: the server ends its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox = sys.stdin.buffer
    outbox = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print cannot break a frame
    worker = _Worker(inbox, outbox)
    loop = asyncio.new_event_loop()
    worker.send(os.getpid())
    while (message := _read_frame(inbox)) is not None:
        answer: object
        try:
            if not isinstance(message, Run):
                raise ValueError(f"unexpected message {type(message).__name__}")
            answer = loop.run_until_complete(worker.run(message))
        except Exception as error:  # told to the server, which stops this worker
            unavailable = storage_failure(error) is StorageFailure.UNAVAILABLE or isinstance(error, OSError)
            answer = Failed(traceback.format_exc(), unavailable)
            loop.run_until_complete(worker.close())
        worker.send(answer)
