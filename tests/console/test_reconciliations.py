"""The console's reconciliation page of an application: its runs and each provider's totals, a
form that starts a run through the API's operation (refused with the API's problems, starting
nothing), each run's page with its discrepancies first and what to do about each, and the API's
CSV as a download."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage.database import Database
from tests.clock import ShiftedClock
from tests.console.helpers import page, signed_in_browser, submit
from tests.helpers import Client, Shop, eventually, new_shop
from tests.reconciliation.test_observed_fees import settings as observed_settings
from tests.reconciliation.test_sandbox_runs import paid_session, reconcile, today

settings = observed_settings  # the sandbox settles the day it is paid, card fees 2% + 1.00


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def text(html: str) -> str:
    """The page's text, its markup and runs of white space removed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def runs_path(shop: Shop) -> str:
    return f"/console/applications/{shop.application_id}/reconciliations"


async def api_runs(client: Client, shop: Shop) -> list[dict[str, Any]]:
    response = await client.get(
        f"/api/v1/applications/{shop.application_id}/reconciliations", headers=shop.merchant.headers
    )
    items: list[dict[str, Any]] = (await response.get_json())["items"]
    return items


async def test_the_page_shows_the_runs_and_each_providers_totals_per_currency(
    app: PayorchApp, client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop)
    await paid_session(client, shop)
    run = await reconcile(client, shop, today(clock))
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await page(console, runs_path(shop))
    assert response.status_code == 200
    day = today(clock)
    assert f"sandbox {day} to {day} PLN 2 200.00 6.00 194.00" in text(html)
    assert f"/reconciliations/{run['id']}" in html
    assert f"sandbox {day} to {day} Completed 0" in text(html)


async def test_the_application_pages_link_the_reconciliation_page(app: PayorchApp, shop: Shop) -> None:
    console, _ = await signed_in_browser(app, shop.merchant.email)
    _, html = await page(console, f"/console/applications/{shop.application_id}")
    assert f'href="{runs_path(shop)}"' in html


async def test_the_form_starts_a_run_and_leads_to_its_page(
    app: PayorchApp, client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop)
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    day = today(clock)
    response, _ = await submit(
        console, runs_path(shop), {"csrf_token": csrf, "provider": "sandbox", "from": day, "to": day}
    )
    assert response.status_code == 303
    [run] = await api_runs(client, shop)
    assert response.headers["Location"] == f"{runs_path(shop)}/{run['id']}?done=started"

    async def completed() -> str | None:
        _, html = await page(console, response.headers["Location"])
        return html if 'id="run-status" class="run-completed"' in html else None

    html = await eventually(completed)
    assert "Started: the run goes on in the background" in html
    assert "None: every item matched, or is expected." in html


async def refused_start(app: PayorchApp, client: Client, shop: Shop, first: str, last: str) -> str:
    """Submit the form over `first` to `last`: refused (400), with nothing started; its page."""
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    fields = {"csrf_token": csrf, "provider": "sandbox", "from": first, "to": last}
    response, html = await submit(console, runs_path(shop), fields)
    assert response.status_code == 400
    assert await api_runs(client, shop) == []
    return html


async def test_a_day_that_is_no_day_is_refused_beside_its_field_and_starts_nothing(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    html = await refused_start(app, client, shop, "2026-13-01", "2026-11-02")
    assert '<p class="error" id="from-error">is not a day (YYYY-MM-DD)</p>' in html
    assert 'value="2026-13-01"' in html  # the form keeps what was typed


async def test_a_period_the_api_refuses_shows_its_problem_and_starts_nothing(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    html = await refused_start(app, client, shop, "2026-11-02", "2026-11-01")
    assert '<p class="error" id="to-error">must not be before from</p>' in html


async def test_the_form_without_its_csrf_token_is_refused_and_starts_nothing(
    app: PayorchApp, client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    console, _ = await signed_in_browser(app, shop.merchant.email)
    day = today(clock)
    response, _ = await submit(console, runs_path(shop), {"provider": "sandbox", "from": day, "to": day})
    assert response.status_code == 403
    assert await api_runs(client, shop) == []


async def test_a_runs_page_shows_its_discrepancies_first_with_what_to_do(
    app: PayorchApp, client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    short = await paid_session(client, shop, "4000000000000077")  # settled 1% short
    await paid_session(client, shop)
    run = await reconcile(client, shop, today(clock))
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await page(console, f"{runs_path(shop)}/{run['id']}")
    assert response.status_code == 200
    shown = text(html)
    assert shown.index("Discrepancies Amount mismatch : 1") < shown.index("Items by outcome")
    assert "What to do: Ask the provider why it settled another amount" in shown
    section = html[html.index('id="outcome-amount_mismatch"') : html.index('id="counts"')]
    assert f"/console/sessions/{short}" in section
    assert "99.00 PLN" in text(section) and "100.00 PLN" in text(section)


async def test_the_csv_download_is_the_apis_csv(
    app: PayorchApp, client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop, "4000000000000077")
    await paid_session(client, shop)
    run = await reconcile(client, shop, today(clock))
    api_path = f"/api/v1/applications/{shop.application_id}/reconciliations/{run['id']}"
    console, _ = await signed_in_browser(app, shop.merchant.email)
    for query in ("", "?outcome=AMOUNT_MISMATCH"):
        downloaded, body = await page(console, f"{runs_path(shop)}/{run['id']}/items.csv{query}")
        assert downloaded.status_code == 200
        assert downloaded.headers["Content-Type"] == "text/csv; charset=utf-8"
        assert downloaded.headers["Content-Disposition"].startswith('attachment; filename="reconciliation-')
        answer = await client.get(
            f"{api_path}{query}", headers={**shop.merchant.headers, "Accept": "text/csv"}
        )
        assert body == await answer.get_data(as_text=True)
    assert len(body.strip().splitlines()) == 2  # the header and the one mismatch


async def test_a_csv_of_an_unknown_outcome_is_400(
    app: PayorchApp, client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    run = await reconcile(client, shop, today(clock))
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, _ = await page(console, f"{runs_path(shop)}/{run['id']}/items.csv?outcome=LOST")
    assert response.status_code == 400


async def test_another_merchants_run_is_not_found(
    app: PayorchApp, client: Client, db: Database, shop: Shop, settings: Settings, clock: ShiftedClock
) -> None:
    run = await reconcile(client, shop, today(clock))
    other = await new_shop(client, db, settings)
    console, _ = await signed_in_browser(app, other.merchant.email)
    for path in (f"{runs_path(shop)}/{run['id']}", f"{runs_path(shop)}/{run['id']}/items.csv"):
        response, _ = await page(console, path)
        assert response.status_code == 404
