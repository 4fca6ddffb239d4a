"""Headless Chromium from Debian's packages, driven by selenium through /usr/bin/chromedriver (nothing
is downloaded), and what a browser test asks of a page: a screenshot, its console errors, form fields
without a label, what runs past the page's column, and filling a field with the keyboard alone.

selenium blocks: a test calls the browser through `Browser`'s async methods, which run each call in a
worker thread, so the trio loop keeps serving the pages meanwhile."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import trio
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.plugin import CHROMEDRIVER, HEADLESS_SHELL, chromium_binary

T = TypeVar("T")

# As Chromium must run here: as root, with no GPU, and without reaching for any outside host.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1024",
)
WAIT_S = 10.0
MAX_TABS = 100

# Each input, select and textarea a person fills in, and whether something names it for a screen reader.
_UNLABELLED_FIELDS = """
return Array.from(document.querySelectorAll("input, select, textarea"))
  .filter((field) => !["hidden", "submit", "button", "reset", "image"].includes(field.type))
  .filter((field) => {
    const byFor = field.id && document.querySelector(`label[for="${CSS.escape(field.id)}"]`);
    const wrapped = field.closest("label");
    const named = (field.getAttribute("aria-label") || "").trim();
    const byRef = (field.getAttribute("aria-labelledby") || "").split(/\\s+/)
      .some((id) => id && document.getElementById(id));
    return !(byFor || wrapped || named || byRef);
  })
  .map((field) => field.outerHTML.slice(0, 200));
"""

# Each visible element of the page's main column whose right edge runs past the column's: a table
# too wide for it, a word that does not break. Inside a scrolling box (`.table-scroll`) nothing runs
# past: the box clips it, and only the box itself is measured.
_RUNNING_PAST = """
const main = document.querySelector("main");
if (main === null) {
  return [];
}
const edge = main.getBoundingClientRect().right + 1;
return Array.from(main.querySelectorAll("*"))
  .filter((element) => element.parentElement.closest(".table-scroll") === null)
  .filter((element) => element.getClientRects().length > 0 && element.getBoundingClientRect().right > edge)
  .map((element) => element.outerHTML.slice(0, 200));
"""


def start_chromium(user_data_dir: Path) -> WebDriver:
    options = webdriver.ChromeOptions()
    binary = chromium_binary()
    options.binary_location = str(binary)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    # The headless shell finds no page to drive in a profile named for it (ChromeDriver then fails to
    # start a session); it keeps to the temporary profile ChromeDriver makes and removes for it.
    if binary != HEADLESS_SHELL:
        options.add_argument(f"--user-data-dir={user_data_dir}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # ChromeDriver and the Chromium it starts in a process group of their own, which a test
    # process ended by a signal takes down with it (`LazyChromium.kill`).
    service = Service(executable_path=str(CHROMEDRIVER), popen_kw={"start_new_session": True})
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    return driver


class LazyChromium:
    """One Chromium per test process, started when a test first needs it, quit at the session's end."""

    def __init__(self) -> None:
        self._driver: WebDriver | None = None
        self._profile: tempfile.TemporaryDirectory[str] | None = None

    def driver(self) -> WebDriver:
        if self._driver is None:
            self._profile = tempfile.TemporaryDirectory(prefix="payorch-chromium-")
            self._driver = start_chromium(Path(self._profile.name))
        return self._driver

    def kill(self) -> None:
        """Kill ChromeDriver and its Chromium at once (their process group), for a test process
        about to end without its session's teardown."""
        if self._driver is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._driver.service.process.pid, signal.SIGKILL)

    def close(self) -> None:
        if self._driver is not None:
            self._driver.quit()
            self._driver = None
        if self._profile is not None:
            self._profile.cleanup()
            self._profile = None


@dataclass
class Browser:
    """The worker's Chromium, for one test: screenshots go to `artifacts` (none are taken without)."""

    driver: WebDriver
    artifacts: Path | None

    async def run(self, script: Callable[[WebDriver], T]) -> T:
        """`script(driver)` in a worker thread: anything selenium can do."""
        return await trio.to_thread.run_sync(script, self.driver)

    async def open(self, url: str) -> None:
        await self.run(lambda driver: driver.get(url))

    async def title(self) -> str:
        return await self.run(lambda driver: driver.title)

    async def heading(self) -> str:
        return await self.run(lambda driver: driver.find_element(By.TAG_NAME, "h1").text)

    async def text(self) -> str:
        return await self.run(lambda driver: driver.find_element(By.TAG_NAME, "body").text)

    async def current_url(self) -> str:
        return await self.run(lambda driver: driver.current_url)

    async def wait_for(self, condition: Callable[[WebDriver], Any], timeout_s: float = WAIT_S) -> Any:
        """What `condition(driver)` returns once it is truthy; fails after `timeout_s`."""
        return await self.run(lambda driver: WebDriverWait(driver, timeout_s).until(condition))

    async def screenshot(self, name: str) -> Path | None:
        """A PNG of the whole page as it is now, as `artifacts/<name>.png`; None without `artifacts`."""
        if self.artifacts is None:
            return None
        path = self.artifacts / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)}.png"
        path.parent.mkdir(parents=True, exist_ok=True)

        def take(driver: WebDriver) -> None:
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1280, max(1024, min(int(height) + 150, 8000)))
            try:
                assert driver.save_screenshot(str(path)), path
            finally:
                driver.set_window_size(1280, 1024)

        await self.run(take)
        return path

    async def console_errors(self) -> list[str]:
        """The console's errors (SEVERE) since the last call: failed loads, script errors, CSP refusals."""
        entries: list[dict[str, Any]] = await self.run(lambda driver: driver.get_log("browser"))
        return [entry["message"] for entry in entries if entry.get("level") == "SEVERE"]

    async def unlabelled_fields(self) -> list[str]:
        """Form fields on the page that neither a label nor an aria attribute names."""
        found: list[str] = await self.run(lambda driver: driver.execute_script(_UNLABELLED_FIELDS))
        return found

    async def running_past_the_column(self) -> list[str]:
        """Elements of the page's main column that run past its right edge (outside a scrolling box)."""
        found: list[str] = await self.run(lambda driver: driver.execute_script(_RUNNING_PAST))
        return found

    async def tab_to(self, css: str) -> None:
        """From nothing focused, press Tab until the element `css` selects has the focus."""

        def tab(driver: WebDriver) -> None:
            found = driver.find_elements(By.CSS_SELECTOR, css)
            if not found:
                raise AssertionError(f"no {css} on the page: {page_summary(driver)}")
            target = found[0]
            driver.execute_script("document.activeElement && document.activeElement.blur()")
            for _ in range(MAX_TABS):
                ActionChains(driver).send_keys(Keys.TAB).perform()
                if driver.switch_to.active_element == target:
                    return
            raise AssertionError(f"Tab never reaches {css}")

        await self.run(tab)

    async def keys(self, *keys: str) -> None:
        """Type `keys` into whatever has the focus, as a person at the keyboard does."""
        await self.run(lambda driver: ActionChains(driver).send_keys(*keys).perform())

    async def fill_with_keyboard(self, css: str, text: str) -> None:
        """Tab to the field, type `text`, press Enter: no mouse, no script setting a value."""
        await self.tab_to(css)
        await self.keys(text, Keys.ENTER)


def page_summary(driver: WebDriver) -> str:
    """Where the browser is and what it shows, for a failure's message: the URL, the title and the
    start of the page's text."""
    text = " ".join(driver.find_element(By.TAG_NAME, "body").text.split())
    return f"{driver.current_url} ({driver.title!r}) reads {text[:600]!r}"


def forget_everything(driver: WebDriver) -> None:
    """Leave the page and drop every cookie and the console log, for the next test. (WebDriver's own
    `delete_all_cookies` drops only the current page's: about:blank has none, while the last test's
    session cookie for 127.0.0.1 would still be sent to the next test's port.)"""
    driver.get("about:blank")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.get_log("browser")
