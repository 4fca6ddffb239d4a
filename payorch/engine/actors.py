"""Application actors: one task per application applies every state change of its sessions and
refunds, in the order its mailbox received them.

`ActorRegistry.ask(application_id, command)` puts the command in the application's bounded mailbox
(starting the actor on first use) and waits for the answer. A full mailbox is `ServiceBusy` (503).

An actor runs one command at a time. A command that must wait on a provider does not wait in the
actor: it calls `actor.spawn(io, then)`, which runs the I/O in a child task and queues `then(result)`
back into the mailbox, where it runs in turn like any other message. So a slow provider delays only
the commands that need it, and the order of state changes is the order the actor applied them.

An actor that crashes is dropped: the requests it was serving get `ActorCrashed` (answered 500),
and the next message starts a fresh actor, which knows only what the database knows.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import outcome
import trio

from payorch import logcontext
from payorch.engine.errors import DomainError, ServiceBusy

log = logging.getLogger("payorch.actors")

T = TypeVar("T")
R = TypeVar("R")


class ActorCrashed(Exception):
    """The actor serving this request failed; the request's outcome is unknown to it."""


class Command(Protocol[T]):
    """A message for an application actor. `run` executes inside the actor, one at a time."""

    async def run(self, actor: ApplicationActor, reply: Reply[T]) -> None: ...


@dataclass(eq=False)
class Reply(Generic[T]):
    """Where the answer to one `ask` goes. Answered once; later answers are ignored."""

    _channel: trio.MemorySendChannel[outcome.Outcome[T]]
    answered: bool = False
    request_id: str | None = None  # of the request being served, for the actor's log lines

    def send(self, value: T) -> None:
        self._settle(outcome.Value(value))

    def fail(self, error: BaseException) -> None:
        self._settle(outcome.Error(error))

    def abandon(self) -> None:
        """Close without an answer: the asker gets `ActorCrashed`."""
        if not self.answered:
            self.answered = True
            self._channel.close()

    def _settle(self, result: outcome.Outcome[T]) -> None:
        if not self.answered:
            self.answered = True
            # If the asker gave up (cancelled), nobody hears the answer; the state change stands.
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                self._channel.send_nowait(result)


@dataclass(eq=False)
class _Envelope:
    command: Command[Any]
    reply: Reply[Any]


@dataclass(eq=False)
class _Continuation:
    """The result of a child's I/O, to be applied by the actor."""

    then: Callable[[outcome.Outcome[Any]], Awaitable[None]]
    result: outcome.Outcome[Any]
    reply: Reply[Any]


@dataclass(eq=False)
class ApplicationActor:
    application_id: uuid.UUID
    context: Any  # what commands need (database, providers, settings): the registry's `context`
    _inbox: trio.MemorySendChannel[_Envelope | _Continuation]
    _nursery: trio.Nursery
    _waiting: set[Reply[Any]] = field(default_factory=set)
    in_flight: dict[str, Reply[Any]] = field(default_factory=dict)  # idempotency keys being processed

    def spawn(
        self,
        io: Callable[[], Awaitable[R]],
        then: Callable[[outcome.Outcome[R]], Awaitable[None]],
        reply: Reply[Any],
    ) -> None:
        """Run `io` in a child task; when it ends, `then(its outcome)` runs inside the actor."""
        self._waiting.add(reply)

        async def child() -> None:
            result = await outcome.acapture(io)
            # Waits for room in the mailbox rather than failing: this result must not be lost.
            await self._inbox.send(_Continuation(then, result, reply))

        self._nursery.start_soon(child)

    def _settled(self, reply: Reply[Any]) -> None:
        self._waiting.discard(reply)

    def pending_replies(self) -> set[Reply[Any]]:
        return set(self._waiting)


class ActorRegistry:
    """Starts an actor per application on its first message, stops it after `idle_s` without one."""

    def __init__(self, nursery: trio.Nursery, context: Any, *, mailbox_size: int, idle_s: float) -> None:
        self._nursery = nursery
        self._context = context
        self._mailbox_size = mailbox_size
        self._idle_s = idle_s
        self._mailboxes: dict[uuid.UUID, trio.MemorySendChannel[_Envelope | _Continuation]] = {}
        self.crashes = 0

    async def ask(self, application_id: uuid.UUID, command: Command[T]) -> T:
        """Send `command` to the application's actor and wait for its answer."""
        answer_send, answer_receive = trio.open_memory_channel[outcome.Outcome[T]](1)
        reply: Reply[T] = Reply(answer_send, request_id=logcontext.request_id.get())
        mailbox = self._mailboxes.get(application_id) or self._start(application_id)
        try:
            mailbox.send_nowait(_Envelope(command, reply))
        except trio.WouldBlock:
            raise ServiceBusy("too many requests for this application in flight: retry shortly") from None
        async with answer_receive:
            try:
                result = await answer_receive.receive()
            except trio.EndOfChannel:
                raise ActorCrashed(f"actor of application {application_id} failed") from None
        return result.unwrap()

    def mailbox_depths(self) -> dict[uuid.UUID, int]:
        return {key: channel.statistics().current_buffer_used for key, channel in self._mailboxes.items()}

    def _start(self, application_id: uuid.UUID) -> trio.MemorySendChannel[_Envelope | _Continuation]:
        send, receive = trio.open_memory_channel[_Envelope | _Continuation](self._mailbox_size)
        self._mailboxes[application_id] = send
        self._nursery.start_soon(self._supervise, application_id, send, receive)
        return send

    async def _supervise(
        self,
        application_id: uuid.UUID,
        send: trio.MemorySendChannel[_Envelope | _Continuation],
        receive: trio.MemoryReceiveChannel[_Envelope | _Continuation],
    ) -> None:
        actor: ApplicationActor | None = None
        logcontext.application_id.set(str(application_id))  # this task's (and its children's) lines
        try:
            async with trio.open_nursery() as children:
                actor = ApplicationActor(application_id, self._context, send, children)
                await self._serve(actor, receive)
                children.cancel_scope.cancel()
        except Exception:
            self.crashes += 1
            log.exception("application actor crashed", extra={"applicationId": str(application_id)})
        finally:
            if self._mailboxes.get(application_id) is send:
                del self._mailboxes[application_id]
            # Whoever still waits on this actor learns it failed: close their answer channels.
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
        self, actor: ApplicationActor, receive: trio.MemoryReceiveChannel[_Envelope | _Continuation]
    ) -> None:
        while True:
            message = None
            with trio.move_on_after(self._idle_s):
                message = await receive.receive()
            if message is None:
                if not actor.pending_replies() and receive.statistics().current_buffer_used == 0:
                    # No await between this check and the removal: no message can slip in between.
                    del self._mailboxes[actor.application_id]
                    return
                continue
            if isinstance(message, _Continuation):
                actor._settled(message.reply)
                await _run_guarded(message.reply, message.then(message.result))
            else:
                await _run_guarded(message.reply, message.command.run(actor, message.reply))


async def _run_guarded(reply: Reply[Any], step: Awaitable[None]) -> None:
    """Run one step; a domain error (or any error that is the request's own fault) becomes the
    request's answer. Anything else crashes the actor, after failing the request."""
    token = logcontext.request_id.set(reply.request_id)
    try:
        await step
    except DomainError as error:
        reply.fail(error)
    except Exception:
        reply.fail(ActorCrashed("the application actor failed while handling this request"))
        raise
    finally:
        logcontext.request_id.reset(token)
