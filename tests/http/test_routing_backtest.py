"""A candidate routing document replayed over an application's last sessions through the API
(`POST .../routing/backtest`): counts per provider against what happened, with the approval each
showed; refusals; the window; and nothing stored, created or sent to a provider. (The replay's
counting: tests/engine/test_routing_backtest.py.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import ExitStack
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from payorch.config import ProviderSettings, Settings, StripeSettings
from payorch.http.request_limits import BACKTEST_RETRY_AFTER_S, BACKTESTS_AT_ONCE
from payorch.http.services import PayorchApp
from payorch.jsonexact import loads_exact
from payorch.runtime import Runtime
from payorch.storage.database import Connection, Database
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe
from tests.helpers import (
    Client,
    Shop,
    eventually,
    link_sandbox,
    new_api_key,
    new_application,
    new_merchant,
    post_json,
    prefer,
    put_routing,
)
from tests.providers.api_support import created
from tests.providers.mollie_support import link

# The Stripe SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

fake_stripe = stripe_fake.fake_stripe
STRIPE_KEY = "sk_test_51ShopKey0123456789abcdef"
PAID_CARD, DECLINED_CARD = "4242424242424242", "4000000000000002"
PL_ADDRESS = {"line1": "ul. Prosta 1", "city": "Warszawa", "postalCode": "00-001", "country": "PL"}
STRIPE_FIRST = {"default": {"type": "priority", "providers": ["stripe", "sandbox"]}}
# The answer's `recovery` counts (tests/http/test_routing_backtest_recovery.py tells each apart).
RECOVERY_COUNTS = (
    "retried",
    "recovered",
    "notRecovered",
    "unknown",
    "noLongerRetried",
    "noLongerRecovered",
    "declinedWithoutCode",
)


@pytest.fixture
def settings(settings: Settings, fake_stripe: FakeStripe) -> Settings:
    """Stripe enabled at its fake beside the sandbox; a provider's approval on a segment is used
    from its first outcome on, so a few sessions make an estimate."""
    fake_stripe.accept_key(STRIPE_KEY)
    return settings.model_copy(
        update={
            "providers": ProviderSettings(stripe=StripeSettings(enabled=True, api_base=fake_stripe.url)),
            "routing": settings.routing.model_copy(update={"min_outcomes": 1}),
        }
    )


@pytest.fixture
async def stripe_sender(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """How the fake Stripe reaches payorch's provider-events route: HTTP into the app itself."""
    transport = httpx.ASGITransport(app=runtime.app)  # type: ignore[arg-type]  # ASGI typing differs
    async with httpx.AsyncClient(transport=transport) as client:
        yield client


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    """A merchant's application linked to Stripe and to the sandbox."""
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    linked = await link(client, merchant, application["id"], "stripe", STRIPE_KEY, ("card", "blik"))
    assert linked.status_code == 201, await linked.get_data(as_text=True)
    await link_sandbox(client, merchant, application["id"])
    key = await new_api_key(client, merchant, application["id"])
    return Shop(merchant=merchant, application_id=application["id"], api_key=key["key"])


class History:
    """Sessions of the shop made through the API and brought to an outcome at their provider."""

    def __init__(
        self, client: Client, shop: Shop, db: Database, fake: FakeStripe, sender: httpx.AsyncClient
    ) -> None:
        self.client, self.shop, self.db, self.fake, self.sender = client, shop, db, fake, sender
        self.count = 0

    async def session(self, provider: str | None, outcome: str | None, **change: Any) -> str:
        """A session routed to `provider` (the routing document must send it there; None: wherever
        it sends it), then `paid`, `declined` or left open (None); its id once its outcome is
        recorded."""
        self.count += 1
        session = await created(self.client, self.shop, f"history-{self.count}", **change)
        if provider is None:
            provider = session["routing"]["selectedProvider"]
        assert session["routing"]["selectedProvider"] == provider
        session_id: str = session["sessionId"]
        if outcome is None:
            return session_id
        if provider == "sandbox":
            card = PAID_CARD if outcome == "paid" else DECLINED_CARD
            page = urlsplit(session["checkoutUrl"]).path
            assert (await self.client.post(page, form={"card_number": card})).status_code in (200, 402)
        else:
            checkout = self._checkout_of(session_id)
            event = self.fake.pay(checkout) if outcome == "paid" else self.fake.decline(checkout)
            (answer,) = await self.fake.deliver(event, via=self.sender)
            assert answer.status_code == 200, answer.text
        await eventually(lambda: _outcome(self.db, session_id))
        return session_id

    def _checkout_of(self, session_id: str) -> str:
        (sent,) = [
            r
            for r in self.fake.requests_to("POST", "/v1/checkout/sessions")
            if r.status == 200 and r.form["client_reference_id"] == session_id
        ]
        checkout_id: str = sent.answer["id"]
        return checkout_id


@pytest.fixture
def history(
    client: Client, shop: Shop, db: Database, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient
) -> History:
    return History(client, shop, db, fake_stripe, stripe_sender)


async def _outcome(db: Database, session_id: str) -> str | None:
    async def read(conn: Connection) -> str | None:
        found: str | None = await conn.fetchval(
            "SELECT outcome FROM routing_outcomes WHERE session_id = $1", uuid.UUID(session_id)
        )
        return found

    return await db.autocommit(read)


async def _mixed_history(client: Client, shop: Shop, history: History) -> None:
    """Stripe: 2 paid, 1 declined. The sandbox: 1 paid, 1 declined, 1 open (a Polish customer's)."""
    await prefer(client, shop, "stripe")
    for outcome in ("paid", "paid", "declined"):
        await history.session("stripe", outcome)
    await prefer(client, shop, "sandbox")
    await history.session("sandbox", "paid")
    await history.session("sandbox", "declined")
    await history.session("sandbox", None, customer={"email": "a@b.pl", "billingAddress": PL_ADDRESS})


def _path(application_id: str) -> str:
    return f"/api/v1/applications/{application_id}/routing/backtest"


async def _backtest(client: Client, shop: Shop, body: Any, headers: dict[str, str] | None = None) -> Any:
    return await post_json(client, _path(shop.application_id), body, headers or shop.merchant.headers)


async def _answer(client: Client, shop: Shop, body: Any) -> dict[str, Any]:
    response = await _backtest(client, shop, body)
    assert response.status_code == 200, await response.get_data(as_text=True)
    answer: dict[str, Any] = loads_exact(await response.get_data())
    return answer


def _providers(answer: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {
        p["provider"]: (p["actual"], p["candidate"], p["outcomes"], p["succeeded"], p["approval"])
        for p in answer["providers"]
    }


async def test_a_backtest_counts_per_provider_what_went_there_what_the_candidate_sends_and_the_approval(
    client: Client, shop: Shop, history: History
) -> None:
    await _mixed_history(client, shop, history)
    answer = await _answer(client, shop, {"routing": STRIPE_FIRST})
    assert _providers(answer) == {
        "sandbox": (3, 0, 2, 1, Decimal("0.5000")),
        "stripe": (3, 6, 3, 2, Decimal("0.6667")),
    }
    # The document in force (version 2, the sandbox first) sends all six to the sandbox.
    assert answer["inForceVersion"] == 2
    assert {p["provider"]: p["baseline"] for p in answer["providers"]} == {"sandbox": 6, "stripe": 0}
    assert (answer["sessions"], answer["changed"], answer["unroutable"]) == (6, 6, 0)
    assert (answer["withoutOutcome"], answer["withoutCountry"], answer["limited"]) == (1, 5, False)
    # Over the 5 sessions with an outcome: 3 paid. By the candidate, Stripe's own 2 of 3 and the
    # sandbox's 2 moved to Stripe at the 2/3 it showed on PLN cards: (2 + 4/3) / 5. By the document
    # in force, the sandbox's own 1 of 2 and Stripe's 3 at the sandbox's 1/2: (1 + 3/2) / 5.
    estimated = answer["estimatedApproval"]
    assert {key: estimated[key] for key in ("sessions", "actual", "candidate", "baseline", "change")} == {
        "sessions": 5,
        "actual": Decimal("0.6000"),
        "candidate": Decimal("0.6667"),
        "baseline": Decimal("0.5000"),
        "change": Decimal("0.1667"),
    }
    assert estimated["changeLow"] < estimated["change"] < estimated["changeHigh"]
    assert (estimated["unestimated"], estimated["effectiveSessions"]) == (0, 3)
    assert answer["rules"] == [{"rule": None, "sessions": 6, "changed": 6, "unroutable": 0}]
    assert answer["recovery"] == dict.fromkeys(RECOVERY_COUNTS, 0)
    assert answer["from"] < answer["to"]


SPLIT = {"default": {"type": "split", "weights": {"sandbox": 50, "stripe": 50}}}


async def test_a_backtest_of_the_document_in_force_changes_nothing_within_its_noise(
    client: Client, shop: Shop, history: History
) -> None:
    # The history made under a split: each session assigned by its id, paid or declined by turns.
    await put_routing(client, shop, SPLIT)
    for number in range(12):
        await history.session(None, "paid" if number % 3 else "declined")
    answer = await _answer(client, shop, {"routing": SPLIT})
    assert (answer["sessions"], answer["changed"], answer["inForceVersion"]) == (12, 0, 1)
    assert all(p["candidate"] == p["baseline"] == p["actual"] for p in answer["providers"])
    estimated = answer["estimatedApproval"]
    assert estimated["candidate"] == estimated["baseline"]
    assert estimated["change"] == 0
    assert estimated["changeLow"] <= estimated["change"] <= estimated["changeHigh"]
    assert estimated["actual"] == Decimal("0.6667")


async def test_a_candidate_priority_rule_moves_the_sessions_it_matches(
    client: Client, shop: Shop, history: History
) -> None:
    await _mixed_history(client, shop, history)
    polish = {
        "name": "polish",
        "when": {"countries": ["PL"]},
        "route": {"type": "priority", "providers": ["stripe"]},
    }
    candidate = {"rules": [polish], "default": {"type": "priority", "providers": ["sandbox"]}}
    answer = await _answer(client, shop, {"routing": candidate})
    assert {name: counts[:2] for name, counts in _providers(answer).items()} == {
        "sandbox": (3, 5),
        "stripe": (3, 1),
    }
    # Changed from the document in force (the sandbox first): only the Polish customer's.
    assert answer["rules"] == [
        {"rule": "polish", "sessions": 1, "changed": 1, "unroutable": 0},
        {"rule": None, "sessions": 5, "changed": 0, "unroutable": 0},
    ]


async def test_a_session_without_a_recorded_outcome_is_judged_by_its_status(
    client: Client, shop: Shop, history: History, db: Database
) -> None:
    # A session paid before payorch recorded outcomes has none in routing_outcomes: it is paid.
    await prefer(client, shop, "sandbox")
    session_id = await history.session("sandbox", "paid")

    async def forget(conn: Connection) -> None:
        await conn.execute("DELETE FROM routing_outcomes WHERE session_id = $1", uuid.UUID(session_id))

    await db.transaction(forget)
    answer = await _answer(client, shop, {"routing": STRIPE_FIRST})
    assert _providers(answer)["sandbox"] == (1, 0, 1, 1, Decimal("1.0000"))


async def test_a_document_with_problems_is_400_with_each_named_and_changes_nothing(
    client: Client, shop: Shop, history: History, fake_stripe: FakeStripe
) -> None:
    await prefer(client, shop, "stripe")
    await history.session("stripe", "paid")
    requests = len(fake_stripe.requests)
    tried = {"rules": [{"name": "", "route": {"type": "split", "weights": {"stripe": 50}}}]}
    response = await _backtest(client, shop, {"routing": tried})
    assert response.status_code == 400
    fields = [problem["field"] for problem in (await response.get_json())["details"]]
    assert fields == ["routing.rules.0.name", "routing.rules.0.route.weights"]
    routing = await client.get(
        f"/api/v1/applications/{shop.application_id}/routing", headers=shop.merchant.headers
    )
    assert (await routing.get_json())["version"] == 1
    assert len(fake_stripe.requests) == requests


async def test_days_and_limit_out_of_range_or_no_document_are_400(client: Client, shop: Shop) -> None:
    for body, field in (
        ({"routing": {}, "days": 0}, "days"),
        ({"routing": {}, "days": 31}, "days"),
        ({"routing": {}, "limit": 100_001}, "limit"),
        ({"days": 7}, "routing"),
    ):
        response = await _backtest(client, shop, body)
        assert response.status_code == 400, body
        assert [problem["field"] for problem in (await response.get_json())["details"]] == [field]


async def test_a_backtest_of_another_merchants_or_an_unknown_application_is_403_or_404(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    stranger = await new_merchant(client, db, settings)
    assert (await _backtest(client, shop, {"routing": {}}, stranger.headers)).status_code == 403
    unknown = await post_json(client, _path(str(uuid.uuid4())), {"routing": {}}, shop.merchant.headers)
    assert unknown.status_code == 404


async def test_an_api_key_is_refused_as_for_the_other_routing_calls(client: Client, shop: Shop) -> None:
    assert (await _backtest(client, shop, {"routing": {}}, shop.headers)).status_code == 401


async def _backdate(db: Database, session_id: str, days: int) -> None:
    async def move(conn: Connection) -> None:
        await conn.execute(
            "UPDATE checkout_sessions SET created_at = created_at - make_interval(days => $2) WHERE id = $1",
            uuid.UUID(session_id),
            days,
        )

    await db.transaction(move)


async def test_sessions_created_before_the_window_are_not_replayed(
    client: Client, shop: Shop, history: History, db: Database
) -> None:
    await prefer(client, shop, "sandbox")
    recent = await history.session("sandbox", "paid")
    await _backdate(db, await history.session("sandbox", "declined"), days=3)
    await _backdate(db, await history.session("sandbox", "declined"), days=31)
    assert (await _answer(client, shop, {"routing": {}, "days": 2}))["sessions"] == 1
    month = await _answer(client, shop, {"routing": {}})
    assert (month["sessions"], _providers(month)["sandbox"][2:4]) == (2, (2, 1))
    assert recent  # the newest is in every window


async def test_a_limit_replays_the_newest_sessions_and_says_the_window_held_more(
    client: Client, shop: Shop, history: History
) -> None:
    await prefer(client, shop, "sandbox")
    await history.session("sandbox", "declined")
    newest = await history.session("sandbox", "paid")
    answer = await _answer(client, shop, {"routing": {}, "limit": 1})
    assert (answer["sessions"], answer["limited"]) == (1, True)
    record = await client.get(f"/api/v1/sessions/{newest}", headers=shop.headers)
    assert answer["from"] == (await record.get_json())["createdAt"]
    assert _providers(answer)["sandbox"][3] == 1
    every = await _answer(client, shop, {"routing": {}, "limit": 2, "days": 1})
    assert (every["sessions"], every["limited"]) == (2, False)
    assert every["from"] < answer["from"]  # the window's start, a day before it ran


async def _count(db: Database, table: str) -> int:
    async def count(conn: Connection) -> int:
        return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))  # noqa: S608 - a test's own name

    return await db.autocommit(count)


async def test_a_backtest_calls_no_provider_and_creates_nothing(
    client: Client, shop: Shop, history: History, db: Database, fake_stripe: FakeStripe
) -> None:
    await prefer(client, shop, "sandbox")
    await history.session("sandbox", "paid")
    tables = (
        "checkout_sessions",
        "sandbox_checkouts",
        "idempotency_keys",
        "routing_outcomes",
        "routing_documents",
    )
    before = [await _count(db, table) for table in tables]
    requests = len(fake_stripe.requests)
    answer = await _answer(client, shop, {"routing": STRIPE_FIRST})
    assert _providers(answer)["stripe"][:2] == (0, 1)
    assert [await _count(db, table) for table in tables] == before
    assert len(fake_stripe.requests) == requests


async def _merchant_of(db: Database, shop: Shop) -> uuid.UUID:
    async def read(conn: Connection) -> uuid.UUID:
        found: uuid.UUID = await conn.fetchval(
            "SELECT merchant_id FROM applications WHERE id = $1", uuid.UUID(shop.application_id)
        )
        return found

    return await db.autocommit(read)


async def test_a_second_backtest_of_a_merchant_while_one_runs_is_429_with_retry_after(
    client: Client, shop: Shop, app: PayorchApp, db: Database
) -> None:
    with app.services.limits.backtest(await _merchant_of(db, shop)):
        response = await _backtest(client, shop, {"routing": {}})
    assert response.status_code == 429
    assert response.headers["Retry-After"] == str(BACKTEST_RETRY_AFTER_S)
    assert (await _backtest(client, shop, {"routing": {}})).status_code == 200


async def test_a_backtest_while_the_process_runs_its_most_is_503_with_retry_after(
    client: Client, shop: Shop, app: PayorchApp
) -> None:
    with ExitStack() as others:
        for _ in range(BACKTESTS_AT_ONCE):
            others.enter_context(app.services.limits.backtest(uuid.uuid4()))
        response = await _backtest(client, shop, {"routing": {}})
    assert response.status_code == 503
    assert (await response.get_json())["retryAfter"] == BACKTEST_RETRY_AFTER_S
    assert (await _backtest(client, shop, {"routing": {}})).status_code == 200
