"""Supervised loops: a crash that coincides with shutdown is logged, and the shutdown goes on."""

from __future__ import annotations

import logging

import pytest
import trio

from payorch.restarts import SupervisorBoard, supervised


async def test_a_crash_during_shutdown_is_logged_and_the_shutdown_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def loop() -> None:
        async def fails_as_it_stops() -> None:
            try:
                await trio.sleep_forever()
            finally:
                raise RuntimeError("could not close cleanly")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fails_as_it_stops)
            await trio.sleep_forever()  # cancelled with its child: the nursery gathers both outcomes

    board = SupervisorBoard()
    with caplog.at_level(logging.ERROR, logger="payorch.supervisors"), trio.move_on_after(0) as stopping:
        await supervised(board, "example", loop)
    assert stopping.cancelled_caught  # the cancellation ended it, not the crash
    assert board.restarts["example"] == 0
    assert [record.message for record in caplog.records] == ["supervisor crashed while stopping"]
