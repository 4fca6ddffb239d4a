"""`python -m bench.soak` (`make soak`): payorch under a steady load for minutes: no request may fail,
and its memory may not grow by 10% or more.

payorch runs in this process on a fresh embedded PostgreSQL, with 50 applications linked to the
sandbox (as `make bench` sets them up). First the peak: session creates as fast as 32 connections go,
spread over the applications, for `--peak-seconds`. Then the soak: creates due at half that rate
(`--rate` sets it instead), spread the same way, for `--minutes`, from the load generator process.
Every request of the soak counts (there is no unmeasured warm-up: the peak phase warmed payorch up).
This process's RSS is read when the soak starts, every 30 s (on stderr), and when it ends.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import trio

from bench.load import LoadResult
from bench.measure import Shape, background_cores, cpu_count, measure, progress, rss_bytes
from bench.payorch_target import bench_settings, create_target, problems_logged, running_payorch
from bench.report import BUSY_MACHINE_CORES, LABEL_WIDTH, MIB, goal_line
from bench.shop import sandbox_link, signed_up_merchant

RSS_GROWTH_GOAL = 0.10
RSS_EVERY_S = 30.0


@dataclass(frozen=True)
class Soak:
    peak: LoadResult | None  # None when the rate was given
    rate_per_s: float
    result: LoadResult
    rss_start: int
    rss_end: int
    rss_peak: int

    @property
    def rss_growth(self) -> float:
        return (self.rss_end - self.rss_start) / self.rss_start if self.rss_start else 0.0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description="session creates at half the peak rate for minutes"
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the soak (default 10)")
    parser.add_argument(
        "--peak-seconds", type=float, default=10.0, help="measured phase of the peak (default 10)"
    )
    parser.add_argument("--rate", type=float, default=0.0, help="creates per second (default: half the peak)")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections (default 32)")
    parser.add_argument("--applications", type=int, default=50, help="applications (default 50)")
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= 120 or not 0 < args.peak_seconds <= 300 or not 0 <= args.rate <= 10_000:
        parser.error("need 0 < --minutes <= 120, 0 < --peak-seconds <= 300, 0 <= --rate <= 10000")
    if not 1 <= args.connections <= 256 or not 1 <= args.applications <= 1000:
        parser.error("need 1 <= --connections <= 256, 1 <= --applications <= 1000")
    return args


async def _sample_rss(peak: list[int]) -> None:
    started = trio.current_time()
    while True:
        await trio.sleep(RSS_EVERY_S)
        rss = rss_bytes()
        peak[0] = max(peak[0], rss)
        progress(f"soak: {trio.current_time() - started:.0f} s, RSS {rss / MIB:.1f} MiB")


async def soak(work_dir: Path, args: argparse.Namespace) -> Soak:
    settings = bench_settings(work_dir)
    async with running_payorch(settings, work_dir / "payorch.log") as payorch:
        async with signed_up_merchant(payorch) as merchant:
            progress(f"creating {args.applications} applications, each linked to the sandbox")
            applications = await merchant.new_applications(args.applications, sandbox_link())
        target = create_target(payorch.base_url, [application.api_key for application in applications])
        peak, rate = None, args.rate
        if not rate:
            shape = Shape(connections=args.connections, warmup_s=2.0, measured_s=args.peak_seconds)
            peak = (await measure("peak", target, shape)).result
            rate = peak.requests_per_s / 2
        rss_start = rss_bytes()
        rss_peak = [rss_start]
        shape = Shape(
            connections=args.connections, warmup_s=0.0, measured_s=args.minutes * 60, rate_per_s=rate
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_sample_rss, rss_peak)
            result = (await measure("soak", target, shape)).result
            nursery.cancel_scope.cancel()
        rss_end = rss_bytes()
    return Soak(peak, rate, result, rss_start, rss_end, max(rss_peak[0], rss_end))


def report(found: Soak, args: argparse.Namespace, background: float | None) -> Iterator[str]:
    r = found.result
    source = f"half the peak of {found.peak.requests_per_s:.1f}/s" if found.peak else "as asked"
    yield (
        f"payorch soak: {args.minutes:g} min of session creates due at {found.rate_per_s:.1f}/s ({source}), "
        f"{args.connections} connections, {args.applications} applications, {cpu_count()} cores"
    )
    yield ""
    yield f"{'':<{LABEL_WIDTH}}{'answered':>11}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
    errors = sum(r.errors.values())
    yield (
        f"{'soak (latency from when each was due)':<{LABEL_WIDTH}}{r.successes:>11}{r.requests_per_s:>9.1f}"
        f"{r.p50_ms:>9.1f}{r.p99_ms:>9.1f}{errors:>8}"
    )
    yield (
        f"RSS MiB: {found.rss_start / MIB:.1f} at the start, {found.rss_end / MIB:.1f} at the end, "
        f"{found.rss_peak / MIB:.1f} at most"
    )
    yield ""
    yield f"{'goal':<{LABEL_WIDTH}}{'figure':>11}   goal"
    yield goal_line("soak: errors", f"{errors}", "0", errors == 0)
    yield goal_line(
        "soak: RSS growth, start to end",
        f"{found.rss_growth:+.1%}",
        f"under {RSS_GROWTH_GOAL:.0%}",
        found.rss_growth < RSS_GROWTH_GOAL,
    )
    if r.errors:
        yield "errors: " + ", ".join(f"{kind}: {count}" for kind, count in sorted(r.errors.items()))
    if r.requests_per_s < 0.95 * found.rate_per_s:
        yield f"payorch did not keep up: {r.requests_per_s:.1f} answered a second, {found.rate_per_s:.1f} due"
    if background is not None and background > BUSY_MACHINE_CORES:
        yield f"before the run, other work kept {background:.2f} cores busy: these figures are not clean"


async def main(args: argparse.Namespace) -> None:
    background = await background_cores()
    with tempfile.TemporaryDirectory(prefix="payorch-soak-") as temporary:
        work_dir = Path(temporary)
        progress("starting payorch on a fresh embedded PostgreSQL")
        try:
            found = await soak(work_dir, args)
        finally:
            problems = problems_logged(work_dir / "payorch.log")
    for line in report(found, args, background):
        print(line)
    if problems:
        print(f"payorch logged {len(problems)} warnings or errors (the first on stderr above)")


if __name__ == "__main__":
    trio.run(main, _parse_args(None))
