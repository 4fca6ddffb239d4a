"""No process outlives the test run: every process the run starts (test workers, `payorch serve`,
PostgreSQL, webhook receivers, Chromium and ChromeDriver, load generators) inherits a mark in its
environment, `PYTEST_PAYORCH_RUN` (not `PAYORCH_...`: payorch reads those as its settings), and once
the run is over (its workers gone) the first pytest process looks for processes still carrying its
mark. It waits a little for those already ending, then fails the run naming each one left, and ends
them, so that one run's leftovers do not slow the next.

A process that clears its environment loses the mark; the browser's and the servers' do not.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import psutil  # type: ignore[import-untyped]
import pytest

MARK = "PYTEST_PAYORCH_RUN"
GRACE_S = 10.0  # for processes whose end is under way (a browser closing its renderers)
POLL_S = 0.2


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the first process: its workers inherit the mark
        os.environ[MARK] = uuid.uuid4().hex


def _marked(mark: str) -> list[psutil.Process]:
    """The processes but this one whose environment carries `mark`."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get(MARK) == mark:
                found.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def _left(mark: str) -> list[psutil.Process]:
    """The marked processes still alive after `GRACE_S` at most."""
    deadline = time.monotonic() + GRACE_S
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return left


def _describe(process: psutil.Process) -> str:
    try:
        return f"{process.pid}: {' '.join(process.cmdline())[:160]}"
    except psutil.Error:
        return str(process.pid)


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> Iterator[None]:
    yield  # the workers, and every fixture's teardown, are done
    mark = os.environ.get(MARK)
    if mark is None or hasattr(session.config, "workerinput"):
        return
    left = _left(mark)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} process(es) the test run started outlived it (now ended):"]
    lines += [f"  {_describe(process)}" for process in left]
    for process in left:
        try:
            process.kill()
        except psutil.Error:
            continue
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
