"""Sandbox refunds: outcomes after `refund_delay_ms`, the card whose refunds fail, idempotency, refusals."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest

from payorch.providers.base import Credentials, ProviderError, RefundRequest
from payorch.providers.sandbox import SandboxProvider
from payorch.providers.sandbox.adapter import SandboxRefundRefused
from payorch.storage.database import Connection, Database
from payorch.values.money import Money
from tests.providers.helpers import REFUND_DELAY_MS, data_of, events_of, new_checkout


def _refund(checkout_id: str, amount: str = "123.45", currency: str = "PLN") -> RefundRequest:
    return RefundRequest(
        refund_id=uuid.uuid4(),
        session_id=uuid.uuid4(),
        payment_reference=checkout_id,
        amount=Money.from_major(Decimal(amount), currency),
        reason="REQUESTED_BY_CUSTOMER",
    )


async def _paid_checkout(sandbox: SandboxProvider, credentials: Credentials, card: str) -> str:
    _, checkout_id = await new_checkout(sandbox, credentials)  # 123.45 PLN
    paid = await sandbox.pay(checkout_id, card)
    assert paid.status.value == "paid"
    return checkout_id


async def _refund_rows(conn: Connection) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM sandbox_refunds"))


async def test_refund_succeeds_refund_delay_after_submission(
    sandbox: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    checkout_id = await _paid_checkout(sandbox, credentials, "4242424242424242")
    request = _refund(checkout_id, "100.00")
    submitted = await sandbox.submit_refund(credentials, request, idempotency_key="r1")
    assert submitted.reference.startswith("re_sbx_")
    paid, refunded = await events_of(db, checkout_id)
    assert refunded.type == "refund.succeeded"
    assert refunded.refund_id == submitted.reference
    assert refunded.deliver_at - refunded.created_at == timedelta(milliseconds=REFUND_DELAY_MS)
    data = data_of(refunded)
    assert data["refund_id"] == submitted.reference
    assert data["refund_client_reference"] == str(request.refund_id)
    assert data["client_reference"] == data_of(paid)["client_reference"]
    assert (data["amount"], data["currency"]) == (10000, "PLN")
    assert "failure_code" not in data


async def test_every_refund_of_the_lost_or_stolen_card_fails(
    sandbox: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    checkout_id = await _paid_checkout(sandbox, credentials, "4000000000005126")
    await sandbox.submit_refund(credentials, _refund(checkout_id, "23.45"), idempotency_key="r1")
    await sandbox.submit_refund(credentials, _refund(checkout_id, "100.00"), idempotency_key="r2")
    refunds = (await events_of(db, checkout_id))[1:]
    assert [event.type for event in refunds] == ["refund.failed", "refund.failed"]
    assert {data_of(event)["failure_code"] for event in refunds} == {"lost_or_stolen_card"}


async def test_failed_refunds_do_not_use_up_the_refundable_amount(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    checkout_id = await _paid_checkout(sandbox, credentials, "4000000000005126")
    await sandbox.submit_refund(credentials, _refund(checkout_id), idempotency_key="r1")
    await sandbox.submit_refund(credentials, _refund(checkout_id), idempotency_key="r2")


async def test_refund_with_the_same_key_refunds_once(
    sandbox: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    checkout_id = await _paid_checkout(sandbox, credentials, "4242424242424242")
    request = _refund(checkout_id, "10.00")
    first = await sandbox.submit_refund(credentials, request, idempotency_key="r1")
    again = await sandbox.submit_refund(credentials, request, idempotency_key="r1")
    assert again == first
    assert await db.autocommit(_refund_rows) == 1
    assert len(await events_of(db, checkout_id)) == 2  # paid, one refund


async def test_reusing_a_refund_key_for_another_refund_is_refused(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    checkout_id = await _paid_checkout(sandbox, credentials, "4242424242424242")
    await sandbox.submit_refund(credentials, _refund(checkout_id, "10.00"), idempotency_key="r1")
    with pytest.raises(SandboxRefundRefused):
        await sandbox.submit_refund(credentials, _refund(checkout_id, "10.00"), idempotency_key="r1")


async def test_refunds_beyond_the_amount_paid_are_refused(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    checkout_id = await _paid_checkout(sandbox, credentials, "4242424242424242")
    await sandbox.submit_refund(credentials, _refund(checkout_id, "100.00"), idempotency_key="r1")
    with pytest.raises(SandboxRefundRefused, match="exceed"):
        await sandbox.submit_refund(credentials, _refund(checkout_id, "23.46"), idempotency_key="r2")
    await sandbox.submit_refund(credentials, _refund(checkout_id, "23.45"), idempotency_key="r3")


async def test_refund_of_an_unpaid_checkout_is_refused_as_a_provider_error(
    sandbox: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    _, checkout_id = await new_checkout(sandbox, credentials)
    with pytest.raises(ProviderError, match="not paid"):
        await sandbox.submit_refund(credentials, _refund(checkout_id), idempotency_key="r1")
    assert await db.autocommit(_refund_rows) == 0


async def test_refund_of_another_account_s_checkout_is_refused(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    checkout_id = await _paid_checkout(sandbox, credentials, "4242424242424242")
    other = Credentials(api_key="sk_sandbox_another_account")
    with pytest.raises(SandboxRefundRefused, match="no checkout"):
        await sandbox.submit_refund(other, _refund(checkout_id), idempotency_key="r1")


async def test_refund_in_another_currency_is_refused(
    sandbox: SandboxProvider, credentials: Credentials
) -> None:
    checkout_id = await _paid_checkout(sandbox, credentials, "4242424242424242")
    with pytest.raises(SandboxRefundRefused):
        await sandbox.submit_refund(credentials, _refund(checkout_id, "1.00", "EUR"), idempotency_key="r1")
