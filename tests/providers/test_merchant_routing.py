"""Routing between two providers, the sandbox and Stripe (at its fake, tests/fake_stripe.py): a
priority rule sends its sessions to the provider it names, a split assigns each session by weight,
every session says why it went where it did, the evaluate call shows the decision without creating
anything or calling a provider, and dynamic routing moves sessions to the provider whose payments
succeed once it has learned their outcomes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from payorch.config import ProviderSettings, Settings, StripeSettings
from payorch.engine.routing.document import SessionFacts, SplitRoute, split_order
from payorch.runtime import Runtime
from payorch.storage.database import Connection, Database
from payorch.values.money import Money
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe
from tests.helpers import (
    Client,
    Shop,
    create_session,
    eventually,
    link_sandbox,
    new_api_key,
    new_application,
    new_merchant,
    post_json,
    prefer,
    put_routing,
    session_body,
)
from tests.providers.api_support import created, record
from tests.providers.mollie_support import link

# The Stripe SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

fake_stripe = stripe_fake.fake_stripe
STRIPE_KEY = "sk_test_51ShopKey0123456789abcdef"
PL_ADDRESS = {"line1": "ul. Prosta 1", "city": "Warszawa", "postalCode": "00-001", "country": "PL"}


@pytest.fixture
def settings(settings: Settings, fake_stripe: FakeStripe) -> Settings:
    """Stripe enabled, its API at the fake; the sandbox stays enabled too. Success rates are read
    again before every batch of creates, so a session routes on every outcome recorded before it."""
    fake_stripe.accept_key(STRIPE_KEY)
    return settings.model_copy(
        update={
            "providers": ProviderSettings(stripe=StripeSettings(enabled=True, api_base=fake_stripe.url)),
            "routing": settings.routing.model_copy(update={"refresh_s": 0.0}),
        }
    )


@pytest.fixture
async def stripe_sender(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """How the fake Stripe reaches payorch's provider-events route: HTTP into the app itself."""
    transport = httpx.ASGITransport(app=runtime.app)  # type: ignore[arg-type]  # ASGI typing differs
    async with httpx.AsyncClient(transport=transport) as client:
        yield client


async def _shop(
    client: Client, db: Database, settings: Settings, stripe_methods: tuple[str, ...] = ("card", "blik")
) -> Shop:
    """A merchant's application linked to Stripe (for `stripe_methods`) and to the sandbox."""
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    linked = await link(client, merchant, application["id"], "stripe", STRIPE_KEY, stripe_methods)
    assert linked.status_code == 201, await linked.get_data(as_text=True)
    await link_sandbox(client, merchant, application["id"])
    key = await new_api_key(client, merchant, application["id"])
    return Shop(merchant=merchant, application_id=application["id"], api_key=key["key"])


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await _shop(client, db, settings)


def _stripe_creations(fake: FakeStripe) -> list[int]:
    return [r.status for r in fake.requests_to("POST", "/v1/checkout/sessions")]


def _explained(session: dict[str, Any]) -> tuple[Any, ...]:
    routing = session["routing"]
    return routing["selectedProvider"], routing["rule"], routing["reason"], routing["version"]


async def test_a_priority_rule_sends_the_sessions_it_matches_to_the_provider_it_names(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    rule = {
        "name": "polish-cards",
        "when": {"paymentMethods": ["card"], "countries": ["PL"]},
        "route": {"type": "priority", "providers": ["stripe", "sandbox"]},
    }
    assert (await put_routing(client, shop, {"rules": [rule]}))["version"] == 1
    # No billing country: the rule does not match, and the default dynamic route ranks the two
    # providers equal before any outcome, so by name.
    elsewhere = await created(client, shop, "no-address")
    assert _explained(elsewhere) == ("sandbox", None, "dynamic", 1)
    polish = await created(client, shop, "polish", customer={"email": "a@b.pl", "billingAddress": PL_ADDRESS})
    assert _explained(polish) == ("stripe", "polish-cards", "rule", 1)
    assert _stripe_creations(fake_stripe) == [200]
    stored = await record(client, shop, polish["sessionId"])
    assert stored["providerName"] == "stripe"
    assert stored["routing"] == polish["routing"] | {"score": Decimal(str(polish["routing"]["score"]))}


async def test_a_split_assigns_each_session_by_weight_drawn_from_its_id(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    await put_routing(client, shop, {"default": {"type": "split", "weights": {"stripe": 70, "sandbox": 30}}})
    route = SplitRoute((("stripe", 70), ("sandbox", 30)))
    assigned = []
    for number in range(12):
        session = await created(client, shop, f"split-{number}")
        facts = SessionFacts("card", Money(10_000, "PLN"), None, session["sessionId"])
        expected = split_order(route, {"stripe", "sandbox"}, facts)[0]
        assert _explained(session) == (expected, None, "split", 1)
        assigned.append(expected)
    assert len(_stripe_creations(fake_stripe)) == assigned.count("stripe")


async def test_a_checkout_created_by_a_later_provider_of_the_order_is_explained_as_a_cascade(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    await prefer(client, shop, "stripe", "sandbox")
    fake_stripe.fail_next("POST", "/v1/checkout/sessions", 500, 500, 500)
    session = await created(client, shop, "cascaded")
    assert _explained(session) == ("sandbox", None, "cascade", 1)
    assert (await record(client, shop, session["sessionId"]))["routing"]["reason"] == "cascade"
    assert _explained(await created(client, shop, "next")) == ("stripe", None, "rule", 1)


async def test_a_route_none_of_whose_providers_can_take_the_session_is_422(
    client: Client, db: Database, settings: Settings
) -> None:
    shop = await _shop(client, db, settings, stripe_methods=("card",))
    rule = {
        "name": "blik-stripe",
        "when": {"paymentMethods": ["blik"]},
        "route": {"type": "priority", "providers": ["stripe"]},
    }
    await put_routing(client, shop, {"rules": [rule]})
    response = await create_session(client, shop, "blik", session_body(method="blik"))
    assert response.status_code == 422
    body = await response.get_json()
    assert body["code"] == "NO_PROVIDER_AVAILABLE"
    assert "'blik-stripe'" in body["message"]


async def _sessions(db: Database) -> int:
    async def count(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM checkout_sessions"))

    return await db.autocommit(count)


async def test_evaluate_ranks_every_provider_the_route_names_and_calls_none(
    client: Client, db: Database, settings: Settings, fake_stripe: FakeStripe
) -> None:
    shop = await _shop(client, db, settings, stripe_methods=("card",))
    rule = {
        "name": "blik",
        "when": {"paymentMethods": ["blik"]},
        "route": {"type": "priority", "providers": ["stripe", "sandbox"]},
    }
    await put_routing(client, shop, {"rules": [rule]})
    path = f"/api/v1/applications/{shop.application_id}/routing/evaluate"
    response = await post_json(client, path, session_body(method="blik"), shop.merchant.headers)
    assert response.status_code == 200, await response.get_data(as_text=True)
    answer = await response.get_json()
    assert (answer["rule"], answer["routeType"], answer["version"], answer["selectedProvider"]) == (
        "blik",
        "priority",
        1,
        "sandbox",
    )
    assert [(p["provider"], p["eligible"], p["reason"]) for p in answer["ranking"]] == [
        ("sandbox", True, "rule"),
        ("stripe", False, "not_eligible"),
    ]
    cards = await (await post_json(client, path, session_body(), shop.merchant.headers)).get_json()
    assert (cards["rule"], cards["routeType"], cards["selectedProvider"]) == (None, "dynamic", "sandbox")
    assert [(p["provider"], p["reason"]) for p in cards["ranking"]] == [
        ("sandbox", "dynamic"),
        ("stripe", "dynamic"),
    ]
    assert cards["ranking"][0]["score"] == cards["ranking"][1]["score"]
    assert _stripe_creations(fake_stripe) == []
    assert await _sessions(db) == 0


# --- Learning from outcomes ----------------------------------------------------------------------


async def _outcome(db: Database, session_id: str) -> str | None:
    async def read(conn: Connection) -> str | None:
        found: str | None = await conn.fetchval(
            "SELECT outcome FROM routing_outcomes WHERE session_id = $1", uuid.UUID(session_id)
        )
        return found

    return await db.autocommit(read)


async def _checkout_of(fake: FakeStripe, session_id: str) -> str:
    (sent,) = [
        r
        for r in fake.requests_to("POST", "/v1/checkout/sessions")
        if r.status == 200 and r.form["client_reference_id"] == session_id
    ]
    checkout_id: str = sent.answer["id"]
    return checkout_id


async def test_dynamic_routing_moves_sessions_to_the_provider_whose_payments_succeed(
    client: Client, shop: Shop, db: Database, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient
) -> None:
    # The sandbox declines every card payment here, Stripe's customers pay: each session's outcome
    # is recorded before the next session is created.
    routed = []
    for number in range(8):
        session = await created(client, shop, f"session-{number}")
        provider, rule, reason, _ = _explained(session)
        assert (rule, reason) == (None, "dynamic")
        routed.append(provider)
        if provider == "sandbox":
            page = urlsplit(session["checkoutUrl"]).path
            assert (await client.post(page, form={"card_number": "4000000000000002"})).status_code == 402
        else:
            event = fake_stripe.pay(await _checkout_of(fake_stripe, session["sessionId"]))
            (answer,) = await fake_stripe.deliver(event, via=stripe_sender)
            assert answer.status_code == 200, answer.text
        await eventually(lambda: _outcome(db, session["sessionId"]))  # noqa: B023 - awaited at once
    # Before any outcome both stood at the prior and the sandbox came first by name; its one
    # decline put it behind Stripe, untried, and Stripe's successes kept it in front.
    assert routed == ["sandbox"] + ["stripe"] * 7
    path = f"/api/v1/applications/{shop.application_id}/routing/evaluate"
    ranking = (await (await post_json(client, path, session_body(), shop.merchant.headers)).get_json())[
        "ranking"
    ]
    assert [place["provider"] for place in ranking] == ["stripe", "sandbox"]
    # The sandbox's one decline is thin evidence: shrunk toward the application's rate (Stripe's
    # successes lend it 7 outcomes' weight), it stays well behind all the same.
    assert ranking[0]["score"] > 0.8 > 0.7 > ranking[1]["score"]
