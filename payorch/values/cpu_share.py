"""Background work paced to a share of one core: password hashes, routing backtests and
reconciliation runs.

On a machine with few cores, a busy core costs the serving threads time whatever its priority: a
hashing thread at nice 19, or a backtest worker in the idle scheduling class, beside the threads
serving every merchant still raised those merchants' create p99 several times on two vCPUs
(docs/benchmarks.md, "Where the time goes"). A priority says who runs first; only resting bounds
what the work takes. So such work rests after each step in proportion to the CPU the step took: at
a share of 0.25, a step that took 40 ms of CPU rests 120 ms, and the work holds at most a quarter
of one core however much of it is asked for. What is asked beyond that waits (a backtest runs
longer) or is refused (a login finding every hashing turn taken: 503, Retry-After).
"""

from __future__ import annotations

from collections.abc import Callable


class CpuShare:
    """How long to rest after each step of work held to `share` (0 < share <= 1) of one core, the
    time it took measured by `cpu_clock` (`time.thread_time` for one thread's work,
    `time.process_time` for a process's, or a wall clock less the work's waits for others, as a
    reconciliation run's). At 1 it never rests."""

    def __init__(self, share: float, cpu_clock: Callable[[], float]) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"a share of one core is more than 0 and at most 1, not {share}")
        self.share = share
        self._clock = cpu_clock
        self._since = cpu_clock()

    def restart(self) -> None:
        """Count from now: after a rest measured on a wall clock, so that the rest itself is not
        taken for work (a CPU clock does not run while the work sleeps)."""
        self._since = self._clock()

    def rest_s(self) -> float:
        """The rest owed for the time taken since the last call (or since this was made, or
        restarted)."""
        now = self._clock()
        busy, self._since = max(0.0, now - self._since), now
        return busy * (1.0 - self.share) / self.share
