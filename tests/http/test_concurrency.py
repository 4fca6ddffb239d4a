"""At most N operations of one key at once, the rest waiting their turn for a bounded time; only
keys with something running or waiting are held."""

from __future__ import annotations

import pytest
import trio

from payorch.http.concurrency import KeyedConcurrencyLimit


async def test_one_more_than_allowed_waits_and_gets_a_turn_when_one_ends() -> None:
    limit = KeyedConcurrencyLimit(1)
    order: list[str] = []

    async def second() -> None:
        async with limit.hold("m", patience_s=10) as held:
            order.append(f"second {held}")

    async with trio.open_nursery() as nursery, limit.hold("m", patience_s=10) as held:
        assert held
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()  # the second waits for its turn
        order.append("first ends")
    assert order == ["first ends", "second True"]
    assert len(limit) == 0


async def test_one_that_waits_past_its_patience_holds_nothing() -> None:
    limit = KeyedConcurrencyLimit(1)
    async with limit.hold("m", patience_s=10):
        async with limit.hold("m", patience_s=0.01) as held:
            assert not held
        async with limit.hold("other", patience_s=0) as held:
            assert held  # another key has turns of its own
        assert len(limit) == 1
    assert len(limit) == 0


async def test_the_block_is_not_bounded_by_the_patience() -> None:
    limit = KeyedConcurrencyLimit(1)
    async with limit.hold("m", patience_s=0.01) as held:
        await trio.sleep(0.05)  # longer than the patience: not cancelled
        assert held


def test_a_limit_needs_one_turn_at_least() -> None:
    with pytest.raises(ValueError, match="per_key"):
        KeyedConcurrencyLimit(0)
