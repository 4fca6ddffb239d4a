"""Building blocks for the PayU tests: one POS at the fake, settings at the fake, linking through
payorch's own app, and the order payorch placed (sessions and refunds: `api_support`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from payorch.config import MollieSettings, PayuSettings, ProviderSettings, Settings
from payorch.runtime import Runtime
from payorch.storage.database import Database
from tests.fake_payu import ORDERS, FakePayu
from tests.helpers import Client, Merchant, Shop, new_api_key, new_application, new_merchant

POS_ID = "300746"
CLIENT_SECRET = "2ee86a66e5d97e3fadc400c9f19b065d"
SECOND_KEY = "b6ca15b0d1020e8094d9b5f8d163db54"
CREDENTIALS = {
    "posId": POS_ID,
    "clientId": POS_ID,
    "clientSecret": CLIENT_SECRET,
    "secondKey": SECOND_KEY,
    "environment": "sandbox",
}
# PayU calls a notifyUrl it can reach: payorch's public address.
PUBLIC_BASE_URL = "https://payorch.example"


def payu_settings(settings: Settings, fake: FakePayu, *, mollie_api_base: str | None = None) -> Settings:
    """PayU enabled at the fake (and Mollie at its fake, when given); the sandbox stays enabled."""
    providers = ProviderSettings(
        payu=PayuSettings(enabled=True, api_base=fake.url, timeout_s=5),
        mollie=MollieSettings(
            enabled=mollie_api_base is not None, api_base=mollie_api_base or "", timeout_s=5
        ),
    )
    server = settings.server.model_copy(update={"public_base_url": PUBLIC_BASE_URL})
    return settings.model_copy(update={"providers": providers, "server": server})


@pytest.fixture(name="settings")
def settings_with_payu(settings: Settings, fake_payu: FakePayu) -> Settings:
    """The test's settings with PayU at the fake, which accepts the one POS of `CREDENTIALS`."""
    fake_payu.accept_pos(POS_ID, POS_ID, CLIENT_SECRET, SECOND_KEY)
    return payu_settings(settings, fake_payu)


@pytest.fixture(name="shop")
async def payu_shop(client: Client, db: Database, settings: Settings) -> Shop:
    """A merchant's application linked to PayU only, and an API key for it."""
    return await new_payu_shop(client, db, settings)


@pytest.fixture
async def payu_caller(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """How the fake PayU reaches payorch's provider-events route: HTTP into the app itself."""
    transport = httpx.ASGITransport(app=runtime.app)  # type: ignore[arg-type]  # ASGI typing differs
    async with httpx.AsyncClient(transport=transport) as client:
        yield client


async def link_payu(
    client: Client,
    merchant: Merchant,
    application_id: str,
    methods: tuple[str, ...] = ("blik", "card", "pay_by_link"),
    **change: Any,
) -> Any:
    credentials = {key: value for key, value in {**CREDENTIALS, **change}.items() if value is not None}
    return await client.post(
        f"/api/v1/applications/{application_id}/providers",
        json={"name": "payu", "paymentMethods": list(methods), "credentials": credentials},
        headers=merchant.headers,
    )


async def new_payu_shop(client: Client, db: Database, settings: Settings) -> Shop:
    """A merchant's application linked to PayU only, and an API key for it."""
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    linked = await link_payu(client, merchant, application["id"])
    assert linked.status_code == 201, await linked.get_data(as_text=True)
    key = await new_api_key(client, merchant, application["id"])
    return Shop(merchant=merchant, application_id=application["id"], api_key=key["key"])


def order_of(fake: FakePayu, session_id: str) -> dict[str, Any]:
    """The PayU order placed for the session and answered (its latest, after a lost answer)."""
    placed = [
        r
        for r in fake.requests_to("POST", ORDERS)
        if r.status == 302 and r.json and r.json["extOrderId"].startswith(session_id)
    ]
    return fake.order(placed[-1].answer["orderId"])
