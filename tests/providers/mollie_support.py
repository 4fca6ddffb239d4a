"""Building blocks for the Mollie tests: settings at the fake, linking through payorch's own app, and
the payment payorch made (sessions and refunds: `api_support`)."""

from __future__ import annotations

from typing import Any

from payorch.config import MollieSettings, ProviderSettings, Settings, StripeSettings
from payorch.storage.database import Database
from tests.fake_mollie import FakeMollie
from tests.helpers import Client, Merchant, Shop, new_api_key, new_application, new_merchant

MOLLIE_KEY = "test_dHar4XY7LxsDOtmnkVtjNVWXLSlXsM"
# Mollie refuses a webhookUrl it cannot reach (localhost, loopback): payorch's public address.
PUBLIC_BASE_URL = "https://payorch.example"


def mollie_settings(
    settings: Settings, fake_mollie: FakeMollie, *, stripe_api_base: str | None = None
) -> Settings:
    """Mollie enabled at the fake (and Stripe at its fake, when given); the sandbox stays enabled."""
    providers = ProviderSettings(
        mollie=MollieSettings(enabled=True, api_base=fake_mollie.url, timeout_s=5),
        stripe=StripeSettings(enabled=stripe_api_base is not None, api_base=stripe_api_base or ""),
    )
    server = settings.server.model_copy(update={"public_base_url": PUBLIC_BASE_URL})
    return settings.model_copy(update={"providers": providers, "server": server})


async def link(
    client: Client,
    merchant: Merchant,
    application_id: str,
    name: str = "mollie",
    api_key: str = MOLLIE_KEY,
    methods: tuple[str, ...] = ("card", "blik", "apple_pay"),
) -> Any:
    return await client.post(
        f"/api/v1/applications/{application_id}/providers",
        json={"name": name, "paymentMethods": list(methods), "credentials": {"apiKey": api_key}},
        headers=merchant.headers,
    )


async def new_linked_shop(
    client: Client, db: Database, settings: Settings, *providers: tuple[str, str]
) -> Shop:
    """A merchant's application linked to each (provider, key) given, and an API key for it."""
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    for name, key in providers:
        linked = await link(client, merchant, application["id"], name=name, api_key=key)
        assert linked.status_code == 201, await linked.get_data(as_text=True)
    key = await new_api_key(client, merchant, application["id"])
    return Shop(merchant=merchant, application_id=application["id"], api_key=key["key"])


def payment_of(fake: FakeMollie, session_id: str) -> str:
    """The Mollie payment payorch created for the session."""
    (sent,) = [
        r
        for r in fake.requests_to("POST", "/v2/payments")
        if r.status == 201 and r.json and r.json["metadata"]["payorch_session_id"] == session_id
    ]
    payment_id: str = sent.answer["id"]
    return payment_id
