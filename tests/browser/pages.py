"""What every browser test checks on each page it visits, beyond its own behaviour: a label on every
form field, nothing running past the page's column, and a console without errors; and, when the run
asks for them (`--browser-artifacts DIR`), a screenshot for people to look at."""

from __future__ import annotations

from tests.browser.driver import Browser


async def check_page(browser: Browser, name: str, *, status: int | None = None) -> None:
    """Screenshot the page as `name` (with `--browser-artifacts`), then: every form field is
    labelled, nothing runs past the page's column (a wide table scrolls inside it), the console has
    no error. A page answered with an error `status` (a refused form, a 404) has the one line
    Chromium logs for it, and nothing else."""
    await browser.screenshot(name)
    unlabelled = await browser.unlabelled_fields()
    assert unlabelled == [], f"{name}: form fields without a label: {unlabelled}"
    running_past = await browser.running_past_the_column()
    assert running_past == [], f"{name}: running past the page's column: {running_past}"
    errors = await browser.console_errors()
    if status is not None:
        url = await browser.current_url()
        own = f"{url} - Failed to load resource: the server responded with a status of {status}"
        assert [error for error in errors if error.startswith(own)] != [], (name, errors)
        errors = [error for error in errors if not error.startswith(own)]
    assert errors == [], f"{name}: errors in the browser's console: {errors}"
