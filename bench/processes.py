"""Servers the benchmark runs apart from itself, each a process with processes of its own (payorch's
workers, hypercorn's): started with their output in a log file, always stopped when their block ends
(SIGTERM, then SIGKILL for whatever of the tree is left), and what they cost: the CPU of the whole
tree, the memory of each process that serves.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]
import trio

from bench.measure import progress

# After SIGTERM: a drain bounded by the server's graceful timeout (10 s by default), and a margin.
STOP_TIMEOUT_S = 30.0
# A start on a fresh embedded PostgreSQL, on a loaded two-core machine.
READY_TIMEOUT_S = 120.0
POLL_S = 0.2
LOG_TAIL_LINES = 20


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 now: bound on port 0, then closed, for a server that binds it
    itself (another program could take it in between, which the server's start would then say)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass(frozen=True)
class ProcessTree:
    """A process and every process it started, except those named in `apart` (the embedded
    PostgreSQL, which the benchmark counts on its own)."""

    root: psutil.Process
    apart: tuple[str, ...] = ()

    def processes(self) -> list[psutil.Process]:
        try:
            descendants = self.root.children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [self.root, *(process for process in descendants if _name(process) not in self.apart)]

    def cpu_s(self) -> float:
        """CPU seconds the tree has spent so far: those of each of its processes, and of the children
        each has waited for (a worker that exited and was started again)."""
        total = 0.0
        for process in self.processes():
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:  # gone since listed: its parent counts it once it waits for it
                continue
            total += times.user + times.system + times.children_user + times.children_system
        return total

    def serving(self, port: int) -> list[psutil.Process]:
        """The processes that serve `port`: those of the tree that hold its listening socket, less
        a parent that only hands it to its workers."""
        holders = [process for process in self.processes() if _listens(process, port)]
        workers = [process for process in holders if process.pid != self.root.pid]
        return workers or holders


def _name(process: psutil.Process) -> str:
    try:
        name: str = process.name()
    except psutil.Error:
        return ""
    return name


def _listens(process: psutil.Process, port: int) -> bool:
    try:
        connections = process.net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections)


def rss_bytes_of(process: psutil.Process) -> int:
    """`process`'s resident memory now, 0 once it is gone."""
    try:
        rss: int = process.memory_info().rss
    except psutil.Error:
        return 0
    return rss


def log_tail(log_path: Path) -> str:
    lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
    return "\n".join(lines[-LOG_TAIL_LINES:])


@asynccontextmanager
async def running_process(
    command: list[str], log_path: Path, env: dict[str, str], *, apart: tuple[str, ...] = ()
) -> AsyncIterator[tuple[trio.Process, ProcessTree]]:
    """`command` running with `env`, its stdout and stderr appended to `log_path`, until the block
    ends, however it ends: then stopped with every process it started (`stop_tree`). The process,
    and its tree less the processes named in `apart`."""
    with log_path.open("ab") as log:
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
        )
    try:
        yield process, ProcessTree(psutil.Process(process.pid), apart)
    finally:
        with trio.CancelScope(shield=True):
            await stop_tree(process)


async def stop_tree(process: trio.Process) -> None:
    """SIGTERM to `process` (it stops its own workers), SIGKILL when it still runs STOP_TIMEOUT_S
    later; then SIGKILL to any process it started that outlived it by as long."""
    try:
        descendants = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    if process.returncode is None:
        process.terminate()
    with trio.move_on_after(STOP_TIMEOUT_S):
        await process.wait()
    if process.returncode is None:
        progress(f"process {process.pid} still runs {STOP_TIMEOUT_S:g} s after SIGTERM: killed")
        for leftover in descendants:
            _kill(leftover)
        process.kill()
        await process.wait()
    await poll_until(lambda: not any(alive(leftover) for leftover in descendants), STOP_TIMEOUT_S)
    for leftover in descendants:
        if alive(leftover):
            progress(f"process {leftover.pid}, started by {process.pid}, outlived it: killed")
            _kill(leftover)


async def stop(process: psutil.Process, signum: int) -> None:
    """`signum` to `process`, which is not ours to wait for; SIGKILL when it still runs
    STOP_TIMEOUT_S later."""
    try:
        process.send_signal(signum)
    except psutil.Error:
        return
    if not await poll_until(lambda: not alive(process), STOP_TIMEOUT_S):
        progress(f"process {process.pid} still runs {STOP_TIMEOUT_S:g} s after signal {signum}: killed")
        _kill(process)


def alive(process: psutil.Process) -> bool:
    """Whether `process` still runs (a zombie waiting for its parent does not)."""
    try:
        running: bool = process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
    return running


def _kill(process: psutil.Process) -> None:
    with suppress(psutil.Error):
        process.kill()


async def poll_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Whether `condition()` comes to hold within `timeout_s`, checked every POLL_S: what it asks
    about (a process that is not this one's child) has no event to wait on."""
    deadline = trio.current_time() + timeout_s
    while not condition():
        if trio.current_time() >= deadline:
            return False
        await trio.sleep(POLL_S)
    return True


async def wait_until_serving(
    url: str, process: trio.Process, log_path: Path, ready: Callable[[], bool] = lambda: True
) -> None:
    """Return once `url` answers 200 and `ready()` holds; raise when `process` exits first, with the
    end of its log, or when READY_TIMEOUT_S pass."""
    async with httpx.AsyncClient(timeout=5) as http:
        with trio.fail_after(READY_TIMEOUT_S):
            while True:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"{process.args!r} exited with status {process.returncode} before it served; "
                        f"the end of its output:\n{log_tail(log_path)}"
                    )
                try:
                    answered = (await http.get(url)).status_code == 200
                except httpx.TransportError:
                    answered = False
                if answered and ready():
                    return
                await trio.sleep(POLL_S)
