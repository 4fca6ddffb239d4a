"""The payment-method lookup (section 4.6): the methods an application can take now for a currency
and an amount, with machine-readable warnings when the list is empty or short.

The sandbox takes card and apple_pay in every currency from 1 minor unit to 999,999.99, and blik in
PLN only from 0.01 to 50,000.00.
"""

from __future__ import annotations

from typing import Any

import pytest

from payorch.config import ProviderSettings, SandboxSettings, Settings
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from tests.helpers import (
    Client,
    Merchant,
    Shop,
    link_sandbox,
    new_api_key,
    new_application,
    new_merchant,
    new_shop,
)

PATH = "/api/v1/payment-methods"


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    """An application linked to the sandbox with card and blik, and an API key for it."""
    return await new_shop(client, db, settings)


async def _lookup(client: Client, headers: dict[str, str], query: str) -> Any:
    return await client.get(f"{PATH}?{query}", headers=headers)


async def _methods(client: Client, shop: Shop, currency: str, amount: str) -> dict[str, Any]:
    response = await _lookup(client, shop.headers, f"currency={currency}&amount={amount}")
    assert response.status_code == 200, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    return body


async def _fields(response: Any) -> list[str]:
    return [item["field"] for item in (await response.get_json())["details"]]


# --- Who may ask --------------------------------------------------------------------------------


async def test_lookup_with_an_api_key_answers_for_the_keys_application(client: Client, shop: Shop) -> None:
    response = await _lookup(client, {"X-API-Key": shop.api_key}, "currency=PLN&amount=100.00")
    assert response.status_code == 200
    assert await response.get_json() == {"paymentMethods": ["blik", "card"]}


async def test_lookup_with_the_jwt_and_application_id(client: Client, shop: Shop) -> None:
    response = await _lookup(
        client, shop.merchant.headers, f"currency=PLN&amount=100.00&applicationId={shop.application_id}"
    )
    assert response.status_code == 200
    assert await response.get_json() == {"paymentMethods": ["blik", "card"]}


async def test_lookup_with_the_jwt_without_application_id_is_400(client: Client, shop: Shop) -> None:
    response = await _lookup(client, shop.merchant.headers, "currency=PLN&amount=100.00")
    assert response.status_code == 400
    assert await _fields(response) == ["applicationId"]


async def test_lookup_with_a_malformed_application_id_is_400(client: Client, shop: Shop) -> None:
    response = await _lookup(client, shop.merchant.headers, "currency=PLN&amount=100.00&applicationId=shop")
    assert response.status_code == 400
    assert await _fields(response) == ["applicationId"]


async def test_lookup_for_an_unknown_application_is_404(client: Client, merchant: Merchant) -> None:
    query = "currency=PLN&amount=100.00&applicationId=00000000-0000-4000-8000-000000000000"
    assert (await _lookup(client, merchant.headers, query)).status_code == 404


async def test_lookup_without_credentials_is_401(client: Client) -> None:
    assert (await _lookup(client, {}, "currency=PLN&amount=100.00")).status_code == 401


async def test_lookup_with_an_unknown_api_key_is_401(client: Client) -> None:
    response = await _lookup(client, {"X-API-Key": "sk_" + "0" * 40}, "currency=PLN&amount=100.00")
    assert response.status_code == 401


async def test_lookup_for_another_merchants_application_is_403(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    stranger = await new_merchant(client, db, settings)
    response = await _lookup(
        client, stranger.headers, f"currency=PLN&amount=100.00&applicationId={shop.application_id}"
    )
    assert response.status_code == 403


async def test_api_key_naming_another_application_is_403(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    other = await new_shop(client, db, settings)
    response = await _lookup(
        client, shop.headers, f"currency=PLN&amount=100.00&applicationId={other.application_id}"
    )
    assert response.status_code == 403


async def test_api_key_naming_its_own_application_is_answered(client: Client, shop: Shop) -> None:
    response = await _lookup(
        client, shop.headers, f"currency=PLN&amount=100.00&applicationId={shop.application_id}"
    )
    assert response.status_code == 200
    assert (await response.get_json())["paymentMethods"] == ["blik", "card"]


async def test_api_key_of_a_disabled_application_is_403(client: Client, shop: Shop) -> None:
    disabled = await client.patch(
        f"/api/v1/applications/{shop.application_id}/status",
        json={"isEnabled": False},
        headers=shop.merchant.headers,
    )
    assert disabled.status_code == 200
    assert (await _lookup(client, shop.headers, "currency=PLN&amount=100.00")).status_code == 403


# --- The query ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("amount=100.00", "currency"),
        ("currency=PLN", "amount"),
        ("currency=pln&amount=100.00", "currency"),
        ("currency=PL&amount=100.00", "currency"),
        ("currency=PLNX&amount=100.00", "currency"),
        ("currency=P1N&amount=100.00", "currency"),
        ("currency=&amount=100.00", "currency"),
        ("currency=PLN&amount=", "amount"),
        ("currency=PLN&amount=abc", "amount"),
        ("currency=PLN&amount=-1", "amount"),
        ("currency=PLN&amount=%2B1", "amount"),
        ("currency=PLN&amount=1.", "amount"),
        ("currency=PLN&amount=.5", "amount"),
        ("currency=PLN&amount=1e3", "amount"),
        ("currency=PLN&amount=1,00", "amount"),
        ("currency=PLN&amount=%201", "amount"),
        ("currency=PLN&amount=100.00&limit=5", "limit"),
    ],
)
async def test_missing_or_malformed_query_is_400_naming_the_field(
    client: Client, shop: Shop, query: str, field: str
) -> None:
    response = await _lookup(client, shop.headers, query)
    assert response.status_code == 400
    assert field in await _fields(response)


async def test_unknown_currency_code_is_400(client: Client, shop: Shop) -> None:
    response = await _lookup(client, shop.headers, "currency=ZZZ&amount=100.00")
    assert response.status_code == 400
    assert await _fields(response) == ["currency"]


@pytest.mark.parametrize("currency", ["XXX", "XTS", "XAU", "XPT", "XDR"])
async def test_x_code_that_is_not_a_currency_is_400(client: Client, shop: Shop, currency: str) -> None:
    response = await _lookup(client, shop.headers, f"currency={currency}&amount=100.00")
    assert response.status_code == 400
    assert await _fields(response) == ["currency"]


async def test_x_code_that_is_a_currency_is_looked_up(client: Client, shop: Shop) -> None:
    assert (await _methods(client, shop, "XOF", "5000"))["paymentMethods"] == ["card"]


@pytest.mark.parametrize(("currency", "amount"), [("JPY", "1.5"), ("PLN", "1.001"), ("KWD", "1.0001")])
async def test_more_decimals_than_the_currency_has_is_400(
    client: Client, shop: Shop, currency: str, amount: str
) -> None:
    response = await _lookup(client, shop.headers, f"currency={currency}&amount={amount}")
    assert response.status_code == 400
    assert await _fields(response) == ["amount"]


@pytest.mark.parametrize(("currency", "amount"), [("JPY", "1500"), ("KWD", "1.234"), ("PLN", "100")])
async def test_amount_within_the_currencys_decimals_is_accepted(
    client: Client, shop: Shop, currency: str, amount: str
) -> None:
    assert "card" in (await _methods(client, shop, currency, amount))["paymentMethods"]


async def test_trailing_zeros_beyond_the_currencys_decimals_are_accepted(client: Client, shop: Shop) -> None:
    assert (await _methods(client, shop, "JPY", "1500.00"))["paymentMethods"] == ["card"]


# --- The answer ---------------------------------------------------------------------------------


async def test_pln_within_every_limit_lists_blik_and_card_without_warnings(
    client: Client, shop: Shop
) -> None:
    assert await _methods(client, shop, "PLN", "100.00") == {"paymentMethods": ["blik", "card"]}


async def test_currency_blik_does_not_take_leaves_card_and_warns(client: Client, shop: Shop) -> None:
    assert await _methods(client, shop, "EUR", "100.00") == {
        "paymentMethods": ["card"],
        "warnings": ["CURRENCY_NOT_SUPPORTED"],
    }


async def test_amount_over_the_blik_limit_leaves_card_and_warns(client: Client, shop: Shop) -> None:
    assert await _methods(client, shop, "PLN", "60000.00") == {
        "paymentMethods": ["card"],
        "warnings": ["AMOUNT_OUT_OF_RANGE"],
    }


@pytest.mark.parametrize(
    ("amount", "methods", "warnings"),
    [
        ("0.00", [], ["AMOUNT_OUT_OF_RANGE"]),
        ("0.01", ["blik", "card"], None),
        ("50000.00", ["blik", "card"], None),
        ("50000.01", ["card"], ["AMOUNT_OUT_OF_RANGE"]),
        ("999999.99", ["card"], ["AMOUNT_OUT_OF_RANGE"]),
        ("1000000.00", [], ["AMOUNT_OUT_OF_RANGE"]),
    ],
)
async def test_limits_are_inclusive(
    client: Client, shop: Shop, amount: str, methods: list[str], warnings: list[str] | None
) -> None:
    body = await _methods(client, shop, "PLN", amount)
    assert body["paymentMethods"] == methods
    assert body.get("warnings") == warnings


async def test_every_reason_a_method_is_missing_is_warned_once_in_order(client: Client, shop: Shop) -> None:
    assert await _methods(client, shop, "EUR", "1000000.00") == {
        "paymentMethods": [],
        "warnings": ["AMOUNT_OUT_OF_RANGE", "CURRENCY_NOT_SUPPORTED"],
    }


async def test_application_without_a_provider_gets_no_methods_and_a_warning(
    client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    response = await _lookup(
        client, merchant.headers, f"currency=PLN&amount=100.00&applicationId={application['id']}"
    )
    assert response.status_code == 200
    assert await response.get_json() == {"paymentMethods": [], "warnings": ["NO_ACTIVE_PROVIDER_CONNECTIONS"]}


async def test_api_key_of_an_application_without_a_provider_gets_the_warning(
    client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    response = await _lookup(client, {"X-API-Key": key["key"]}, "currency=PLN&amount=100.00")
    assert await response.get_json() == {"paymentMethods": [], "warnings": ["NO_ACTIVE_PROVIDER_CONNECTIONS"]}


async def test_only_enabled_methods_are_listed(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"], methods=("apple_pay",))
    response = await _lookup(
        client, merchant.headers, f"currency=PLN&amount=100.00&applicationId={application['id']}"
    )
    assert await response.get_json() == {"paymentMethods": ["apple_pay"]}


async def test_methods_removed_from_the_configuration_are_no_longer_listed(
    client: Client, shop: Shop
) -> None:
    response = await client.patch(
        f"/api/v1/applications/{shop.application_id}/providers/sandbox/payment-methods",
        json={"paymentMethods": ["card"]},
        headers=shop.merchant.headers,
    )
    assert response.status_code == 200
    assert await _methods(client, shop, "PLN", "100.00") == {"paymentMethods": ["card"]}


async def test_link_to_a_provider_no_longer_offered_counts_as_no_connection(
    db: Database, settings: Settings
) -> None:
    async with open_runtime(settings, db) as runtime:
        shop = await new_shop(runtime.app.test_client(), db, settings)
    without_sandbox = settings.model_copy(
        update={"providers": ProviderSettings(sandbox=SandboxSettings(enabled=False))}
    )
    async with open_runtime(without_sandbox, db) as runtime:
        response = await _lookup(runtime.app.test_client(), shop.headers, "currency=PLN&amount=100.00")
        assert response.status_code == 200
        body = await response.get_json()
    assert body == {"paymentMethods": [], "warnings": ["NO_ACTIVE_PROVIDER_CONNECTIONS"]}
