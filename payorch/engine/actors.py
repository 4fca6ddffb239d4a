"""Application actors: one task per application in a process, through which that application's
commands pass.

Who serializes what. PostgreSQL does, and so what holds across processes and nodes holds because of
it: a session's or a refund's row lock (`storage.sessions.lock_session`, `storage.refunds.lock_refund`)
orders the changes of one session or refund wherever they are made; an Idempotency-Key is a row with
an owner and a lease, so one request of a key runs at a time on any node; refund submissions and
webhook deliveries are claimed rows (FOR UPDATE SKIP LOCKED, with a lease and an owning node); a
refund's balance is checked under its session's lock. The actor adds, within one process: batching
(creates waiting together claim their keys and store their sessions in one round trip each), the
application's hot state (its provider configurations and routing document, refreshed on change),
one order per lane of what this process applies for the application, and backpressure (a bounded
mailbox: full is 503).
It is not what keeps two processes from applying one change twice: the database is.

Lanes. Every command names the lane it runs in (`lane`): what it must wait for within this process.
A command about one session runs in that session's lane (`("session", id)`), one about a refund in
the refund's; creating sessions and storing what their providers answered each have a lane of
their own kind (`BatchCommand`). A lane runs its commands one at a time, in mailbox order; lanes run
side by side. So a provider event of one session never waits for another session's transaction or
provider call (the database orders what they share), while the changes of one session apply in the
order this process received them. A command that names no lane runs in the application's lane.
One refund's commands run in two lanes, its session's and its own: `engine.payments.refunds` says
why, and what orders them (the database, as it must across processes).

`ActorRegistry.ask(application_id, command)` puts the command in the application's bounded mailbox
(starting the actor on first use) and waits for the answer. A full mailbox is `ServiceBusy` (503).
The actor takes commands out of its mailbox into their lanes while fewer than `mailbox_size` are
in its lanes: past that the mailbox fills, and the next `ask` is answered 503. Every command an
application's actor runs is listed, with its answer, in `engine.commands`.

Batching. Commands of a `BatchCommand` class that wait in their lane while an earlier batch of
theirs runs go together as the next batch, in mailbox order: one `run_batch` call, so one database
unit serves them all (group commit).

A command that must wait on a provider does not wait in its lane: it calls `actor.spawn(io, then)`,
which runs the I/O in a child task and queues `then(result)` back into the mailbox, where it runs in
the same lane like any other message (`spawn_command` queues a command of its own instead). So a
slow provider delays only the commands that need it.

A step that fails on the database fails the requests it touched (`StorageUnavailable`, 503, when
the database is unreachable or asks for a retry; 500 otherwise) and the actor goes on with the next.
An actor that fails in any other way is dropped: the requests it was serving get `ActorCrashed`
(answered 500), and the next message starts a fresh actor, which knows only what the database knows.
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import outcome
import trio

from payorch import logcontext
from payorch.engine.hot_state import HotState
from payorch.storage.failures import StorageFailure, storage_failure
from payorch.values.errors import DomainError, ServiceBusy, StorageUnavailable

log = logging.getLogger("payorch.actors")

C = TypeVar("C")  # what commands need, shared by every actor of a registry
T = TypeVar("T")
R = TypeVar("R")


class ActorCrashed(Exception):
    """The actor serving this request failed; the request's outcome is unknown to it."""


class Command(Protocol[C, T]):
    """A message for an application actor. `run` executes in the command's lane (`lane_of`), one
    command of the lane at a time."""

    async def run(self, actor: ApplicationActor[C], reply: Reply[T]) -> None: ...


APPLICATION_LANE: Hashable = "application"  # the lane of a command that names none

# The lane of the step running in this task: `spawn` sends the I/O's continuation back to it.
_current_lane: contextvars.ContextVar[Hashable] = contextvars.ContextVar("lane", default=APPLICATION_LANE)


def session_lane(session_id: uuid.UUID) -> Hashable:
    """The lane of the commands about one session (its refunds' creation included)."""
    return ("session", session_id)


def refund_lane(refund_id: uuid.UUID) -> Hashable:
    """The lane of the commands about one refund that do not name its session."""
    return ("refund", refund_id)


def lane_of(command: Command[Any, Any]) -> Hashable:
    """The lane `command` runs in: its class for a `BatchCommand`, else its `lane` attribute (a
    session's or a refund's), else the application's lane."""
    if isinstance(command, BatchCommand):
        return ("batch", type(command))
    lane: Hashable = getattr(command, "lane", APPLICATION_LANE)
    return lane


class BatchCommand(Generic[C, T]):
    """A command that runs together with the commands of its class that waited beside it in its
    lane: `run_batch` gets them all, in mailbox order, and answers each one's reply. Subclasses
    define `run_batch`; a command alone is a batch of one."""

    async def run(self, actor: ApplicationActor[C], reply: Reply[T]) -> None:
        await self.run_batch(actor, [(self, reply)])

    @classmethod
    async def run_batch(cls, actor: ApplicationActor[C], batch: Sequence[tuple[Any, Reply[T]]]) -> None:
        raise NotImplementedError


@dataclass(eq=False)
class Reply(Generic[T]):
    """Where the answer to one `ask` goes. Answered once; later answers are ignored.

    One outcome and an event its asker waits on, not a memory channel: an `ask` is every create's
    and every refund's, and a channel pair (two ends, their shared state, the generic alias, the
    close) cost about twice as much. An answer after the asker gave up (cancelled) is heard by
    nobody; the state change stands."""

    request_id: str | None = None  # of the request being served, for the actor's log lines
    _result: outcome.Outcome[T] | None = None  # None when abandoned
    _settled: trio.Event = field(default_factory=trio.Event)

    def send(self, value: T) -> None:
        self._settle(outcome.Value(value))

    def fail(self, error: BaseException) -> None:
        self._settle(outcome.Error(error))

    def abandon(self) -> None:
        """Close without an answer: the asker gets `ActorCrashed`."""
        self._settle(None)

    def _settle(self, result: outcome.Outcome[T] | None) -> None:
        if not self._settled.is_set():
            self._result = result
            self._settled.set()

    async def answer(self) -> outcome.Outcome[T] | None:
        """The outcome, once settled; None when the actor abandoned it."""
        await self._settled.wait()
        return self._result


@dataclass(eq=False)
class _Envelope(Generic[C]):
    command: Command[C, Any]
    reply: Reply[Any]
    resumes: bool = False  # the result of a child's I/O, which the actor was waiting for


@dataclass(frozen=True)
class _Resume(Generic[C, R]):
    """Applies the outcome of a child's I/O in the lane of the step that started it."""

    then: Callable[[outcome.Outcome[R]], Awaitable[None]]
    result: outcome.Outcome[R]
    lane: Hashable

    async def run(self, actor: ApplicationActor[C], reply: Reply[Any]) -> None:
        await self.then(self.result)


@dataclass(eq=False)
class ApplicationActor(Generic[C]):
    application_id: uuid.UUID
    context: C  # what commands need (database, providers, settings): the registry's `context`
    hot: HotState  # the application's state kept between messages
    _inbox: trio.MemorySendChannel[_Envelope[C]]
    _nursery: trio.Nursery
    _room: trio.Semaphore  # commands the lanes may hold: `mailbox_size`
    _waiting: set[Reply[Any]] = field(default_factory=set)  # on a child's I/O
    _lanes: dict[Hashable, deque[_Envelope[C]]] = field(default_factory=dict)  # lanes with work
    in_flight: dict[str, Reply[Any]] = field(default_factory=dict)  # idempotency keys being processed

    def spawn(
        self,
        io: Callable[[], Awaitable[R]],
        then: Callable[[outcome.Outcome[R]], Awaitable[None]],
        reply: Reply[Any],
    ) -> None:
        """Run `io` in a child task; when it ends, `then(its outcome)` runs in this step's lane."""
        lane = _current_lane.get()
        self.spawn_command(io, lambda result: _Resume(then, result, lane), reply)

    def spawn_command(
        self,
        io: Callable[[], Awaitable[R]],
        then: Callable[[outcome.Outcome[R]], Command[C, Any]],
        reply: Reply[Any],
    ) -> None:
        """Run `io` in a child task; when it ends, the command `then(its outcome)` goes to the
        mailbox, where it runs in turn in its lane (with others of its kind, if it is a
        `BatchCommand`)."""
        self._waiting.add(reply)

        async def child() -> None:
            result = await outcome.acapture(io)
            # Waits for room in the mailbox rather than failing: this result must not be lost.
            await self._inbox.send(_Envelope(then(result), reply, resumes=True))

        self._nursery.start_soon(child)

    def _settled(self, reply: Reply[Any]) -> None:
        self._waiting.discard(reply)

    def pending_replies(self) -> set[Reply[Any]]:
        """The replies still owed: of the commands in lanes, and of those waiting on a child's I/O."""
        owed = set(self._waiting)
        for lane in self._lanes.values():
            owed.update(message.reply for message in lane)
        return owed

    def busy(self) -> bool:
        return bool(self._waiting or self._lanes)

    def _enqueue(self, message: _Envelope[C]) -> None:
        """Put `message` at the end of its lane, starting the lane's task if the lane was idle."""
        if message.resumes:
            self._settled(message.reply)
        key = lane_of(message.command)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = deque()
            self._nursery.start_soon(self._drain, key, lane)
        lane.append(message)

    async def _drain(self, key: Hashable, lane: deque[_Envelope[C]]) -> None:
        """Run the lane's commands one step at a time until it is empty; the lane then ends."""
        _current_lane.set(key)
        while lane:
            step = [lane[0]]
            if isinstance(step[0].command, BatchCommand):
                step = list(lane)
            # A crash raises out of here, leaving the step in the lane: its replies are stranded
            # with the lane's others and closed by the registry (`ActorCrashed`).
            await _run_guarded(self, step)
            for _ in step:
                lane.popleft()
                self._room.release()
        # No await between the last check and the removal: nothing can join the lane in between.
        del self._lanes[key]


class ActorRegistry(Generic[C]):
    """Starts an actor per application on its first message, stops it after `idle_s` without one.

    `forget_application` (and `forget_all`) drop what actors hold of an application's state; they
    are called in this process right after a change commits, and by the listener that hears other
    processes' changes. While nothing listens (`listening` False), actors hold nothing: they
    could not hear about a change."""

    def __init__(self, nursery: trio.Nursery, context: C, *, mailbox_size: int, idle_s: float) -> None:
        self._nursery = nursery
        self._context = context
        self._mailbox_size = mailbox_size
        self._idle_s = idle_s
        self._mailboxes: dict[uuid.UUID, trio.MemorySendChannel[_Envelope[C]]] = {}
        self._actors: dict[uuid.UUID, ApplicationActor[C]] = {}
        # The context actors start in: the registry's own, not that of the request that happened
        # to start one (a task keeps its starter's context variables, so an actor started from a
        # request would keep that request, its body and its connection alive while it waits).
        self._actor_context = contextvars.copy_context()
        self.listening = False
        self.crashes = 0

    async def ask(self, application_id: uuid.UUID, command: Command[C, T]) -> T:
        """Send `command` to the application's actor and wait for its answer."""
        reply: Reply[T] = Reply(request_id=logcontext.request_id.get())
        mailbox = self._mailboxes.get(application_id) or self._start(application_id)
        try:
            mailbox.send_nowait(_Envelope(command, reply))
        except trio.WouldBlock:
            raise ServiceBusy("too many requests for this application in flight: retry shortly") from None
        result = await reply.answer()
        if result is None:
            raise ActorCrashed(f"actor of application {application_id} failed")
        return result.unwrap()

    def mailbox_depths(self) -> dict[uuid.UUID, int]:
        return {key: channel.statistics().current_buffer_used for key, channel in self._mailboxes.items()}

    def __len__(self) -> int:
        """Actors running now."""
        return len(self._mailboxes)

    def forget_application(self, application_id: uuid.UUID) -> None:
        """The application's state changed: its actor reads it afresh when next needed."""
        actor = self._actors.get(application_id)
        if actor is not None:
            actor.hot.forget()

    def forget_all(self) -> None:
        for actor in self._actors.values():
            actor.hot.forget()

    def _start(self, application_id: uuid.UUID) -> trio.MemorySendChannel[_Envelope[C]]:
        send, receive = trio.open_memory_channel[_Envelope[C]](self._mailbox_size)
        self._mailboxes[application_id] = send
        self._actor_context.copy().run(
            self._nursery.start_soon, self._supervise, application_id, send, receive
        )
        return send

    async def _supervise(
        self,
        application_id: uuid.UUID,
        send: trio.MemorySendChannel[_Envelope[C]],
        receive: trio.MemoryReceiveChannel[_Envelope[C]],
    ) -> None:
        actor: ApplicationActor[C] | None = None
        logcontext.application_id.set(str(application_id))  # this task's (and its children's) lines
        try:
            async with trio.open_nursery() as children:
                hot = HotState(trusted=lambda: self.listening)
                room = trio.Semaphore(self._mailbox_size)
                actor = ApplicationActor(application_id, self._context, hot, send, children, room)
                self._actors[application_id] = actor
                await self._serve(actor, receive)
                children.cancel_scope.cancel()
        except Exception:
            self.crashes += 1
            log.exception("application actor crashed", extra={"applicationId": str(application_id)})
        finally:
            if self._mailboxes.get(application_id) is send:
                del self._mailboxes[application_id]
            if actor is not None and self._actors.get(application_id) is actor:
                del self._actors[application_id]
            # Whoever still waits on this actor learns it failed: their replies are abandoned.
            stranded = actor.pending_replies() if actor else set()
            while True:
                try:
                    message = receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                stranded.add(message.reply)
            for reply in stranded:
                reply.abandon()
            receive.close()

    async def _serve(
        self, actor: ApplicationActor[C], receive: trio.MemoryReceiveChannel[_Envelope[C]]
    ) -> None:
        """Move messages from the mailbox into their lanes while the lanes have room; stop after
        `idle_s` with nothing to do."""
        while True:
            message = None
            with trio.move_on_after(self._idle_s):
                await actor._room.acquire()
                try:
                    message = await receive.receive()
                finally:
                    if message is None:
                        actor._room.release()
            if message is None:
                if not actor.busy() and receive.statistics().current_buffer_used == 0:
                    # No await between this check and the removal: no message can slip in between.
                    del self._mailboxes[actor.application_id]
                    del self._actors[actor.application_id]
                    return
                continue
            actor._enqueue(message)


async def _run_guarded(actor: ApplicationActor[C], run: list[_Envelope[C]]) -> None:
    """Run one step; a domain error (or any error that is the request's own fault) becomes the
    answer of every request of the step not answered yet, and so does a failure of the database
    (which the actor outlives). Anything else crashes the actor, after failing the requests."""
    replies = [message.reply for message in run]
    token = logcontext.request_id.set(replies[0].request_id)
    try:
        first = run[0].command
        if isinstance(first, BatchCommand):
            await first.run_batch(actor, [(message.command, message.reply) for message in run])
        else:
            await first.run(actor, replies[0])
    except DomainError as error:
        _fail(replies, error)
    except Exception as error:
        failure = storage_failure(error)
        if failure is None:
            _fail(replies, ActorCrashed("the application actor failed while handling this request"))
            raise
        log.error(
            "a database unit failed: its requests are answered with the failure",
            exc_info=failure is StorageFailure.INTERNAL,
            extra={"applicationId": str(actor.application_id), "requests": len(run), "error": repr(error)},
        )
        if failure is StorageFailure.UNAVAILABLE:
            _fail(replies, StorageUnavailable("the database is unavailable: retry shortly"))
        else:
            _fail(replies, ActorCrashed("a database statement failed while handling this request"))
    finally:
        logcontext.request_id.reset(token)


def _fail(replies: list[Reply[Any]], error: BaseException) -> None:
    for reply in replies:
        reply.fail(error)
