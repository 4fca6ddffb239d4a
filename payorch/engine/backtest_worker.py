"""The backtest worker process: it decides a routing backtest's sessions (`engine.routing_backtest`)
away from the server's interpreter, so the CPU a backtest takes never holds the lock the serving
threads need (docs/routing.md, "Backtest").

The server starts it (`engine.backtest_processes`) as `python -c "<START>"`: a fresh interpreter,
never a fork of the threaded server. It talks over its standard input and output, one message at
a time, each a frame (`framed`: an 8-byte length, then the message pickled), and answers each
message with one frame:

| message | what the worker does | answer |
|---|---|---|
| (on start) | | its process id, once it is ready |
| `Begin` | starts a replay of `document` (the rates learned from `segments`) | None |
| `Decide` | decides and counts `sessions`, knowing `limits` more | None |
| `Finish` | | the replay's `Replay`, and forgets it |

A message it fails on is answered `Failed` (the traceback), and the server stops the worker. The
worker ends when its input ends: the server closed it, or is gone. Anything printed goes to its
standard error, never into the frames. Only the server's own messages are unpickled here, and only
its own worker's answers there: the pipe joins two processes of one program.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import traceback
from dataclasses import dataclass
from typing import BinaryIO

from payorch.engine.routing_backtest import (
    AmountLimits,
    LinkedProvider,
    Replay,
    Replayer,
    accepts_within,
)
from payorch.engine.routing_rules import RoutingDocument
from payorch.engine.success_rates import RoutingSettings, SegmentFigures, SuccessRates
from payorch.storage.routing_history import PastSession

# What the server runs with its own interpreter (`sys.executable -c START`).
START = "from payorch.engine.backtest_worker import serve; serve()"
HEADER = struct.Struct(">Q")  # a frame's length


@dataclass(frozen=True)
class Begin:
    """Start a replay of `document` on the application's `configs` and the rates of `segments`."""

    document: RoutingDocument
    configs: tuple[LinkedProvider, ...]
    segments: tuple[SegmentFigures, ...]
    settings: RoutingSettings


@dataclass(frozen=True)
class Decide:
    """Decide and count `sessions` (each a `PastSession`'s fields: a plain tuple pickles ten times
    faster than a named one), the catalogue's `limits` for their kinds of session added."""

    sessions: list[tuple[object, ...]]
    limits: AmountLimits


@dataclass(frozen=True)
class Finish:
    """Answer the replay's result."""


@dataclass(frozen=True)
class Failed:
    """The worker could not do what it was asked: `description` is the traceback."""

    description: str


Message = Begin | Decide | Finish


def framed(message: object) -> bytes:
    """`message` as one frame."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


class _Replay:
    """The worker's one replay in progress."""

    def __init__(self, begin: Begin) -> None:
        self.limits: AmountLimits = {}
        rates = SuccessRates.from_rows(begin.segments, begin.settings)
        self.replayer = Replayer(
            begin.document, begin.configs, accepts_within(self.limits), rates, begin.settings
        )


def _answer(message: object, replay: _Replay | None) -> tuple[object, _Replay | None]:
    """What the worker answers `message`, and its replay after it."""
    if isinstance(message, Begin):
        return None, _Replay(message)
    if isinstance(message, Decide) and replay is not None:
        replay.limits.update(message.limits)
        replay.replayer.replay(PastSession._make(fields) for fields in message.sessions)
        return None, replay
    if isinstance(message, Finish) and replay is not None:
        result: Replay = replay.replayer.result()
        return result, None
    raise ValueError(f"unexpected message {type(message).__name__} (a replay begun: {replay is not None})")


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
    outbox.write(framed(os.getpid()))
    outbox.flush()
    replay: _Replay | None = None
    while (message := _read_frame(inbox)) is not None:
        try:
            answer, replay = _answer(message, replay)
        except Exception:  # told to the server, which stops this worker
            answer, replay = Failed(traceback.format_exc()), None
        outbox.write(framed(answer))
        outbox.flush()
