"""`payorch serve --workers N`: one parent process and N worker processes on one node's cores.

The parent does what must happen once: it starts the embedded PostgreSQL when `database.url` is
empty (and keeps it up until every worker is gone: pgserver stops it when the parent exits), runs
the migrations, checks that N pools fit in PostgreSQL's `max_connections`, and binds `server.bind`.
Then it starts N workers, `python -m payorch serve` each, handing them the sockets bound for them (and,
for the embedded server, its URL in `PAYORCH_DATABASE__URL`). Each worker is a whole payorch node
as a lone `payorch serve` is: its own node identity, actors, supervisors and pool. On Linux each
worker listens on a socket of its own, the kernel sharing new connections out among them
(`Listeners`).

    parent          signals, restarts; serves nothing itself
    ├── worker 1    service.serve_until_signalled on the parent's sockets
    └── worker N

The parent:

- starts a worker that exits again after a pause that doubles from RESTART_FIRST_S up to
  RESTART_MAX_S (back to the first after a run of RESTART_RESET_S), and logs its pid and exit
  status; the others keep serving. Only during the start is an exit fatal: a worker that exits
  before its first run was ready stops them all, and the parent exits 1, as a lone process does;
- passes SIGHUP to every worker (each reloads as a lone process does; a worker still starting gets
  it once it is ready);
- on SIGTERM or SIGINT, passes SIGTERM to every worker, waits for each to drain and exit (one still
  running `server.graceful_timeout_s` + STOP_MARGIN_S later is killed), and exits 0 when every one
  exited 0.

A worker tells the parent it is ready over a socket pair, the parent's end of which it keeps
reading: when the parent is gone, however it went, the read ends and the worker shuts down as on
SIGTERM. With one worker, `payorch serve` runs the service in its own process as it always did.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, MutableMapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.utils import repr_socket_addr

from payorch.config import MAX_WORKERS, Settings
from payorch.config_checks import bind_refusal
from payorch.http import server as http_server
from payorch.logs import tag_worker
from payorch.storage.database import database_url, open_database
from payorch.storage.migrations import migrate
from payorch.storage.server_limits import connection_slots

if TYPE_CHECKING:
    from payorch.service import RunningService

log = logging.getLogger("payorch.workers")

# The environment variable that tells `payorch serve` it is a worker, and what it was handed.
ASSIGNMENT_VARIABLE = "PAYORCH_WORKER"
READY = b"ready"
RESTART_FIRST_S = 0.5
RESTART_MAX_S = 30.0
RESTART_RESET_S = 60.0
# A worker's drain is bounded by its own `server.graceful_timeout_s`; past it by this much, it is killed.
STOP_MARGIN_S = 30.0
# How a worker that stopped as it was told exits: 0, or ended by SIGTERM (or, from a terminal, SIGINT)
# before it could handle it, as it was still starting.
CLEAN_STOPS = (0, -signal.SIGTERM, -signal.SIGINT)
# The connections a node opens beside its pool: one, which holds its node identity's lock and
# LISTENs for application changes and for the outbox (`storage.nodes`).
CONNECTIONS_BESIDE_POOL = 1


def worker_count(workers: int | Literal["auto"]) -> int:
    """The number of worker processes `server.workers` (or `--workers`) asks for: "auto" is the
    number of cores this process may run on, at most MAX_WORKERS."""
    if workers != "auto":
        return workers
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    return min(cores, MAX_WORKERS)


def connections_per_worker(settings: Settings) -> int:
    """The most connections to PostgreSQL one worker (one node) opens."""
    return settings.database.pool_max + CONNECTIONS_BESIDE_POOL


# The worker's side


@dataclass(frozen=True)
class WorkerAssignment:
    """What the parent hands a worker: its number (from 1), the file descriptors of the sockets bound
    for it, and that of its end of the socket pair to the parent."""

    number: int
    listener_fds: list[int]
    parent_fd: int

    def to_text(self) -> str:
        return json.dumps({"number": self.number, "listeners": self.listener_fds, "parent": self.parent_fd})


def worker_assignment(environ: MutableMapping[str, str] = os.environ) -> WorkerAssignment | None:
    """The assignment of this process when `payorch serve --workers N` started it as a worker; None
    when it was not. Taken out of `environ`, so that nothing this process starts inherits it."""
    text = environ.pop(ASSIGNMENT_VARIABLE, None)
    if text is None:
        return None
    data = json.loads(text)
    return WorkerAssignment(
        number=int(data["number"]),
        listener_fds=[int(fd) for fd in data["listeners"]],
        parent_fd=int(data["parent"]),
    )


async def serve_as_worker(
    settings: Settings, reload_settings: Callable[[], Settings], assignment: WorkerAssignment
) -> None:
    """Serve as worker `assignment.number` on the sockets the parent bound for it, as `payorch serve`
    serves alone (SIGTERM/SIGINT drain and stop it, SIGHUP reloads), every log line naming the
    worker. It stops as on SIGTERM when the parent is gone. (The service is imported here, by the
    workers alone: the parent, which serves nothing, starts in about half the CPU without it.)"""
    from payorch.service import serve_until_signalled

    tag_worker(assignment.number)
    for fd in (*assignment.listener_fds, assignment.parent_fd):
        os.set_inheritable(fd, False)  # for this process only
    listeners = [socket.socket(fileno=fd) for fd in assignment.listener_fds]
    with trio.socket.from_stdlib_socket(socket.socket(fileno=assignment.parent_fd)) as parent:
        async with trio.open_nursery() as nursery:

            async def serve(
                task_status: trio.TaskStatus[RunningService] = trio.TASK_STATUS_IGNORED,
            ) -> None:
                await serve_until_signalled(
                    settings, reload_settings, sockets=listeners, task_status=task_status
                )
                nursery.cancel_scope.cancel()

            await nursery.start(serve)
            try:
                await parent.send(READY)
                while await parent.recv(64):  # the parent sends nothing: this ends when it is gone
                    pass
            except OSError:
                pass
            log.warning("the parent process is gone: shutting down")
            # The one way this process shuts down, drain included, is on a signal.
            os.kill(os.getpid(), signal.SIGTERM)


# The parent's side


async def serve_workers(settings: Settings, config_path: Path, count: int) -> int:
    """Run `count` workers on the configuration at `config_path` until SIGTERM or SIGINT, then stop
    them gracefully; the exit status of the parent: 0 when every worker stopped cleanly, 1 when one
    did not (or one failed to start), 2 when `count` pools do not fit in PostgreSQL's connections."""
    # From the start: a signal that comes while the parent starts is handled once the workers run.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        return await _serve_workers(settings, config_path, count, signals)


async def _serve_workers(
    settings: Settings, config_path: Path, count: int, signals: AsyncIterator[int]
) -> int:
    url = await database_url(settings)
    async with open_database(url, min_size=1, max_size=1) as db:
        applied = await migrate(db)
        if applied:
            log.info("migrations applied", extra={"migrations": applied})
        slots = await db.autocommit(connection_slots)
    needed = count * connections_per_worker(settings)
    if needed > slots.available:
        log.error(
            "server.workers: the workers' pools do not fit in PostgreSQL's max_connections: lower "
            "server.workers or database.pool_max, or raise max_connections",
            extra={
                "key": "server.workers",
                "workers": count,
                "poolMax": settings.database.pool_max,
                "connectionsNeeded": needed,
                "maxConnections": slots.max_connections,
                "reservedConnections": slots.reserved,
            },
        )
        return 2
    config = HypercornConfig()
    config.bind = [settings.server.bind]
    listeners = Listeners(config, count)
    environment = dict(os.environ)
    if not settings.database.url:
        environment["PAYORCH_DATABASE__URL"] = url  # the embedded server's (no password in it)
    command = [sys.executable, "-m", "payorch", "serve", "--config", str(config_path)]
    try:
        workers = Workers(count, command, environment, listeners, settings.server.graceful_timeout_s)
        return await workers.run(signals)
    finally:
        listeners.close()


class Listeners:
    """The listening sockets of the workers, for `server.bind`.

    On Linux, for a TCP address, each worker listens on a socket of its own, every one bound to the
    address with SO_REUSEPORT: the kernel shares new connections out among them, evenly by a hash of
    each connection's addresses. (One socket that every worker accepts from gives each connection to
    whichever worker accepts first: a client's burst of keep-alive connections went 30 to 2 between
    two workers, docs/benchmarks.md.) A worker's socket is closed as soon as the worker exits, so
    that no connection waits on a socket nobody accepts from (those it had queued are reset, as a
    dead worker's own are), and a new one is bound for its next start. Before the first is bound the
    address is bound once without SO_REUSEPORT, so that an address in use by anyone fails the start
    as it does for a lone process, instead of sharing its connections with another server.

    Elsewhere (another system, a `unix:` or `fd://` address, or one worker) every worker accepts from
    the one socket bound at the start, as the kernel offers nothing better.

    The parent only binds: a worker's socket listens once the worker serves (`http.server.serve`),
    so that no connection waits on a worker that is still starting while others serve."""

    def __init__(self, config: HypercornConfig, count: int) -> None:
        self._config = config
        self._own: dict[int, list[socket.socket]] | None = None
        self._shared: list[socket.socket] = []
        if count < 2 or not _shares_out(config.bind[0]):
            self._shared = http_server.bound_sockets(config)
            return
        self._own = {}
        refusal = bind_refusal(config.bind[0])  # without SO_REUSEPORT: in use by anyone, it fails
        if refusal is not None:
            raise refusal
        config.workers = count  # hypercorn's sockets for more than one worker: SO_REUSEPORT
        try:
            for number in range(1, count + 1):
                self._own[number] = self._bind()
        except BaseException:
            self.close()
            raise

    def _bind(self) -> list[socket.socket]:
        sockets = http_server.bound_sockets(self._config)
        if self._config.bind[0].rsplit(":", 1)[-1] == "0":  # the port the first got, for every other
            self._config.bind = [repr_socket_addr(sock.family, sock.getsockname()) for sock in sockets]
        return sockets

    def of(self, number: int) -> list[socket.socket]:
        """The sockets worker `number` listens on, bound now if its last ones were closed: OSError
        when they cannot be."""
        if self._own is None:
            return self._shared
        if number not in self._own:
            self._own[number] = self._bind()
        return self._own[number]

    def exited(self, number: int) -> None:
        """Worker `number` exited: close the sockets it had of its own."""
        if self._own is not None:
            for sock in self._own.pop(number, []):
                sock.close()

    def addresses(self) -> list[str]:
        """The addresses served, as URLs."""
        sockets = self._shared if self._own is None else next(iter(self._own.values()), [])
        return [f"http://{repr_socket_addr(sock.family, sock.getsockname())}" for sock in sockets]

    def close(self) -> None:
        for sock in self._shared:
            sock.close()
        for number in list(self._own or ()):
            self.exited(number)


def _shares_out(bind: str) -> bool:
    """Whether the kernel can share out the connections to `bind` among sockets of their own."""
    tcp = not bind.startswith(("unix:", "fd://"))
    return tcp and sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT")


class Workers:
    """The worker processes of one parent, kept running until SIGTERM or SIGINT."""

    def __init__(
        self,
        count: int,
        command: list[str],
        environment: dict[str, str],
        listeners: Listeners,
        graceful_timeout_s: float,
    ) -> None:
        self._count = count
        self._command = command
        self._environment = environment
        self._listeners = listeners
        self._graceful_timeout_s = graceful_timeout_s
        self._starting: dict[int, trio.Process] = {}  # by worker number: started, not yet ready
        self._serving: dict[int, trio.Process] = {}  # ready
        self._reload_when_ready: set[int] = set()  # starting when a SIGHUP came
        self._all_served = False
        self._stopping = False
        self._unclean_stops: dict[int, int] = {}  # worker number: exit status, when not in CLEAN_STOPS
        self._start_failed = False
        self._scope = trio.CancelScope()

    async def run(self, signals: AsyncIterator[int]) -> int:
        """Start every worker and keep them running until `signals` brings SIGTERM or SIGINT; then
        stop them (see the module's docstring). The parent's exit status."""
        with self._scope:
            async with trio.open_nursery() as nursery:
                for number in range(1, self._count + 1):
                    nursery.start_soon(self._keep_running, number)
                async for signum in signals:
                    if signum == signal.SIGHUP:
                        log.info("reloading the configuration: SIGHUP passed to every worker")
                        self._pass_reload()
                        continue
                    log.info(
                        "shutting down: SIGTERM passed to every worker",
                        extra={"signal": signal.Signals(signum).name},
                    )
                    self._stop()
        if self._start_failed:
            return 1
        if self._unclean_stops:
            log.error("stopped, not every worker cleanly", extra={"exitStatuses": self._unclean_stops})
            return 1
        log.info("stopped", extra={"workers": self._count})
        return 0

    def _stop(self) -> None:
        """Stop every worker: cancelling each worker's `run_process` passes it SIGTERM (`_drain`)."""
        self._stopping = True
        self._scope.cancel()

    def _pass_reload(self) -> None:
        for process in self._serving.values():
            process.send_signal(signal.SIGHUP)
        # Before it is ready a worker may not handle SIGHUP yet (the default action ends it), and
        # may have read the configuration before it changed: it reloads once ready.
        self._reload_when_ready |= set(self._starting)

    async def _keep_running(self, number: int) -> None:
        """Run worker `number`, and again after each exit, until the workers stop."""
        pause = RESTART_FIRST_S
        first = True
        while True:
            began = trio.current_time()
            try:
                listeners = self._listeners.of(number)
            except OSError as error:
                log.error(
                    "cannot listen for a worker; trying again",
                    extra={"worker": number, "error": str(error), "restartInS": pause},
                )
                await trio.sleep(pause)
                pause = min(pause * 2, RESTART_MAX_S)
                continue
            try:
                pid, status, ready = await self._run_once(number, listeners)
            finally:
                self._listeners.exited(number)
            if self._stopping:  # it exited as the others were told to stop: no restart, no failure
                return
            if first and not ready:
                log.error(
                    "worker exited before it was ready: payorch does not start",
                    extra={"worker": number, "pid": pid, **_exit_fields(status)},
                )
                self._start_failed = True
                self._stop()
                return
            first = False
            if trio.current_time() - began >= RESTART_RESET_S:
                pause = RESTART_FIRST_S
            log.log(
                logging.WARNING if status == 0 else logging.ERROR,
                "worker exited; starting it again",
                extra={"worker": number, "pid": pid, **_exit_fields(status), "restartInS": pause},
            )
            await trio.sleep(pause)
            pause = min(pause * 2, RESTART_MAX_S)

    async def _run_once(self, number: int, listeners: list[socket.socket]) -> tuple[int, int, bool]:
        """Start worker `number` and wait for it to exit: its pid, its exit status and whether it
        was ready. Cancelled (the workers stopping), it drains the worker first (`_drain`)."""
        ours, theirs = trio.socket.socketpair()
        process: trio.Process | None = None
        ready = False
        try:
            with ours:
                async with trio.open_nursery() as nursery:
                    with theirs:
                        assignment = WorkerAssignment(
                            number, [listener.fileno() for listener in listeners], theirs.fileno()
                        )
                        process = await nursery.start(
                            partial(
                                trio.run_process,
                                self._command,
                                stdin=subprocess.DEVNULL,
                                check=False,
                                env={**self._environment, ASSIGNMENT_VARIABLE: assignment.to_text()},
                                pass_fds=(*assignment.listener_fds, assignment.parent_fd),
                                deliver_cancel=partial(self._drain, number),
                            )
                        )
                    assert process is not None
                    self._starting[number] = process
                    log.info("worker started", extra={"worker": number, "pid": process.pid})
                    ready = await _reported_ready(ours)
                    if ready:
                        self._ready(number, process)
                    # The nursery waits here for the worker to exit.
            assert process is not None and process.returncode is not None
            return process.pid, process.returncode, ready
        finally:
            self._starting.pop(number, None)
            self._serving.pop(number, None)
            self._reload_when_ready.discard(number)
            if self._stopping and process is not None and process.returncode not in CLEAN_STOPS:
                self._unclean_stops[number] = process.returncode if process.returncode is not None else -1

    def _ready(self, number: int, process: trio.Process) -> None:
        del self._starting[number]
        self._serving[number] = process
        log.info("worker serving", extra={"worker": number, "pid": process.pid})
        if number in self._reload_when_ready:
            self._reload_when_ready.discard(number)
            process.send_signal(signal.SIGHUP)
        if not self._all_served and len(self._serving) == self._count:
            self._all_served = True
            addresses = self._listeners.addresses()
            log.info("every worker serves", extra={"workers": self._count, "addresses": addresses})

    async def _drain(self, number: int, process: trio.Process) -> None:
        """Stop worker `number` as the workers stop: SIGTERM, which it drains on; SIGKILL when it
        still runs STOP_MARGIN_S after its graceful timeout."""
        process.send_signal(signal.SIGTERM)
        await trio.sleep(self._graceful_timeout_s + STOP_MARGIN_S)
        log.error(
            "worker still running long after its graceful timeout: killed",
            extra={"worker": number, "pid": process.pid},
        )
        process.kill()


async def _reported_ready(ours: trio.socket.SocketType) -> bool:
    """Whether the worker at the other end of `ours` reports it is ready (it sends READY) before it
    exits (its end closes)."""
    try:
        return bool(await ours.recv(len(READY)))
    except OSError:
        return False


def _exit_fields(status: int) -> dict[str, Any]:
    """A worker's exit status for the log: `exitStatus`, and `signal` when a signal ended it."""
    if status < 0:
        return {"exitStatus": status, "signal": signal.Signals(-status).name}
    return {"exitStatus": status}
