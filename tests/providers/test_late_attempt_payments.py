"""Never paid twice: a provider's event about an attempt that has ended is that attempt's. A late
success of the sandbox's first attempt after Stripe's next attempt opened completes the session
through it; a payment of both attempts leaves the session paid once and refunds the later payment
in full, by payorch itself, whichever attempt was paid later: the ended one, or the one open when
the late success came (Stripe answering its closing with a paid checkout, or its payment event
arriving after a closing that failed)."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from payorch.config import Settings
from payorch.providers.base import CheckoutState, Credentials
from payorch.providers.sandbox import SandboxProvider
from payorch.storage import attempts, sessions
from payorch.storage.database import Connection, Database
from payorch.values.statuses import Outcome
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe
from tests.helpers import Client, Shop, eventually
from tests.http.test_checkout_flow import _deliver, _signed_event
from tests.providers.api_support import events as _events
from tests.providers.api_support import record as _record
from tests.providers.test_merchant_routing import settings, stripe_sender  # noqa: F401
from tests.providers.test_recovery_outcomes import _outcomes
from tests.providers.test_recovery_way_back import (
    DECLINED_CARD,
    _come_back,
    _pay_at_sandbox,
    _session,
    _stripe_checkouts,
    shop,  # noqa: F401
)
from tests.test_metrics import scrape, value

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
fake_stripe = stripe_fake.fake_stripe


async def _recovered(client: Client, shop: Shop) -> dict[str, Any]:  # noqa: F811
    """A session whose sandbox attempt was declined and whose next attempt is open at Stripe."""
    created = await _session(client, shop, {"maxAttempts": 2})
    await _come_back(client, await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD))
    return created


async def _first_checkout(db: Database, session_id: str) -> str:
    (first,) = await db.autocommit(attempts.attempts_of_session, uuid.UUID(session_id))
    return first.provider_reference


async def _sandbox_paid_late(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    session_id: str,
    event_id: str = "evt_sbx_late",
) -> httpx.Response | Any:
    """The sandbox's checkout of the session's first attempt is paid after all (the provider's race
    with its closing) and the sandbox says so: a signed `checkout.paid` for that checkout."""
    checkout_id = await _first_checkout(db, session_id)

    async def paid(conn: Connection) -> None:
        await conn.execute(
            "UPDATE sandbox_checkouts SET status = 'paid', paid_at = now() WHERE id = $1", checkout_id
        )

    await db.autocommit(paid)
    signed = await _signed_event(db, settings, shop, session_id, event_id, checkout_id)
    return await _deliver(client, shop, signed)


async def _succeeded(client: Client, shop: Shop, session_id: str) -> dict[str, Any] | None:  # noqa: F811
    found = await _record(client, shop, session_id)
    return found if found["status"] == "SUCCEEDED" else None


async def _event_types(db: Database, session_id: str) -> list[str]:
    return [event["type"] for event in await _events(db, session_id)]


async def test_a_late_success_of_the_first_attempt_completes_the_session_through_it(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
) -> None:
    created = await _recovered(client, shop)
    answer = await _sandbox_paid_late(client, db, settings, shop, created["sessionId"])
    assert answer.status_code == 200, await answer.get_data(as_text=True)

    record = await _record(client, shop, created["sessionId"])
    assert record["status"] == "SUCCEEDED"
    first, second = record["attempts"]
    assert (first["provider"], first["status"]) == ("sandbox", "SUCCEEDED")
    assert (second["provider"], second["status"]) == ("stripe", "CLOSED")
    assert await _event_types(db, created["sessionId"]) == ["session.completed"]
    (checkout_id,) = _stripe_checkouts(fake_stripe)
    assert fake_stripe.checkout(checkout_id)["status"] == "expired"  # nobody pays it any more


async def test_the_same_late_event_twice_completes_the_session_once(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
) -> None:
    created = await _recovered(client, shop)
    for _ in range(2):
        answer = await _sandbox_paid_late(client, db, settings, shop, created["sessionId"])
        assert answer.status_code == 200
    assert await _event_types(db, created["sessionId"]) == ["session.completed"]


async def _refunds(db: Database, session_id: str) -> list[dict[str, Any]]:
    async def read(conn: Connection) -> list[dict[str, Any]]:
        rows = await conn.fetch(
            """SELECT r.*, a.number AS attempt FROM refunds r
               LEFT JOIN payment_attempts a ON a.refund_id = r.id WHERE r.session_id = $1""",
            uuid.UUID(session_id),
        )
        return [dict(row) for row in rows]

    return await db.autocommit(read)


async def _paid_at_the_second_attempt(
    client: Client,
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> dict[str, Any]:
    """A session declined at the sandbox, recovered at Stripe and paid there: the created body."""
    created = await _recovered(client, shop)
    (checkout_id,) = _stripe_checkouts(fake_stripe)
    (paid,) = await fake_stripe.deliver(fake_stripe.pay(checkout_id), via=stripe_sender)
    assert paid.status_code == 200
    await eventually(lambda: _succeeded(client, shop, created["sessionId"]))
    return created


async def test_both_attempts_paid_refunds_the_later_payment_in_full_once(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    created = await _paid_at_the_second_attempt(client, shop, fake_stripe, stripe_sender)
    for _ in range(2):  # delivered twice: refunded once
        late = await _sandbox_paid_late(client, db, settings, shop, created["sessionId"])
        assert late.status_code == 200

    record = await _record(client, shop, created["sessionId"])
    assert record["status"] == "SUCCEEDED"
    first, second = record["attempts"]
    assert (first["provider"], first["status"]) == ("sandbox", "DUPLICATE_REFUNDED")
    assert (second["provider"], second["status"]) == ("stripe", "SUCCEEDED")
    (refund,) = await _refunds(db, created["sessionId"])
    assert (refund["attempt"], refund["provider_name"], refund["reason"]) == (1, "sandbox", "DUPLICATE")
    session = await db.autocommit(sessions.get_session, uuid.UUID(created["sessionId"]))
    assert session is not None and refund["amount_minor"] == session.amount_minor

    async def verdict() -> list[str] | None:
        types = await _event_types(db, created["sessionId"])
        return types if len(types) == 2 else None

    assert await eventually(verdict) == ["session.completed", "refund.completed"]
    (refunded,) = await _refunds(db, created["sessionId"])
    assert refunded["status"] == "COMPLETED"
    record = await _record(client, shop, created["sessionId"])
    assert record["status"] == "SUCCEEDED"  # the duplicate's refund is not the session's


async def _stripe_refund_settled(fake: FakeStripe, sender: httpx.AsyncClient) -> None:
    """Stripe got payorch's refund and succeeds it: `refund.updated` delivered."""

    async def submitted() -> str | None:
        sent = [r for r in fake.requests_to("POST", "/v1/refunds") if r.status == 200]
        return sent[0].answer["id"] if sent else None

    refund_id = await eventually(submitted)
    (answer,) = await fake.deliver(fake.settle_refund(refund_id), via=sender)
    assert answer.status_code == 200


async def _assert_open_attempt_refunded(
    client: Client,
    db: Database,
    shop: Shop,  # noqa: F811
    session_id: str,
) -> None:
    """The session paid once, through the sandbox's late success; Stripe's attempt, paid too, ended
    DUPLICATE_REFUNDED with one refund of all of it, reason DUPLICATE."""
    record = await _record(client, shop, session_id)
    assert record["status"] == "SUCCEEDED"
    assert [(a["provider"], a["status"]) for a in record["attempts"]] == [
        ("sandbox", "SUCCEEDED"),
        ("stripe", "DUPLICATE_REFUNDED"),
    ]
    (refund,) = await _refunds(db, session_id)
    assert (refund["attempt"], refund["provider_name"], refund["reason"]) == (2, "stripe", "DUPLICATE")
    session = await db.autocommit(sessions.get_session, uuid.UUID(session_id))
    assert session is not None and refund["amount_minor"] == session.amount_minor


async def test_the_open_attempt_paid_before_its_checkout_closed_is_refunded_in_full_once(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    created = await _recovered(client, shop)
    (checkout_id,) = _stripe_checkouts(fake_stripe)
    stripes_event = fake_stripe.pay(checkout_id)  # paid at Stripe; its event not delivered yet

    late = await _sandbox_paid_late(client, db, settings, shop, created["sessionId"])
    assert late.status_code == 200

    await _assert_open_attempt_refunded(client, db, shop, created["sessionId"])
    assert await _outcomes(db, created["sessionId"]) == [
        (1, "sandbox", Outcome.SUCCESS),
        (2, "stripe", Outcome.SUCCESS),  # approved at Stripe too: counted for it
    ]
    (paid,) = await fake_stripe.deliver(stripes_event, via=stripe_sender)  # Stripe's event, late
    assert paid.status_code == 200
    await _assert_open_attempt_refunded(client, db, shop, created["sessionId"])  # refunded once
    await _stripe_refund_settled(fake_stripe, stripe_sender)

    async def verdict() -> list[str] | None:
        types = await _event_types(db, created["sessionId"])
        return types if len(types) == 2 else None

    assert await eventually(verdict) == ["session.completed", "refund.completed"]
    (refunded,) = await _refunds(db, created["sessionId"])
    assert refunded["status"] == "COMPLETED"
    record = await _record(client, shop, created["sessionId"])
    assert record["status"] == "SUCCEEDED"  # the duplicate's refund is not the session's
    _, samples = await scrape(client)
    assert value(samples, "payorch_duplicate_payments_refunded_total") == 1


async def test_a_lost_dispute_of_the_refunded_open_attempts_payment_does_not_reverse_the_session(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    created = await _recovered(client, shop)
    (checkout_id,) = _stripe_checkouts(fake_stripe)
    fake_stripe.pay(checkout_id)
    await _sandbox_paid_late(client, db, settings, shop, created["sessionId"])
    await _assert_open_attempt_refunded(client, db, shop, created["sessionId"])

    disputed = fake_stripe.lose_dispute(fake_stripe.checkout(checkout_id)["payment_intent"])
    (answer,) = await fake_stripe.deliver(disputed, via=stripe_sender)

    assert answer.status_code == 200
    await _assert_open_attempt_refunded(client, db, shop, created["sessionId"])  # not REVERSED
    assert await _event_types(db, created["sessionId"]) == ["session.completed"]


async def test_an_open_attempt_paid_after_its_closing_failed_is_refunded_when_its_event_arrives(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    created = await _recovered(client, shop)
    (checkout_id,) = _stripe_checkouts(fake_stripe)
    fake_stripe.fail_next("POST", f"/v1/checkout/sessions/{checkout_id}/expire", 500, 500, 500)

    late = await _sandbox_paid_late(client, db, settings, shop, created["sessionId"])
    assert late.status_code == 200
    record = await _record(client, shop, created["sessionId"])
    assert [(a["provider"], a["status"]) for a in record["attempts"]] == [
        ("sandbox", "SUCCEEDED"),
        ("stripe", "CLOSED"),
    ]
    assert fake_stripe.checkout(checkout_id)["status"] == "open"  # Stripe could not be asked

    (paid,) = await fake_stripe.deliver(fake_stripe.pay(checkout_id), via=stripe_sender)
    assert paid.status_code == 200
    await _assert_open_attempt_refunded(client, db, shop, created["sessionId"])


async def test_a_payment_still_processing_ends_recovery_at_the_result_page(
    client: Client,
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def processing(self: SandboxProvider, credentials: Credentials, reference: str) -> CheckoutState:
        return CheckoutState(paid=False, processing=True)

    monkeypatch.setattr(SandboxProvider, "checkout_state", processing)
    created = await _session(client, shop, {"maxAttempts": 2})
    where = await _come_back(client, await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD))
    assert urlsplit(where).path == f"/checkout/{created['sessionId']}/result"
    assert urlsplit(where).query == ""
    assert _stripe_checkouts(fake_stripe) == set()
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], len(record["attempts"])) == ("PENDING", 1)
    page = await (await client.get(urlsplit(where).path)).get_data(as_text=True)
    assert "Confirming your payment" in page


async def test_a_refunded_duplicate_payment_is_counted(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    created = await _paid_at_the_second_attempt(client, shop, fake_stripe, stripe_sender)
    for _ in range(2):
        await _sandbox_paid_late(client, db, settings, shop, created["sessionId"])
    _, samples = await scrape(client)
    assert value(samples, "payorch_duplicate_payments_refunded_total") == 1
