"""The share of sessions recovered, on the applications page: of the sessions declined at their first
provider (the sandbox) and sent on to the next (Stripe, at its fake) by the recovery policy, those
paid there; the signed-in merchant's own, created in the picture's 30 days."""

from __future__ import annotations

import uuid
from datetime import date, timedelta
from typing import Any

import httpx
import pytest

from payorch.config import Settings
from payorch.http.console.activity import activity_chart
from payorch.http.services import PayorchApp
from payorch.storage.activity import Activity, Recovery
from payorch.storage.database import Database
from tests import fake_stripe as stripe_fake
from tests.console.test_activity import applications_page, made_days_ago, today  # noqa: F401
from tests.fake_stripe import FakeStripe
from tests.helpers import Client, Shop, eventually, put_routing
from tests.providers.api_support import created, record
from tests.providers.test_merchant_routing import _shop, settings, stripe_sender  # noqa: F401
from tests.providers.test_recovery_way_back import (
    DECLINED_CARD,
    FAILURE,
    PAYING_CARD,
    SANDBOX_FIRST,
    SUCCESS,
    _come_back,
    _pay_at_sandbox,
    shop,  # noqa: F401
)

# The Stripe SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
fake_stripe = stripe_fake.fake_stripe


async def _recovering(client: Client, shop: Shop) -> None:  # noqa: F811
    await put_routing(client, shop, {"default": SANDBOX_FIRST, "recovery": {"maxAttempts": 2}})


async def _session(client: Client, shop: Shop) -> dict[str, Any]:  # noqa: F811
    return await created(
        client, shop, f"key-{uuid.uuid4()}", redirectUrls={"success": SUCCESS, "failure": FAILURE}
    )


async def _sent_on(client: Client, shop: Shop, fake: FakeStripe) -> tuple[str, str]:  # noqa: F811
    """A session declined at the sandbox whose customer came back to Stripe's checkout: its id, and
    that checkout's."""
    session = await _session(client, shop)
    await _come_back(client, await _pay_at_sandbox(client, session["checkoutUrl"], DECLINED_CARD))
    (checkout,) = [
        r.answer["id"]
        for r in fake.requests_to("POST", "/v1/checkout/sessions")
        if r.status == 200 and r.answer["client_reference_id"] == session["sessionId"]
    ]
    return session["sessionId"], checkout


async def _recovered(client: Client, shop: Shop, fake: FakeStripe, sender: httpx.AsyncClient) -> str:  # noqa: F811
    """A session declined at the sandbox and paid at Stripe: its id."""
    session_id, checkout = await _sent_on(client, shop, fake)
    # To each endpoint of the Stripe account: the shops of both merchants share one in these tests.
    answers = await fake.deliver(fake.pay(checkout), via=sender)
    assert 200 in {answer.status_code for answer in answers}

    async def paid() -> bool:
        return bool((await record(client, shop, session_id))["status"] == "SUCCEEDED")

    await eventually(paid)
    return session_id


def _recovery_line(html: str) -> str:
    start = html.index('<p id="activity-recovery">') + len('<p id="activity-recovery">')
    return html[start : html.index("</p>", start)]


async def test_the_applications_page_shows_how_many_sessions_sent_on_were_paid_at_the_next_provider(
    app: PayorchApp,
    client: Client,
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
    today: date,  # noqa: F811
) -> None:
    await _recovering(client, shop)
    await _recovered(client, shop, fake_stripe, stripe_sender)
    await _recovered(client, shop, fake_stripe, stripe_sender)
    await _sent_on(client, shop, fake_stripe)  # at Stripe's checkout, not paid (yet)
    paid_first = await _session(client, shop)  # paid at its first provider: no recovery
    await _come_back(client, await _pay_at_sandbox(client, paid_first["checkoutUrl"], PAYING_CARD))
    declined = await _session(client, shop)  # declined, never back through payorch: one attempt
    await _pay_at_sandbox(client, declined["checkoutUrl"], DECLINED_CARD)

    line = _recovery_line(await applications_page(app, shop))
    assert line.startswith("Recovered: 2 of 3 (67%). ")
    window = f"from {today - timedelta(days=29)} to {today} (UTC)"
    assert f"Of the sessions created {window}, 3 were declined at their first provider" in line


async def test_sessions_before_the_window_and_another_merchants_never_count(
    app: PayorchApp,
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
    today: date,  # noqa: F811
) -> None:
    other = await _shop(client, db, settings, stripe_methods=("card",))
    await _recovering(client, other)
    await _recovered(client, other, fake_stripe, stripe_sender)
    await _recovering(client, shop)
    long_ago = await _recovered(client, shop, fake_stripe, stripe_sender)
    await made_days_ago(db, "checkout_sessions", long_ago, 30)

    assert _recovery_line(await applications_page(app, shop)).startswith("No session created from ")
    assert _recovery_line(await applications_page(app, other)).startswith("Recovered: 1 of 1 (100%). ")


def test_the_share_is_rounded_to_a_whole_percent_and_says_one_session_in_the_singular() -> None:
    day = date(2026, 5, 14)
    first = day - timedelta(days=29)
    chart = activity_chart(Activity(sessions=[], refunds=[], recovery=Recovery(3, 1)), first)
    assert chart.recovery_summary.startswith("Recovered: 1 of 3 (33%). ")
    assert chart.recovery_summary.endswith(
        "3 were declined at their first provider and sent on to another; 1 of them was paid there."
    )
    chart = activity_chart(Activity(sessions=[], refunds=[], recovery=Recovery(1, 0)), first)
    assert "1 was declined at their first provider" in chart.recovery_summary
    assert chart.recovery_summary.endswith("0 of them were paid there.")
