"""/docs in a real browser: Swagger UI renders every operation of the OpenAPI document with nothing
from another host, under a Content-Security-Policy that lets in only payorch's own files, and an
operation opens from the keyboard."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from payorch.http.routes import docs
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService

pytestmark = pytest.mark.browser

OPENAPI_PATH = "/api/v1/openapi.json"
METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
OPERATION = ".opblock"
OPERATION_BUTTON = ".opblock-summary-control"


async def _documented_operations(live_service: LiveService) -> list[tuple[str, str]]:
    # The first request builds the document: on a machine busy with other tests that can take longer
    # than httpx's default five seconds.
    async with httpx.AsyncClient(base_url=live_service.base_url, timeout=60) as http:
        document: dict[str, Any] = (await http.get(OPENAPI_PATH)).json()
        # The page runs under this policy; a refused script, style or image would be a console error.
        page = await http.get("/docs")
        assert page.headers["Content-Security-Policy"] == docs.CONTENT_SECURITY_POLICY
    return sorted(
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in METHODS
    )


def _rendered_operations(driver: WebDriver) -> list[tuple[str, str]]:
    operations = []
    for block in driver.find_elements(By.CSS_SELECTOR, OPERATION):
        method = block.find_element(By.CSS_SELECTOR, ".opblock-summary-method").text
        path = block.find_element(By.CSS_SELECTOR, ".opblock-summary-path").get_attribute("data-path")
        operations.append((method.upper(), str(path)))
    return sorted(operations)


async def test_swagger_ui_renders_every_operation_from_payorch_alone(
    runtime: object, browser: Browser, live_service: LiveService
) -> None:
    documented = await _documented_operations(live_service)
    assert len(documented) > 20

    await browser.open(live_service.url("/docs"))
    await browser.wait_for(lambda driver: len(driver.find_elements(By.CSS_SELECTOR, OPERATION)) >= 1)
    assert await browser.run(_rendered_operations) == documented
    assert "payorch" in await browser.run(lambda driver: driver.find_element(By.CSS_SELECTOR, ".title").text)

    loaded: list[str] = await browser.run(
        lambda driver: driver.execute_script(
            "return performance.getEntriesByType('resource').map((entry) => entry.name)"
        )
    )
    assert loaded
    outside = [url for url in loaded if not url.startswith(f"{live_service.base_url}/")]
    assert outside == []
    await check_page(browser, "docs")


async def test_an_operation_of_the_api_reference_opens_from_the_keyboard(
    runtime: object, browser: Browser, live_service: LiveService
) -> None:
    await browser.open(live_service.url("/docs"))
    await browser.wait_for(lambda driver: len(driver.find_elements(By.CSS_SELECTOR, OPERATION)) >= 1)
    first = f"{OPERATION}:first-of-type {OPERATION_BUTTON}"
    await browser.tab_to(first)
    await browser.keys(Keys.ENTER)
    await browser.wait_for(lambda driver: driver.find_elements(By.CSS_SELECTOR, f"{OPERATION}.is-open"))
    await check_page(browser, "docs-operation-open")
