"""Supervised loops: started once ready, and only once however often they restart; a loop that fails
before it is first ready stops the start; a crash that coincides with shutdown is logged, and the
shutdown goes on."""

from __future__ import annotations

import logging

import pytest
import trio

from payorch.restarts import SupervisorBoard, supervised


async def test_a_crash_during_shutdown_is_logged_and_the_shutdown_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def loop(*, task_status: trio.TaskStatus[None]) -> None:
        async def fails_as_it_stops() -> None:
            try:
                await trio.sleep_forever()
            finally:
                raise RuntimeError("could not close cleanly")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fails_as_it_stops)
            task_status.started()
            await trio.sleep_forever()  # cancelled with its child: the nursery gathers both outcomes

    board = SupervisorBoard()
    with caplog.at_level(logging.ERROR, logger="payorch.supervisors"), trio.move_on_after(0) as stopping:
        await supervised(board, "example", loop)
    assert stopping.cancelled_caught  # the cancellation ended it, not the crash
    assert board.restarts["example"] == 0
    assert [record.message for record in caplog.records] == ["supervisor crashed while stopping"]


class Runs:
    """A loop whose runs are scripted: each reports ready once its gate opens, then the first one
    crashes and the later ones run until cancelled."""

    def __init__(self) -> None:
        self.gates: list[trio.Event] = []
        self.began = trio.Event()  # set when a run begins; replaced for the next

    async def loop(self, *, task_status: trio.TaskStatus[None]) -> None:
        gate = trio.Event()
        self.gates.append(gate)
        self.began.set()
        await gate.wait()
        task_status.started()
        if len(self.gates) == 1:
            raise RuntimeError("the first run crashes once ready")
        await trio.sleep_forever()

    async def next_run(self) -> None:
        await self.began.wait()
        self.began = trio.Event()


async def test_a_supervisor_is_started_once_its_loop_is_ready_and_only_once_across_restarts(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    board = SupervisorBoard()
    runs = Runs()
    starts: list[None] = []

    async with trio.open_nursery() as nursery:

        async def start() -> None:
            starts.append(await nursery.start(supervised, board, "example", runs.loop))

        nursery.start_soon(start)
        await runs.next_run()
        assert (starts, board.running["example"]) == ([], False)  # not ready yet: not started
        runs.gates[0].set()
        await runs.next_run()  # the first run crashed once ready; this is its restart
        assert (starts, board.restarts["example"]) == ([None], 1)
        assert board.running["example"] is False  # until the restarted run is ready
        runs.gates[1].set()
        await trio.testing.wait_all_tasks_blocked()
        assert board.running["example"] is True  # its started() reached the board, not the starter
        assert (starts, board.restarts["example"]) == ([None], 1)
        nursery.cancel_scope.cancel()
    assert [record.message for record in caplog.records if record.levelno >= logging.ERROR] == [
        "supervisor crashed; restarting"
    ]


async def test_a_loop_that_fails_before_it_is_first_ready_is_not_restarted_and_fails_the_start(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    board = SupervisorBoard()
    runs: list[None] = []

    async def loop(*, task_status: trio.TaskStatus[None]) -> None:
        runs.append(None)
        raise RuntimeError("the database refused")

    async with trio.open_nursery() as nursery:
        with pytest.raises(RuntimeError, match="the database refused"):
            await nursery.start(supervised, board, "example", loop)
    assert (len(runs), board.restarts["example"], board.running["example"]) == (1, 0, False)
    (logged,) = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert logged.message == "supervisor failed before it was ready: the service does not start"
    assert logged.supervisor == "example"  # type: ignore[attr-defined]
