"""The console's routing page shows, per provider, the routing document's fee beside the fee
reconciliation observed, and which one objective net weighs."""

from __future__ import annotations

import re
from html import unescape

import pytest

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage.database import Database
from tests.clock import ShiftedClock
from tests.console.helpers import page, signed_in_browser, submit
from tests.helpers import Client, Shop, new_shop, put_routing
from tests.reconciliation.test_observed_fees import settings as observed_settings
from tests.reconciliation.test_sandbox_runs import paid_session, reconcile, today

settings = observed_settings  # the sandbox settles the day it is paid, card fees 2% + 1.00


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def fees_row(html: str, provider: str) -> str:
    """The text of the provider's row of the fees table."""
    found = re.search(rf'<tr id="fees-{provider}">(.*?)</tr>', html, re.S)
    assert found, html
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


async def test_a_provider_without_a_run_shows_none_observed_yet(app: PayorchApp, shop: Shop) -> None:
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await page(console, f"/console/applications/{shop.application_id}/routing")
    assert response.status_code == 200
    assert fees_row(html, "sandbox") == "sandbox none given none observed yet none: no fee"


async def test_the_observed_fee_shows_beside_the_documents_after_a_run(
    app: PayorchApp, client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop)
    await paid_session(client, shop)
    await reconcile(client, shop, today(clock))
    console, _ = await signed_in_browser(app, shop.merchant.email)
    path = f"/console/applications/{shop.application_id}/routing"
    _, html = await page(console, path)
    assert fees_row(html, "sandbox") == (
        "sandbox none given Card PLN: 3.0000% (2 payments) the observed, per payment method and currency"
    )
    await put_routing(client, shop, {"fees": {"sandbox": {"percent": "1.5"}}, "objective": "net"})
    _, html = await page(console, path)
    assert fees_row(html, "sandbox") == "sandbox 1.5% Card PLN: 3.0000% (2 payments) the document's"


async def test_a_session_tried_on_the_page_names_the_fee_its_score_weighed(
    app: PayorchApp, client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop)
    await reconcile(client, shop, today(clock))
    await put_routing(client, shop, {"objective": "net"})
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    path = f"/console/applications/{shop.application_id}/routing/evaluate"
    form = {"csrf_token": csrf, "paymentMethod": "card", "amount": "100.00", "currency": "PLN"}
    response, html = await submit(console, path, {**form, "billingCountry": ""})
    assert response.status_code == 200
    found = re.search(r'<td class="ranked-fee">(.*?)</td>', html, re.S)
    assert found
    assert " ".join(unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split()) == "3.0000% observed"
