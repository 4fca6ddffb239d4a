"""Steady-rate creates: `POST /api/v1/sessions` for one application, due on a fixed schedule at each
of several rates (open loop, as wrk2 sends): request k is due k / rate seconds after the start and
its latency counts from then, so a stall shows in the latency of every request it delays instead of
hiding in fewer requests sent (coordinated omission corrected). The connections are many more than
the rate needs at the goal's latency, so the schedule, not the connections, decides when a request
goes out while the server keeps up.

Each rate reports p50, p99 and p99.9, errors, the payorch process's cores busy and its CPU per
create (cores busy / creates per second: the server's own cost of one create at that rate, where a
peak's batching is not there to share it). Where the server runs in this process, that CPU is split
between its threads (Trio's, the database's, the others), with the context switches and the units
of work handed to the database's thread per request (`measure.ThreadSplit`); reads are measured the
same way at `CPU_GOAL_RATE`, so that the create's and the read's split stand side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.measure import CpuClock, Measurement, Shape, UnitsCounter, measure, own_cpu_s
from bench.payorch_target import Target

RATES_PER_S = (50.0, 100.0, 200.0)
SECONDS = 20.0
CONNECTIONS = 64
P99_GOALS_MS = {200.0: 60.0, 100.0: 20.0}  # rate -> p99 goal
# Server CPU per create at CPU_GOAL_RATE: at most this many times the bare POST's, same run.
CPU_PER_CREATE_GOAL_RATIO, CPU_GOAL_RATE = 2.0, 100.0


@dataclass(frozen=True)
class SteadyRun:
    rate_per_s: float
    measurement: Measurement

    @property
    def cpu_per_create_ms(self) -> float:
        served = self.measurement.result.requests_per_s
        return self.measurement.cores.server / served * 1000 if served else float("nan")


async def measure_steady(
    target: Target,
    rates: tuple[float, ...],
    seconds: float,
    warmup_s: float,
    label: str = "POST /api/v1/sessions, 1 app",
    server_cpu: CpuClock = own_cpu_s,
    database_cpu: CpuClock | None = None,
    threads_of: int | None = None,
    units: UnitsCounter | None = None,
) -> list[SteadyRun]:
    """`target` loaded at each rate in turn, lowest first. The bare Quart-Trio POST is measured the
    same way (`label` names it), so a create's CPU at a rate stands beside what the web stack alone
    costs at that rate: at a low rate each request pays for its own wake-ups, which a peak shares.
    The server's CPU is this process's unless `server_cpu` reads another's (workers: a process tree);
    `threads_of` and `units` as `measure` takes them."""
    runs = []
    for rate in sorted(rates):
        shape = Shape(connections=CONNECTIONS, warmup_s=warmup_s, measured_s=seconds, rate_per_s=rate)
        measured = await measure(
            f"{label}, steady {rate:g}/s",
            target,
            shape,
            server_cpu=server_cpu,
            database_cpu=database_cpu,
            threads_of=threads_of,
            units=units,
        )
        runs.append(SteadyRun(rate, measured))
    return runs
