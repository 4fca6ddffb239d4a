"""Application actors: one mailbox per application, lanes applied in order and side by side,
crashes contained."""

from __future__ import annotations

import contextvars
import gc
import uuid
import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import outcome
import pytest
import trio
import trio.lowlevel

from payorch.engine.actors import (
    APPLICATION_LANE,
    ActorCrashed,
    ActorRegistry,
    ApplicationActor,
    BatchCommand,
    Reply,
)
from payorch.values.errors import NotFound, ServiceBusy, StorageUnavailable
from tests.helpers import eventually


@dataclass
class Log:
    applied: list[int] = field(default_factory=list)
    batches: list[list[int]] = field(default_factory=list)


@dataclass(frozen=True)
class Append:
    number: int
    lane: Hashable = APPLICATION_LANE  # a session's command names its session's

    async def run(self, actor: ApplicationActor, reply: Reply[int]) -> None:
        log: Log = actor.context
        # A checkpoint inside the step must not let another message interleave.
        await trio.lowlevel.checkpoint()
        log.applied.append(self.number)
        reply.send(self.number)


@dataclass(frozen=True)
class Explode:
    async def run(self, actor: ApplicationActor, reply: Reply[None]) -> None:
        raise RuntimeError("bug")


@dataclass(frozen=True)
class Refuse:
    async def run(self, actor: ApplicationActor, reply: Reply[None]) -> None:
        raise NotFound("no such thing")


@dataclass(frozen=True)
class SlowIo:
    """Waits on `gate` in a child task (like a provider call), then appends `number` in the actor."""

    number: int
    gate: trio.Event

    async def run(self, actor: ApplicationActor, reply: Reply[int]) -> None:
        log: Log = actor.context

        async def io() -> int:
            await self.gate.wait()
            return self.number

        async def then(result: outcome.Outcome[int]) -> None:
            number = result.unwrap()
            log.applied.append(number)
            reply.send(number)

        actor.spawn(io, then, reply)


@dataclass(frozen=True)
class Block:
    """Holds its lane until `gate` is set (a slow step inside the actor, a session's transaction
    waiting on a lock)."""

    gate: trio.Event
    lane: Hashable = APPLICATION_LANE

    async def run(self, actor: ApplicationActor, reply: Reply[None]) -> None:
        await self.gate.wait()
        reply.send(None)


@pytest.fixture
async def registry(nursery: trio.Nursery) -> ActorRegistry:
    return ActorRegistry(nursery, Log(), mailbox_size=256, idle_s=60)


async def test_100_concurrent_messages_for_one_application_are_applied_in_mailbox_order(
    registry: ActorRegistry,
) -> None:
    application = uuid.uuid4()
    sent: list[int] = []

    async def send(number: int) -> None:
        sent.append(number)  # the order messages enter the mailbox: no checkpoint before ask's send
        await registry.ask(application, Append(number))

    async with trio.open_nursery() as senders:
        for number in range(100):
            senders.start_soon(send, number)
    assert registry._context.applied == sent
    assert sorted(sent) == list(range(100))


async def test_answer_is_the_commands_reply(registry: ActorRegistry) -> None:
    assert await registry.ask(uuid.uuid4(), Append(7)) == 7


async def test_domain_error_is_the_answer_and_the_actor_lives_on(registry: ActorRegistry) -> None:
    application = uuid.uuid4()
    with pytest.raises(NotFound):
        await registry.ask(application, Refuse())
    assert await registry.ask(application, Append(1)) == 1
    assert registry.crashes == 0


async def test_crash_fails_the_request_and_a_fresh_actor_serves_the_next(registry: ActorRegistry) -> None:
    application = uuid.uuid4()
    with pytest.raises(ActorCrashed):
        await registry.ask(application, Explode())
    await trio.testing.wait_all_tasks_blocked()  # the failed actor is dropped after it answered
    assert registry.crashes == 1
    assert await registry.ask(application, Append(2)) == 2


async def _crash_beside(registry: ActorRegistry, waiting_command: Any) -> int:
    """Crash an application's actor while `waiting_command` waits in it; how many of its askers
    were answered `ActorCrashed`."""
    application = uuid.uuid4()
    outcomes: list[BaseException] = []

    async def waiting() -> None:
        try:
            await registry.ask(application, waiting_command)
        except ActorCrashed as error:
            outcomes.append(error)

    async with trio.open_nursery() as tasks:
        tasks.start_soon(waiting)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ActorCrashed):
            await registry.ask(application, Explode())
    return len(outcomes)


async def test_crash_fails_requests_waiting_on_provider_io_too(registry: ActorRegistry) -> None:
    never = trio.Event()
    assert await _crash_beside(registry, SlowIo(1, never)) == 1


async def test_crash_of_one_application_leaves_others_serving(registry: ActorRegistry) -> None:
    healthy, broken = uuid.uuid4(), uuid.uuid4()
    assert await registry.ask(healthy, Append(1)) == 1
    with pytest.raises(ActorCrashed):
        await registry.ask(broken, Explode())
    assert await registry.ask(healthy, Append(2)) == 2


async def test_slow_provider_io_does_not_block_the_mailbox(registry: ActorRegistry) -> None:
    application = uuid.uuid4()
    gate = trio.Event()
    async with trio.open_nursery() as tasks:
        tasks.start_soon(registry.ask, application, SlowIo(1, gate))
        await trio.testing.wait_all_tasks_blocked()
        assert await registry.ask(application, Append(2)) == 2  # served while the I/O waits
        gate.set()
    assert registry._context.applied == [2, 1]


async def test_full_mailbox_is_service_busy(nursery: trio.Nursery) -> None:
    registry = ActorRegistry(nursery, Log(), mailbox_size=1, idle_s=60)
    application = uuid.uuid4()
    gate = trio.Event()
    async with trio.open_nursery() as tasks:
        # The actor takes the first message and waits; the second fills the mailbox.
        tasks.start_soon(registry.ask, application, Block(gate))
        await trio.testing.wait_all_tasks_blocked()
        tasks.start_soon(registry.ask, application, Append(2))
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ServiceBusy):
            await registry.ask(application, Append(4))
        gate.set()


async def test_idle_actor_stops_and_restarts_on_the_next_message(nursery: trio.Nursery) -> None:
    registry = ActorRegistry(nursery, Log(), mailbox_size=8, idle_s=0.05)
    application = uuid.uuid4()
    await registry.ask(application, Append(1))
    assert application in registry.mailbox_depths()

    async def stopped() -> bool:
        return application not in registry.mailbox_depths()

    await eventually(stopped, 5)
    assert await registry.ask(application, Append(2)) == 2


@dataclass(frozen=True)
class Gather(BatchCommand[Log, int]):
    """A batched command: the commands that waited together run as one `run_batch` call. One
    holding `gate` keeps its batch (and so its lane) running until the gate is set."""

    number: int
    gate: trio.Event | None = None

    @classmethod
    async def run_batch(cls, actor: ApplicationActor, batch: Sequence[tuple[Gather, Reply[int]]]) -> None:
        log: Log = actor.context
        log.batches.append([command.number for command, _ in batch])
        for command, reply in batch:
            if command.gate is not None:
                await command.gate.wait()
            reply.send(command.number)


@dataclass(frozen=True)
class LoseTheDatabase:
    async def run(self, actor: ApplicationActor, reply: Reply[None]) -> None:
        raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")


@dataclass(frozen=True)
class BreakAStatement:
    async def run(self, actor: ApplicationActor, reply: Reply[None]) -> None:
        raise asyncpg.UndefinedColumnError('column "nope" does not exist')


async def test_batched_commands_that_waited_while_their_batch_ran_go_together_in_mailbox_order(
    registry: ActorRegistry,
) -> None:
    application = uuid.uuid4()
    gate = trio.Event()
    async with trio.open_nursery() as tasks:
        tasks.start_soon(registry.ask, application, Gather(0, gate))  # holds its lane
        await trio.testing.wait_all_tasks_blocked()
        for number in range(1, 5):
            tasks.start_soon(registry.ask, application, Gather(number))
            await trio.testing.wait_all_tasks_blocked()
        assert await registry.ask(application, Append(99)) == 99  # another lane: not held
        tasks.start_soon(registry.ask, application, Gather(5))
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert registry._context.batches == [[0], [1, 2, 3, 4, 5]]
    assert registry._context.applied == [99]


async def test_a_command_waits_for_nothing_of_another_lane(registry: ActorRegistry) -> None:
    application = uuid.uuid4()
    gate = trio.Event()
    async with trio.open_nursery() as tasks:
        tasks.start_soon(registry.ask, application, Block(gate, "session a"))
        await trio.testing.wait_all_tasks_blocked()
        assert await registry.ask(application, Append(1, "session b")) == 1
        assert await registry.ask(application, Append(2)) == 2  # the application's lane
        gate.set()


async def test_commands_of_one_lane_apply_in_mailbox_order_beside_other_lanes(
    registry: ActorRegistry,
) -> None:
    application = uuid.uuid4()
    sent: dict[str, list[int]] = {"a": [], "b": [], "c": []}

    async def send(number: int) -> None:
        lane = "abc"[number % 3]
        sent[lane].append(number)  # the order messages enter the mailbox: no checkpoint before ask's send
        await registry.ask(application, Append(number, lane))

    async with trio.open_nursery() as senders:
        for number in range(99):
            senders.start_soon(send, number)
    applied: list[int] = registry._context.applied
    for lane, numbers in sent.items():
        assert [number for number in applied if "abc"[number % 3] == lane] == numbers


async def test_a_crash_in_one_lane_fails_the_requests_waiting_in_the_others(registry: ActorRegistry) -> None:
    assert await _crash_beside(registry, Block(trio.Event(), "session a")) == 1


async def test_a_full_lane_fills_the_mailbox_and_the_next_ask_is_service_busy(nursery: trio.Nursery) -> None:
    registry = ActorRegistry(nursery, Log(), mailbox_size=2, idle_s=60)
    application = uuid.uuid4()
    gate = trio.Event()
    async with trio.open_nursery() as tasks:
        # Two commands fill the lanes' room; the next two wait in the mailbox, which is then full.
        for lane in ("a", "b", "c", "d"):
            tasks.start_soon(registry.ask, application, Block(gate, lane))
            await trio.testing.wait_all_tasks_blocked()
        assert registry.mailbox_depths()[application] == 2
        with pytest.raises(ServiceBusy):
            await registry.ask(application, Append(5, "e"))
        gate.set()
    assert await registry.ask(application, Append(6, "e")) == 6


async def test_a_lost_database_fails_the_request_with_503_and_the_actor_lives_on(
    registry: ActorRegistry,
) -> None:
    application = uuid.uuid4()
    assert await registry.ask(application, Append(1)) == 1
    with pytest.raises(StorageUnavailable):
        await registry.ask(application, LoseTheDatabase())
    assert await registry.ask(application, Append(2)) == 2
    assert registry.crashes == 0
    assert registry._context.applied == [1, 2]


async def test_a_failed_statement_fails_the_request_with_500_and_the_actor_lives_on(
    registry: ActorRegistry,
) -> None:
    application = uuid.uuid4()
    with pytest.raises(ActorCrashed):
        await registry.ask(application, BreakAStatement())
    assert await registry.ask(application, Append(3)) == 3
    assert registry.crashes == 0


_request_scoped: contextvars.ContextVar[object] = contextvars.ContextVar("request_scoped")


class _RequestState:
    """Stands for what a request holds in its context variables (its body, its connection)."""


async def test_a_waiting_actor_keeps_nothing_of_the_request_that_started_it(registry: ActorRegistry) -> None:
    application = uuid.uuid4()
    held: list[weakref.ref[_RequestState]] = []
    seen_by_actor: list[object] = []

    @dataclass(frozen=True)
    class Look:
        async def run(self, actor: ApplicationActor, reply: Reply[None]) -> None:
            seen_by_actor.append(_request_scoped.get(None))
            reply.send(None)

    async def request() -> None:
        state = _RequestState()
        held.append(weakref.ref(state))
        _request_scoped.set(state)
        await registry.ask(application, Look())

    async with trio.open_nursery() as requests:
        requests.start_soon(request)
    gc.collect()
    assert application in registry.mailbox_depths()  # the actor waits for its next message
    assert held[0]() is None
    assert seen_by_actor == [None]


async def test_an_asker_that_gave_up_leaves_the_step_applied_and_the_actor_serving(
    registry: ActorRegistry,
) -> None:
    application, gate = uuid.uuid4(), trio.Event()
    with trio.move_on_after(0.05) as gave_up:
        await registry.ask(application, SlowIo(5, gate))
    assert gave_up.cancelled_caught
    gate.set()  # the step ends and answers nobody

    async def applied() -> bool:
        return bool(registry._context.applied == [5])

    await eventually(applied)
    assert await registry.ask(application, Append(6)) == 6
    assert registry.crashes == 0


async def test_a_reply_is_answered_once_and_later_answers_are_ignored() -> None:
    reply: Reply[int] = Reply()
    reply.send(1)
    reply.send(2)
    reply.fail(RuntimeError("late"))
    reply.abandon()
    answered = await reply.answer()
    assert answered is not None and answered.unwrap() == 1
    abandoned: Reply[int] = Reply()
    abandoned.abandon()
    abandoned.send(3)
    assert await abandoned.answer() is None
