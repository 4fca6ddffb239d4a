"""What every browser test checks on each page it visits, beyond its own behaviour: a screenshot for
people to look at, a label on every form field, and a console without errors."""

from __future__ import annotations

from tests.browser.driver import Browser


async def check_page(browser: Browser, name: str) -> None:
    """Screenshot the page as `name`, then: every form field is labelled, the console has no error."""
    await browser.screenshot(name)
    unlabelled = await browser.unlabelled_fields()
    assert unlabelled == [], f"{name}: form fields without a label: {unlabelled}"
    errors = await browser.console_errors()
    assert errors == [], f"{name}: errors in the browser's console: {errors}"
