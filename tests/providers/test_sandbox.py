"""The sandbox adapter: credentials, limits, webhook registration, checkout creation."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
import trio

from payorch.config import ProviderSettings, SandboxSettings, Settings
from payorch.providers.base import (
    CheckoutClosed,
    Credentials,
    CredentialsRejected,
    Limits,
    Provider,
    ProviderError,
    keeps_checkouts_in_database,
)
from payorch.providers.catalogue import ProviderCatalogue
from payorch.providers.sandbox import SandboxProvider
from payorch.providers.stripe.adapter import StripeProvider
from payorch.runtime import enabled_providers
from payorch.storage.database import Connection, Database
from payorch.values.secretbox import SecretBox
from tests.providers.helpers import SANDBOX_KEY, checkout_request, new_checkout


async def _count(conn: Connection, table: str) -> int:
    return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))  # noqa: S608


async def test_sandbox_implements_the_provider_interface(sandbox: SandboxProvider) -> None:
    provider: Provider = sandbox
    assert (provider.name, provider.display_name) == ("sandbox", "Sandbox (test mode)")
    assert provider.payment_methods == {"card", "blik", "apple_pay"}
    assert ProviderCatalogue([provider]).get("sandbox") is sandbox


async def test_only_the_sandbox_keeps_its_checkouts_in_payorchs_database(sandbox: SandboxProvider) -> None:
    stripe = StripeProvider(public_base_url="http://payorch.test")
    kept = [keeps_checkouts_in_database(provider) for provider in (sandbox, stripe, sandbox)]
    assert kept == [True, False, True]


async def test_runtime_offers_the_sandbox_only_when_enabled(
    settings: Settings, db: Database, secrets: SecretBox
) -> None:
    assert "sandbox" in [provider.name for provider in enabled_providers(settings, db, secrets)]
    disabled = settings.model_copy(
        update={"providers": ProviderSettings(sandbox=SandboxSettings(enabled=False))}
    )
    assert "sandbox" not in [provider.name for provider in enabled_providers(disabled, db, secrets)]


# Credentials


@pytest.mark.parametrize("key", ["sk_sandbox_12345678", "sk_sandbox_Abc_def_XYZ_0123456789", SANDBOX_KEY])
async def test_sandbox_key_format_is_accepted(sandbox: SandboxProvider, key: str) -> None:
    await sandbox.validate_credentials(Credentials(api_key=key))


@pytest.mark.parametrize(
    "key",
    [
        "",
        "sk_sandbox_",
        "sk_sandbox_1234567",  # 7 characters after the prefix
        "sk_live_12345678901234",
        "SK_SANDBOX_12345678",
        "sk_sandbox_1234-5678",
        "sk_sandbox_12345678 ",
        "sk_sandbox_12345678\n",
        "sk_sandbox_ąęść12345678",
    ],
)
async def test_malformed_keys_are_rejected(sandbox: SandboxProvider, key: str) -> None:
    with pytest.raises(CredentialsRejected):
        await sandbox.validate_credentials(Credentials(api_key=key))


async def test_calls_with_a_malformed_key_are_rejected(sandbox: SandboxProvider) -> None:
    bad = Credentials(api_key="sk_live_12345678")
    with pytest.raises(CredentialsRejected):
        await sandbox.register_webhook(bad, "http://payorch.test/events")
    with pytest.raises(CredentialsRejected):
        await sandbox.create_checkout(bad, checkout_request(), idempotency_key="k1")


# Limits


@pytest.mark.parametrize(
    ("currency", "method", "limits"),
    [
        ("PLN", "card", Limits(1, 99_999_999)),
        ("USD", "apple_pay", Limits(1, 99_999_999)),
        ("JPY", "card", Limits(1, 999_999)),
        ("KWD", "card", Limits(1, 999_999_999)),
        ("PLN", "blik", Limits(1, 5_000_000)),
    ],
)
async def test_limits_of_accepted_methods(
    sandbox: SandboxProvider, currency: str, method: str, limits: Limits
) -> None:
    assert sandbox.limits(currency, method) == limits


@pytest.mark.parametrize(
    ("currency", "method"), [("EUR", "blik"), ("XYZ", "card"), ("usd", "card"), ("PLN", "paypal")]
)
async def test_limits_are_none_where_not_accepted(
    sandbox: SandboxProvider, currency: str, method: str
) -> None:
    assert sandbox.limits(currency, method) is None


# Webhook endpoints


async def test_register_webhook_returns_an_endpoint_and_keeps_its_secret_sealed(
    sandbox: SandboxProvider, credentials: Credentials, db: Database, secrets: SecretBox
) -> None:
    registration = await sandbox.register_webhook(credentials, "http://payorch.test/events")

    async def stored(conn: Connection) -> tuple[str, str, bytes]:
        row = await conn.fetchrow("SELECT id, account, secret FROM sandbox_webhook_endpoints")
        return row["id"], row["account"], bytes(row["secret"])

    endpoint_id, account, sealed = await db.autocommit(stored)
    assert registration.reference == endpoint_id
    assert endpoint_id.startswith("we_sbx_")
    assert account == hashlib.sha256(SANDBOX_KEY.encode()).hexdigest()
    assert registration.secret.encode() not in sealed
    assert secrets.open(sealed) == registration.secret


async def test_registering_the_same_url_again_keeps_the_endpoint_with_a_new_secret(
    sandbox: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    first = await sandbox.register_webhook(credentials, "http://payorch.test/events")
    second = await sandbox.register_webhook(credentials, "http://payorch.test/events")
    assert second.reference == first.reference
    assert second.secret != first.secret
    assert await db.autocommit(_count, "sandbox_webhook_endpoints") == 1


async def test_each_url_of_an_account_gets_its_own_endpoint(
    sandbox: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    first = await sandbox.register_webhook(credentials, "http://payorch.test/a")
    second = await sandbox.register_webhook(credentials, "http://payorch.test/b")
    assert first.reference != second.reference
    assert await db.autocommit(_count, "sandbox_webhook_endpoints") == 2


# Checkouts


async def test_create_checkout_returns_the_hosted_page_url(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    created = await sandbox.create_checkout(credentials, checkout_request(), idempotency_key="k1")
    assert created.reference.startswith("cs_sbx_")
    assert created.url == f"http://payorch.test/sandbox/checkout/{created.reference}"


async def test_create_checkout_stores_what_the_page_and_events_need(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    request, checkout_id = await new_checkout(
        sandbox, credentials, amount="10.50", currency="EUR", success_url="https://shop.example/ok"
    )
    checkout = await sandbox.checkout(checkout_id)
    assert checkout is not None
    assert (checkout.amount_minor, checkout.currency, checkout.payment_method) == (1050, "EUR", "card")
    assert checkout.client_reference == str(request.session_id)
    assert checkout.application_id == request.application_id
    assert (checkout.order_reference, checkout.customer_email) == ("ORDER-42", "buyer@example.com")
    # The customer comes back through payorch's return route (for the session's first attempt),
    # after a payment and after a decline alike: payorch sends them on to the merchant.
    way_back = f"http://payorch.test/checkout/{request.session_id}/return?attempt=1"
    assert (checkout.success_url, checkout.failure_url) == (way_back, way_back)
    assert checkout.expires_at == request.expires_at
    assert (checkout.status, checkout.expired(sandbox.clock.now())) == ("open", False)


async def test_create_checkout_with_the_same_key_returns_the_same_checkout(
    sandbox: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    request = checkout_request()
    first = await sandbox.create_checkout(credentials, request, idempotency_key="session-1")
    again = await sandbox.create_checkout(credentials, request, idempotency_key="session-1")
    assert again == first
    assert await db.autocommit(_count, "sandbox_checkouts") == 1


async def test_concurrent_creates_with_the_same_key_make_one_checkout(
    sandbox: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    request = checkout_request()
    references: list[str] = []

    async def create() -> None:
        created = await sandbox.create_checkout(credentials, request, idempotency_key="session-1")
        references.append(created.reference)

    async with trio.open_nursery() as nursery:
        for _ in range(6):
            nursery.start_soon(create)
    assert len(references) == 6 and len(set(references)) == 1
    assert await db.autocommit(_count, "sandbox_checkouts") == 1


async def test_the_same_key_in_another_account_makes_another_checkout(
    sandbox: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    request = checkout_request()
    first = await sandbox.create_checkout(credentials, request, idempotency_key="session-1")
    other = Credentials(api_key="sk_sandbox_another_account")
    second = await sandbox.create_checkout(other, request, idempotency_key="session-1")
    assert second.reference != first.reference
    assert await db.autocommit(_count, "sandbox_checkouts") == 2


async def test_reusing_a_key_for_another_session_is_a_provider_error(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    await sandbox.create_checkout(credentials, checkout_request(), idempotency_key="k1")
    with pytest.raises(ProviderError):
        await sandbox.create_checkout(credentials, checkout_request(), idempotency_key="k1")


@pytest.mark.parametrize(
    ("amount", "currency", "method"),
    [("50000.01", "PLN", "blik"), ("10.00", "EUR", "blik"), ("1000000.00", "USD", "card")],
)
async def test_checkout_the_sandbox_does_not_take_is_a_provider_error(
    sandbox: SandboxProvider, credentials: Credentials, amount: str, currency: str, method: str
) -> None:
    request = checkout_request(amount=amount, currency=currency, method=method)
    with pytest.raises(ProviderError):
        await sandbox.create_checkout(credentials, request, idempotency_key="k1")


async def test_a_checkout_past_its_expiry_reads_as_expired(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    _, checkout_id = await new_checkout(sandbox, credentials, expires_in=timedelta(seconds=-1))
    checkout = await sandbox.checkout(checkout_id)
    assert checkout is not None and checkout.expired(sandbox.clock.now())


# Closing a checkout at expiry


async def test_closing_an_open_checkout_makes_it_unpayable(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    _, checkout_id = await new_checkout(sandbox, credentials)
    assert await sandbox.close_checkout(credentials, checkout_id) is CheckoutClosed.CLOSED
    checkout = await sandbox.checkout(checkout_id)
    assert checkout is not None and checkout.expired(sandbox.clock.now())
    assert await sandbox.close_checkout(credentials, checkout_id) is CheckoutClosed.CLOSED


async def test_closing_a_paid_checkout_says_paid_and_leaves_it_paid(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    _, checkout_id = await new_checkout(sandbox, credentials)
    await sandbox.pay(checkout_id, "4242424242424242")
    assert await sandbox.close_checkout(credentials, checkout_id) is CheckoutClosed.PAID
    checkout = await sandbox.checkout(checkout_id)
    assert checkout is not None and checkout.status == "paid" and not checkout.expired(sandbox.clock.now())


async def test_closing_another_accounts_checkout_is_a_provider_error_and_changes_nothing(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    _, checkout_id = await new_checkout(sandbox, credentials)
    with pytest.raises(ProviderError):
        await sandbox.close_checkout(Credentials(api_key="sk_sandbox_someone_else"), checkout_id)
    checkout = await sandbox.checkout(checkout_id)
    assert checkout is not None and not checkout.expired(sandbox.clock.now())
