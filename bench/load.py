"""The load generator: N connections, one worker task each, sending one request after another, or
requests due at a fixed rate.

Run as its own process (`python -m bench.load`), so that it gets a core of its own instead of
competing with the server it measures. It reads one JSON `LoadSpec` on stdin and writes JSON lines
on stdout: `{"phase": "measuring"}` when the measured window opens, then `{"phase": "done", ...}`
with the `LoadResult`.

HTTP/1.1 is spoken with h11 directly (one keep-alive connection per worker, reopened when the server
closes it): a full client such as httpx costs several times more CPU per request, and on a loaded
two-core machine the client's cost would show up in the figures of the server it measures.

Every request of the run is the same (method, path, headers, body) except for `unique_header`, which
gets a value never used before in the run (each session create needs its own Idempotency-Key), and
`unique_in_body`, a mark in the body replaced by such a value (a login's e-mail of its own), and,
when `header_sets` are given, the set of headers it adds: each request takes the next set in turn,
so N sets share the load evenly (one API key per application, for many applications). With
`local_addresses`, connection k binds its side to the k-th address in turn (on Linux every
127.0.0.0/8 address is loopback): the server sees that many clients.

Without `rate_per_s` each connection sends its next request as soon as the last one is answered (the
most the server can take over that many connections). With it, request k is due `k / rate_per_s`
seconds after the start; a connection takes the next request due and sends it when it is due, or at
once when it is already late (all connections were busy), and its latency is counted from when it
was due: a server that falls behind shows in the latency, not only in fewer requests.

A request counts when its response ends inside the measured window; a 2xx response is a success, any
other status or a broken connection an error. A request still unanswered when the window closes
(and, at a rate, one due in the window that no connection was free to send) is `unanswered`: it
counts in `p99_with_unanswered_ms` with the time it had waited by then, a lower bound, so a server
that stops answering shows in that figure and not only in fewer requests. The run is bounded in
time (warm-up + measured window, plus `STRAGGLER_DEADLINE_S` for the requests in flight, after which
they are abandoned, counted in `abandoned`) and in count (`max_requests`: the run ends early once
that many were sent and answered, so `max_requests` = len(`header_sets`) sends one request with
each set).
"""

from __future__ import annotations

import json
import resource
import secrets
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import h11
import trio

# After the measured window, in-flight requests get this long to finish before the run is abandoned.
STRAGGLER_DEADLINE_S = 30.0
RECEIVE_BYTES = 65536
# After a broken connection, wait this long before reconnecting: a dead server is not hammered.
RECONNECT_PAUSE_S = 0.01


@dataclass(frozen=True)
class LoadSpec:
    """One load run: what to send, how hard, and for how long."""

    url: str
    body: str
    headers: dict[str, str] = field(default_factory=dict)
    unique_header: str | None = None
    method: str = "POST"
    connections: int = 32
    warmup_s: float = 2.0
    measured_s: float = 10.0
    max_requests: int = 1_000_000
    header_sets: list[dict[str, str]] = field(default_factory=list)
    rate_per_s: float = 0.0  # 0: as fast as the connections go
    unique_in_body: str | None = None  # a mark in `body` each request replaces with a value of its own
    local_addresses: list[str] = field(default_factory=list)  # connection k binds the k-th in turn


@dataclass(frozen=True)
class LoadResult:
    """What the measured window saw. Latencies are of successful requests only. `measured_s` is the
    window's real length: shorter than asked when the run ended at `max_requests`."""

    successes: int
    errors: dict[str, int]
    measured_s: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    client_cpu_s: float
    capped: bool
    p999_ms: float = float("nan")
    unanswered: int = 0  # in flight (or due, at a rate, and not sent) when the window closed
    p99_with_unanswered_ms: float = float("nan")  # the unanswered counted at their wait so far
    abandoned: int = 0  # still in flight at the straggler deadline, given up


def percentile(sorted_samples: list[float], percent: float) -> float:
    """The nearest-rank percentile: the smallest sample with at least `percent`% of samples at or
    below it. Exact (no interpolation); `sorted_samples` must be sorted and non-empty."""
    rank = int(-(-percent * len(sorted_samples) // 100))  # ceil(percent * n / 100)
    return sorted_samples[max(rank, 1) - 1]


class ConnectionBroken(Exception):
    """The server closed the connection or sent something unparseable mid-response."""


class Http11Connection:
    """One keep-alive HTTP/1.1 connection, reopened on the next request after the server closes it."""

    def __init__(self, host: str, port: int, local_address: str | None = None) -> None:
        self._host = host
        self._port = port
        self._local_address = local_address
        self._stream: trio.SocketStream | None = None
        self._h11 = h11.Connection(h11.CLIENT)

    async def request(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> int:
        """Send one request, read the whole response, and return its status."""
        try:
            if self._stream is None:
                self._stream = await trio.open_tcp_stream(
                    self._host, self._port, local_address=self._local_address
                )
                self._h11 = h11.Connection(h11.CLIENT)
            stream, conn = self._stream, self._h11
            out = conn.send(h11.Request(method=method, target=target, headers=headers))
            out += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
            await stream.send_all(out)
            status = 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(RECEIVE_BYTES))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise ConnectionBroken("closed before the response ended")
        except (h11.ProtocolError, trio.BrokenResourceError, OSError) as error:
            await self.aclose()
            raise ConnectionBroken(type(error).__name__) from error
        except ConnectionBroken:
            await self.aclose()
            raise
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
        else:  # the server said `Connection: close` (hypercorn does after keep_alive_max_requests)
            await self.aclose()
        return status

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.aclose()


@dataclass
class _Tally:
    window_start: float
    window_end: float
    max_requests: int
    interval_s: float  # between two requests' due times; 0 without a rate
    started: float
    sent: int = 0
    latencies_s: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    in_flight: dict[int, float] = field(default_factory=dict)  # request number: when it started

    def take(self) -> tuple[int, float] | None:
        """The next request to send: its number in the run and when it is due (0.0: now), or None
        when the run sends no more."""
        number = self.sent
        due = self.started + number * self.interval_s if self.interval_s else 0.0
        if number >= self.max_requests or max(due, trio.current_time()) >= self.window_end:
            return None
        self.sent += 1
        return number, due

    def unanswered_waits(self, at: float) -> list[float]:
        """How long each request unanswered at `at` had waited by then: those in flight, and at a
        rate those due before `at` that no connection was free to send."""
        waits = [at - started for started in self.in_flight.values() if started <= at]
        if self.interval_s:
            due_by_then = min(int((at - self.started) / self.interval_s) + 1, self.max_requests)
            waits += [at - (self.started + k * self.interval_s) for k in range(self.sent, due_by_then)]
        return waits

    def record(self, started: float, ended: float, outcome: str | None) -> None:
        if not self.window_start <= ended <= self.window_end:
            return
        if outcome is None:
            self.latencies_s.append(ended - started)
        else:
            self.errors[outcome] += 1


async def _worker(spec: LoadSpec, tally: _Tally, number: int, run_id: str) -> None:
    url = urlsplit(spec.url)
    target = url.path + (f"?{url.query}" if url.query else "")
    body = spec.body.encode()
    fixed = [("Host", url.netloc), ("Content-Type", "application/json"), *spec.headers.items()]
    header_sets = [list(headers.items()) for headers in spec.header_sets]
    local_address = spec.local_addresses[number % len(spec.local_addresses)] if spec.local_addresses else None
    connection = Http11Connection(url.hostname or "127.0.0.1", url.port or 80, local_address)
    sequence = 0
    try:
        while (taken := tally.take()) is not None:
            request_number, due = taken
            sequence += 1
            unique = f"bench-{run_id}-{number}-{sequence}"
            if spec.unique_in_body:
                body = spec.body.replace(spec.unique_in_body, unique).encode()
            headers = [*fixed, ("Content-Length", str(len(body)))]
            if header_sets:
                headers = [*headers, *header_sets[request_number % len(header_sets)]]
            if spec.unique_header:
                headers = [*headers, (spec.unique_header, unique)]
            if due:
                await trio.sleep_until(due)
            started = due or trio.current_time()
            tally.in_flight[request_number] = started
            try:
                status = await connection.request(spec.method, target, headers, body)
            except ConnectionBroken as error:
                del tally.in_flight[request_number]
                tally.record(started, trio.current_time(), f"connection: {error}")
                await trio.sleep(RECONNECT_PAUSE_S)
                continue
            del tally.in_flight[request_number]
            tally.record(started, trio.current_time(), None if 200 <= status < 300 else str(status))
    finally:
        with trio.CancelScope(shield=True):
            await connection.aclose()


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_load(spec: LoadSpec, on_measuring: Callable[[], None] | None = None) -> LoadResult:
    """Run `spec` to the end of its measured window (or until `max_requests` were answered) and
    return what the window saw; `on_measuring` is called when the window opens."""
    started = trio.current_time()
    tally = _Tally(
        window_start=started + spec.warmup_s,
        window_end=started + spec.warmup_s + spec.measured_s,
        max_requests=spec.max_requests,
        interval_s=1 / spec.rate_per_s if spec.rate_per_s > 0 else 0.0,
        started=started,
    )
    run_id = secrets.token_hex(4)
    workers_done = trio.Event()

    async def workers() -> None:
        async with trio.open_nursery() as nursery:
            for number in range(spec.connections):
                nursery.start_soon(_worker, spec, tally, number, run_id)
        workers_done.set()

    window_s, client_cpu_s, unanswered = 0.0, 0.0, []
    with trio.move_on_at(tally.window_end + STRAGGLER_DEADLINE_S) as deadline:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(workers)
            with trio.move_on_at(tally.window_start):
                await workers_done.wait()
            cpu_at_window_start = _cpu_s()
            if on_measuring is not None:
                on_measuring()
            with trio.move_on_at(tally.window_end):
                await workers_done.wait()
            window_ended = min(trio.current_time(), tally.window_end)
            window_s = window_ended - tally.window_start
            client_cpu_s = _cpu_s() - cpu_at_window_start
            unanswered = tally.unanswered_waits(window_ended)
            # The workers send nothing more; the nursery waits for their last responses.
    abandoned = len(tally.in_flight) if deadline.cancelled_caught else 0
    latencies = sorted(tally.latencies_s)
    with_unanswered = sorted(latencies + unanswered)
    measured_s = window_s if window_s > 0 else spec.measured_s
    return LoadResult(
        successes=len(latencies),
        errors=dict(tally.errors),
        measured_s=measured_s,
        requests_per_s=len(latencies) / measured_s,
        p50_ms=percentile(latencies, 50) * 1000 if latencies else float("nan"),
        p99_ms=percentile(latencies, 99) * 1000 if latencies else float("nan"),
        p999_ms=percentile(latencies, 99.9) * 1000 if latencies else float("nan"),
        client_cpu_s=client_cpu_s,
        capped=tally.sent >= spec.max_requests,
        unanswered=len(unanswered),
        p99_with_unanswered_ms=percentile(with_unanswered, 99) * 1000 if with_unanswered else float("nan"),
        abandoned=abandoned,
    )


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main() -> None:
    spec = LoadSpec(**json.loads(sys.stdin.read()))
    result = trio.run(run_load, spec, lambda: _emit({"phase": "measuring"}))
    _emit({"phase": "done", **asdict(result)})


if __name__ == "__main__":
    main()
