"""The browser tests' pytest plugin (tests/conftest.py loads it): fixtures for any test that drives a
real browser at payorch's pages, and a line at the end of every run saying whether such tests ran in
Chromium or were skipped, and why.

    live_service   payorch's app (the test's `runtime`) served by hypercorn on 127.0.0.1 over real HTTP,
                   at `live_service_bind` (a free port unless the test says otherwise)
    browser        the test process's headless Chromium (started at first use, quit at the end),
                   as a `tests.browser.driver.Browser` writing screenshots to `browser_artifacts`
    browser_artifacts   the test's folder for screenshots, `<--browser-artifacts DIR>/<test name>`,
                   or None (no screenshots) without the option

A test that uses `browser` is marked `browser` (`-m "not browser"` leaves them out) and is skipped,
with one reason, where Debian's Chromium or ChromeDriver is not installed.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
import trio

from tests.termination import ended_with_this_process

if TYPE_CHECKING:
    from payorch.runtime import Runtime
    from tests.browser.driver import Browser, LazyChromium

# Chromium's old headless mode, a build of the same engine without the desktop browser around it (the
# package `chromium-headless-shell`): a page load costs it about half the CPU of `chromium --headless`,
# which runs the whole browser without a window. The browser tests use it where it is installed.
# Debian's headless shell, the binary itself: `/usr/bin/chromium-headless-shell` is a shell script
# that runs it without `exec`, so ChromeDriver's quit would end the script and leave the browser.
HEADLESS_SHELL = Path("/usr/lib/chromium/chromium-headless-shell")
FULL_CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
MARKER = "browser"
INSTALL_HINT = (
    "apt-get install chromium chromium-driver chromium-headless-shell, at one version (.ci/run installs them)"
)


def chromium_binary() -> Path:
    """The Chromium the browser tests drive: the headless shell where it is installed, else `chromium`."""
    return HEADLESS_SHELL if HEADLESS_SHELL.exists() else FULL_CHROMIUM


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None when Debian's Chromium and ChromeDriver are in place."""
    missing = [str(path) for path in (chromium_binary(), CHROMEDRIVER) if not path.exists()]
    if missing:
        return f"browser tests skipped: {' and '.join(missing)} not installed; {INSTALL_HINT}"
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--browser-artifacts",
        metavar="DIR",
        default=None,
        help="take the browser tests' screenshots, under DIR/<test name>/ (default: none taken)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: drives headless Chromium (skipped without it)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = missing_browser()
    for item in items:
        if MARKER in getattr(item, "fixturenames", ()):
            item.add_marker(MARKER)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    reports = [
        report
        for reports in terminalreporter.stats.values()
        for report in reports
        if isinstance(report, pytest.TestReport) and MARKER in report.keywords
    ]
    if not reports:
        return
    reason = missing_browser()
    if reason:
        terminalreporter.write_line(reason, yellow=True, bold=True)
        return
    folder = terminalreporter.config.getoption("--browser-artifacts")
    shots = f"screenshots in {folder}" if folder else "no screenshots (--browser-artifacts DIR takes them)"
    passed = sum(1 for report in reports if report.when == "call" and report.passed)
    summary = f"browser tests: {passed} passed in headless {chromium_binary()}; {shots}"
    terminalreporter.write_line(summary, green=True)


@dataclass(frozen=True)
class LiveService:
    """payorch served over HTTP at `base_url` (`http://127.0.0.1:<port>`)."""

    base_url: str

    def url(self, path_or_url: str) -> str:
        """The address of a path here, or of a URL payorch built (checkoutUrl): its path, here. payorch
        under test builds its links from `bind`'s port 0, which the browser cannot reach."""
        parts = urlsplit(path_or_url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        return f"{self.base_url}{path}"


@pytest.fixture
def live_service_bind() -> str:
    """Where `live_service` listens, as hypercorn's `bind` takes it: a free loopback port. A test
    whose pages must link to it (payorch's `public_base_url`) binds a socket first and overrides
    this with `fd://<its file descriptor>`."""
    return "127.0.0.1:0"


@pytest.fixture
async def live_service(runtime: Runtime, live_service_bind: str) -> AsyncIterator[LiveService]:
    """The test's app behind hypercorn on `live_service_bind`, in the test's own trio loop."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = [live_service_bind]
    config.accesslog = None
    config.graceful_timeout = 1.0
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        addresses: list[str] = await nursery.start(
            partial(serve, runtime.app, config, shutdown_trigger=shutdown.wait)
        )
        yield LiveService(base_url=addresses[0])
        shutdown.set()
        nursery.cancel_scope.deadline = trio.current_time() + 2


@pytest.fixture(scope="session")
def chromium() -> Iterator[LazyChromium]:
    """This test process's Chromium: started by the first test that asks, quit when the run ends."""
    from tests.browser.driver import LazyChromium

    lazy = LazyChromium()
    with ended_with_this_process(lazy.kill):
        yield lazy
    lazy.close()


@pytest.fixture
def browser_artifacts(request: pytest.FixtureRequest) -> Path | None:
    """Where the test's screenshots go: `<--browser-artifacts DIR>/<test name>`. Without the option
    no screenshot is taken: each is a full-page render and PNG, most of what Chromium spent in a run,
    for pictures nobody would look at under a temporary directory."""
    chosen = request.config.getoption("--browser-artifacts")
    if chosen is None:
        return None
    return Path(chosen) / re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.nodeid).strip("-")


@pytest.fixture
async def browser(chromium: LazyChromium, browser_artifacts: Path | None) -> AsyncIterator[Browser]:
    """The process's Chromium for this test, on a blank page with no cookies and an empty console."""
    from tests.browser.driver import Browser, forget_everything

    driver = await trio.to_thread.run_sync(chromium.driver)
    await trio.to_thread.run_sync(forget_everything, driver)
    yield Browser(driver=driver, artifacts=browser_artifacts)
    await trio.to_thread.run_sync(forget_everything, driver)
