"""payorch's figures and the bare app's they are compared with, measured side by side.

A ratio to the bare endpoint is meant to cancel what the machine does to both; measured minutes apart
it does not: on a shared machine the bare POST's own cost moved by half between two windows of one
run (docs/benchmarks.md, "Pairs"). So the bare app runs as a process of its own beside payorch for the
whole run (`running_bare_apart`), each figure behind a ratio goal is measured in pairs, payorch's
window and the bare app's one right after the other, and the pairs are repeated in rounds that
alternate which of the two goes first (`paired`): the figures shown are those of the round whose
ratio is the median of the rounds', and every round's ratio is printed beside the goal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from bench.measure import CpuClock, Measurement, Shape, measure
from bench.payorch_target import Target
from bench.steady import SteadyRun, measure_steady
from bench.workers import bare_serving

M = TypeVar("M")


@dataclass(frozen=True)
class BareApart:
    """The bare app (`bench/bare.py`) serving in a process of its own: where, what CPU it has spent
    so far, and its process (whose one thread serves)."""

    base_url: str
    cpu_s: CpuClock
    pid: int

    async def measured(self, label: str, target: Target, shape: Shape) -> Measurement:
        """`measure`, with this process's CPU and its thread's."""
        return await measure(label, target, shape, server_cpu=self.cpu_s, threads_of=self.pid)

    async def steady(
        self, target: Target, rates: tuple[float, ...], seconds: float, warmup_s: float, label: str
    ) -> list[SteadyRun]:
        """`measure_steady`, with this process's CPU and its thread's."""
        return await measure_steady(
            target, rates, seconds, warmup_s, label=label, server_cpu=self.cpu_s, threads_of=self.pid
        )


@asynccontextmanager
async def running_bare_apart(work_dir: Path) -> AsyncIterator[BareApart]:
    """The bare app on loopback in one process of its own (`bench.bare_server` with no workers:
    hypercorn's trio worker in that process, payorch's hypercorn configuration and ASGI wrapper), until
    the block ends; its files under `work_dir`."""
    async with bare_serving(work_dir, 0) as serving:
        yield BareApart(serving.base_url, serving.tree.cpu_s, serving.tree.root.pid)


@dataclass(frozen=True)
class Paired(Generic[M]):
    """The rounds of one comparison: the median round's payorch and bare figures, and each round's
    ratio in the order measured."""

    payorch: M
    bare: M
    ratios: list[float]


async def paired(
    payorch: Callable[[], Awaitable[M]],
    bare: Callable[[], Awaitable[M]],
    ratio: Callable[[M, M], float],
    rounds: int,
) -> Paired[M]:
    """`rounds` rounds of `payorch()` and `bare()` one right after the other, payorch first in the
    first round, the bare app first in the second, and so on; the round whose `ratio(payorch, bare)`
    is the median (the lower of the two middle ones for an even count) gives the figures."""
    pairs: list[tuple[M, M]] = []
    for number in range(rounds):
        if number % 2 == 0:
            first = await payorch()
            pairs.append((first, await bare()))
        else:
            second = await bare()
            pairs.append((await payorch(), second))
    ratios = [ratio(ours, theirs) for ours, theirs in pairs]
    median = sorted(range(rounds), key=ratios.__getitem__)[(rounds - 1) // 2]
    return Paired(payorch=pairs[median][0], bare=pairs[median][1], ratios=ratios)
