"""The places of reconciliation runs in a process: one merchant's runs never hold them all."""

from __future__ import annotations

import uuid

import trio
import trio.testing

from payorch.engine.reconciliation.pacing import Turns

A, B = uuid.uuid4(), uuid.uuid4()


async def test_a_merchant_holding_its_share_waits_while_another_merchant_takes_a_free_place() -> None:
    turns = Turns(in_all=3, per_merchant=2)
    first, second, third, other = object(), object(), object(), object()
    await turns.take(A, first)
    await turns.take(A, second)
    taken: list[object] = []

    async def take(merchant: uuid.UUID, holder: object) -> None:
        await turns.take(merchant, holder)
        taken.append(holder)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, A, third)
        await trio.testing.wait_all_tasks_blocked()
        assert taken == []  # A's third run waits: A holds its share
        await turns.take(B, other)  # B takes the place left, at once
        turns.give_back(A, first)
        await trio.testing.wait_all_tasks_blocked()
        assert taken == [third]
    for merchant, holder in ((A, second), (A, third), (B, other)):
        turns.give_back(merchant, holder)


async def test_a_merchant_with_no_run_holding_or_waiting_keeps_no_limiter() -> None:
    turns = Turns(in_all=2, per_merchant=1)
    holder = object()
    await turns.take(A, holder)
    turns.give_back(A, holder)
    assert turns._merchants == {}
