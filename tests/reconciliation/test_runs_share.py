"""The share of the server's time a process's reconciliation runs take together, however many run."""

from __future__ import annotations

import trio
import trio.testing

from payorch.engine.reconciliation.pacing import RunsShare


async def _batches(share: RunsShare, runs: int, batches: int, busy_s: float) -> float:
    """`runs` runs at once, each `batches` batches of `busy_s`: the seconds they take in all."""

    async def run() -> None:
        for _ in range(batches):
            began = trio.current_time()
            await trio.sleep(busy_s)  # the batch's work, on the mock clock
            await share.rest(began, busy_s)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(runs):
            nursery.start_soon(run)
    return trio.current_time() - start


async def test_one_run_works_its_share_of_the_time_and_rests_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    taken = await _batches(RunsShare(0.25), runs=1, batches=4, busy_s=1.0)
    assert taken == 16.0  # 4 s of work at a quarter of the time


async def test_runs_at_once_together_take_the_share_of_one(autojump_clock: trio.testing.MockClock) -> None:
    taken = await _batches(RunsShare(0.25), runs=4, batches=4, busy_s=1.0)
    # 16 s of work in all at a quarter of the time: 64 s, not the 16 s four runs paced apart take.
    assert taken == 64.0
