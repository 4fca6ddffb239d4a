"""An application's routing document through the API: read (the default until one is stored),
replaced as a new version with every earlier one kept, refused with every problem named; sessions
routed by it and explained; a session's route evaluated without creating it. (Routing between two
providers: tests/providers/test_merchant_routing.py.)"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

from payorch.config import Settings
from payorch.engine.routing.document import MAX_DOCUMENT_BYTES
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage.database import Connection, Database
from tests.helpers import (
    Client,
    Merchant,
    Shop,
    create_session,
    eventually,
    expire_now,
    new_application,
    new_merchant,
    new_shop,
    post_json,
    put_routing,
    session_body,
)
from tests.test_metrics import scrape, value

DOCUMENT: dict[str, Any] = {
    "rules": [
        {
            "name": "blik-pln",
            "when": {
                "paymentMethods": ["blik"],
                "currencies": ["PLN"],
                "amount": {"min": 0, "max": 5000},
                "countries": ["PL"],
            },
            "route": {"type": "priority", "providers": ["sandbox"]},
        },
        {
            "name": "eur-split",
            "when": {"currencies": ["EUR"]},
            "route": {"type": "split", "weights": {"sandbox": 100}},
        },
    ],
    "default": {"type": "dynamic"},
    "fees": {"sandbox": {"percent": "1.4", "fixed": {"PLN": "1.00", "EUR": "0.25"}}},
    "objective": "approval",
}


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def _path(application_id: str) -> str:
    return f"/api/v1/applications/{application_id}/routing"


async def _put(client: Client, shop: Shop, document: Any) -> Any:
    return await client.put(
        _path(shop.application_id),
        data=dumps_exact(document),
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )


async def _versions(db: Database, application_id: str) -> list[tuple[int, dict[str, Any]]]:
    async def read(conn: Connection) -> list[tuple[int, dict[str, Any]]]:
        rows = await conn.fetch(
            "SELECT version, document FROM routing_documents WHERE application_id = $1 ORDER BY version",
            uuid.UUID(application_id),
        )
        return [(row["version"], row["document"]) for row in rows]

    return await db.autocommit(read)


async def test_an_application_that_never_stored_a_document_reads_the_default_at_version_0(
    client: Client, shop: Shop
) -> None:
    response = await client.get(_path(shop.application_id), headers=shop.merchant.headers)
    assert response.status_code == 200
    assert await response.get_json() == {
        "rules": [],
        "default": {"type": "dynamic"},
        "fees": {},
        "objective": "approval",
        "version": 0,
        "updatedAt": None,
    }


async def test_put_answers_the_stored_document_with_version_1_and_get_reads_it(
    client: Client, shop: Shop
) -> None:
    response = await _put(client, shop, DOCUMENT)
    assert response.status_code == 200, await response.get_data(as_text=True)
    stored = await response.get_json()
    assert {key: stored[key] for key in DOCUMENT} == DOCUMENT
    assert stored["version"] == 1
    assert stored["updatedAt"].endswith("Z")
    read = await client.get(_path(shop.application_id), headers=shop.merchant.headers)
    assert await read.get_json() == stored


async def test_the_answer_writes_the_document_as_payorch_keeps_it(client: Client, shop: Shop) -> None:
    sent = {
        "rules": [{"name": "all", "route": {"type": "dynamic", "providers": ["sandbox"]}}],
        "default": None,
    }
    stored = await (await _put(client, shop, sent)).get_json()
    assert stored["rules"] == sent["rules"]
    assert (stored["default"], stored["fees"], stored["objective"]) == ({"type": "dynamic"}, {}, "approval")


async def test_each_put_stores_the_next_version_and_keeps_every_earlier_one(
    client: Client, shop: Shop, db: Database
) -> None:
    versions = []
    for objective in ("approval", "net", "approval"):
        response = await _put(client, shop, {**DOCUMENT, "objective": objective})
        versions.append((await response.get_json())["version"])
    assert versions == [1, 2, 3]
    kept = await _versions(db, shop.application_id)
    assert [(version, document["objective"]) for version, document in kept] == [
        (1, "approval"),
        (2, "net"),
        (3, "approval"),
    ]
    assert (await (await client.get(_path(shop.application_id), headers=shop.merchant.headers)).get_json())[
        "version"
    ] == 3


async def test_puts_sent_at_once_each_store_a_version_of_their_own(
    client: Client, shop: Shop, db: Database
) -> None:
    statuses: list[int] = []

    async def put(name: str) -> None:
        document = {"rules": [{"name": name, "route": {"type": "dynamic"}}]}
        statuses.append((await _put(client, shop, document)).status_code)

    async with trio.open_nursery() as nursery:
        for n in range(5):
            nursery.start_soon(put, f"rule-{n}")
    assert statuses == [200] * 5
    assert [version for version, _ in await _versions(db, shop.application_id)] == [1, 2, 3, 4, 5]


async def test_the_same_document_sent_at_once_is_stored_once(
    client: Client, shop: Shop, db: Database
) -> None:
    answers: list[tuple[int, int]] = []

    async def put() -> None:
        response = await _put(client, shop, DOCUMENT)
        answers.append((response.status_code, (await response.get_json())["version"]))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(put)
    assert answers == [(200, 1)] * 5
    assert [version for version, _ in await _versions(db, shop.application_id)] == [1]


async def test_a_document_read_and_sent_back_as_it_is_stores_nothing_and_answers_its_version(
    client: Client, shop: Shop, db: Database
) -> None:
    first = await (await _put(client, shop, DOCUMENT)).get_json()
    again = await _put(client, shop, first)
    assert again.status_code == 200
    second = await again.get_json()
    assert second == first
    assert second["rules"][0]["when"]["amount"] == {"min": Decimal(0), "max": Decimal(5000)}
    assert [version for version, _ in await _versions(db, shop.application_id)] == [1]


async def test_the_same_document_written_differently_stores_nothing(
    client: Client, shop: Shop, db: Database
) -> None:
    await _put(client, shop, DOCUMENT)
    rule = DOCUMENT["rules"][0]
    rewritten = {  # keys in another order, amounts with decimals, defaults spelled out
        "objective": "approval",
        "fees": DOCUMENT["fees"],
        "default": {"type": "dynamic"},
        "rules": [
            {
                "route": rule["route"],
                "when": {**rule["when"], "amount": {"max": Decimal("5000.00"), "min": Decimal("0.0")}},
                "name": rule["name"],
            },
            DOCUMENT["rules"][1],
        ],
    }
    response = await _put(client, shop, rewritten)
    assert (await response.get_json())["version"] == 1
    assert [version for version, _ in await _versions(db, shop.application_id)] == [1]


async def test_a_document_with_several_problems_is_400_naming_each_and_nothing_is_stored(
    client: Client, shop: Shop, db: Database
) -> None:
    bad = {
        "rules": [
            {"name": "eur-split", "route": {"type": "split", "weights": {"sandbox": 60, "stripe": 30}}},
            {"name": "eur-split", "route": {"type": "random"}},
            {
                "name": "x",
                "when": {"weekday": "monday"},
                "route": {"type": "priority", "providers": ["paypal"]},
            },
        ],
    }
    response = await _put(client, shop, bad)
    assert response.status_code == 400
    body = await response.get_json()
    assert (body["error"], body["code"]) == ("Bad Request", 400)
    assert body["message"] == "invalid routing document: 5 problems"
    fields = [problem["field"] for problem in body["details"]]
    assert fields == [
        "rules.0.route.weights.stripe",
        "rules.1.name",
        "rules.1.route.type",
        "rules.2.when.weekday",
        "rules.2.route.providers.0",
    ]
    assert await _versions(db, shop.application_id) == []


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"rules": [{"name": "", "route": {"type": "dynamic"}}]}, "rules.0.name"),
        (
            {"rules": [{"name": "a", "route": {"type": "split", "weights": {"sandbox": 90}}}]},
            "rules.0.route.weights",
        ),
        (
            {
                "rules": [
                    {"name": "a", "when": {"amount": {"min": 10, "max": 5}}, "route": {"type": "dynamic"}}
                ]
            },
            "rules.0.when.amount",
        ),
        (
            {"rules": [{"name": "a", "when": {"currencies": ["eur"]}, "route": {"type": "dynamic"}}]},
            "rules.0.when.currencies.0",
        ),
        ({"rules": [{"name": f"r{n}", "route": {"type": "dynamic"}} for n in range(101)]}, "rules"),
        ({"objective": "cheapest"}, "objective"),
        ([], "body"),
    ],
    ids=[
        "empty name",
        "weights not 100",
        "inverted amount",
        "lower-case currency",
        "101 rules",
        "objective",
        "not an object",
    ],
)
async def test_a_bad_document_is_400_naming_its_place(
    client: Client, shop: Shop, db: Database, document: Any, field: str
) -> None:
    response = await _put(client, shop, document)
    assert response.status_code == 400
    assert [problem["field"] for problem in (await response.get_json())["details"]] == [field]
    assert await _versions(db, shop.application_id) == []


async def test_a_body_that_is_not_json_is_400(client: Client, shop: Shop, db: Database) -> None:
    response = await client.put(
        _path(shop.application_id),
        data=b"{rules: [",
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert await _versions(db, shop.application_id) == []


async def test_a_document_over_64_kib_is_400_and_nothing_is_stored(
    client: Client, shop: Shop, db: Database
) -> None:
    padded = dumps_exact({**DOCUMENT, "objective": "approval"}).encode()
    body = padded[:-1] + b" " * (MAX_DOCUMENT_BYTES + 1 - len(padded)) + b"}"
    assert len(body) == MAX_DOCUMENT_BYTES + 1
    response = await client.put(
        _path(shop.application_id),
        data=body,
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    reply = await response.get_json()
    assert reply["details"] == [{"field": "body", "message": "a routing document takes at most 65536 bytes"}]
    assert await _versions(db, shop.application_id) == []
    exactly = padded[:-1] + b" " * (MAX_DOCUMENT_BYTES - len(padded)) + b"}"
    response = await client.put(
        _path(shop.application_id),
        data=exactly,
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 200


async def test_another_merchants_application_is_403_and_nothing_is_stored(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    stranger = await new_merchant(client, db, settings)
    assert (await client.get(_path(shop.application_id), headers=stranger.headers)).status_code == 403
    response = await client.put(_path(shop.application_id), json=DOCUMENT, headers=stranger.headers)
    assert response.status_code == 403
    assert await _versions(db, shop.application_id) == []


async def test_another_merchants_application_is_403_even_for_a_bad_document(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    stranger = await new_merchant(client, db, settings)
    response = await client.put(_path(shop.application_id), json={"objective": 1}, headers=stranger.headers)
    assert response.status_code == 403


async def test_an_unknown_application_is_404(client: Client, merchant: Merchant) -> None:
    for application_id in (str(uuid.uuid4()), "not-a-uuid"):
        assert (await client.get(_path(application_id), headers=merchant.headers)).status_code == 404
        response = await client.put(_path(application_id), json=DOCUMENT, headers=merchant.headers)
        assert response.status_code == 404


async def test_an_api_key_is_401(client: Client, shop: Shop) -> None:
    assert (await client.get(_path(shop.application_id), headers=shop.headers)).status_code == 401
    assert (
        await client.put(_path(shop.application_id), json=DOCUMENT, headers=shop.headers)
    ).status_code == 401


async def test_each_application_has_its_own_document(client: Client, shop: Shop) -> None:
    other = await new_application(client, shop.merchant, "Other")
    await _put(client, shop, DOCUMENT)
    response = await client.get(_path(other["id"]), headers=shop.merchant.headers)
    assert (await response.get_json())["version"] == 0


# --- Sessions routed by the document, with the explanation ---------------------------------------


async def _created(
    client: Client, shop: Shop, key: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    response = await create_session(client, shop, key, body)
    assert response.status_code == 201, await response.get_data(as_text=True)
    created: dict[str, Any] = await response.get_json()
    return created


async def _record(client: Client, shop: Shop, session_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
    record: dict[str, Any] = loads_exact(await response.get_data())
    return record


PAID_CARD, DECLINED_CARD = "4242424242424242", "4000000000000002"  # the sandbox's (API.md)
SANDBOX_FIRST = {
    "rules": [{"name": "sandbox-first", "route": {"type": "priority", "providers": ["sandbox"]}}]
}


async def test_a_session_of_the_default_document_is_explained_as_dynamic_at_version_0(
    client: Client, shop: Shop
) -> None:
    created = await _created(client, shop, "k1")
    routing = created["routing"]
    assert {key: routing[key] for key in ("selectedProvider", "rule", "reason", "version")} == {
        "selectedProvider": "sandbox",
        "rule": None,
        "reason": "dynamic",
        "version": 0,
    }
    record = await _record(client, shop, created["sessionId"])
    assert record["routing"] == {**routing, "score": Decimal(str(routing["score"]))}


async def test_a_stored_document_routes_the_very_next_session(client: Client, shop: Shop) -> None:
    await _created(client, shop, "before")  # the actor holds the default document now
    await put_routing(client, shop, SANDBOX_FIRST)
    routing = (await _created(client, shop, "after"))["routing"]
    assert (routing["rule"], routing["reason"], routing["version"]) == ("sandbox-first", "rule", 1)


async def test_a_document_stored_by_another_process_routes_as_soon_as_its_notification_arrives(
    client: Client, shop: Shop, db: Database
) -> None:
    await _created(client, shop, "before")

    async def store_elsewhere(conn: Connection) -> None:
        # Another payorch process stores a version: its trigger notifies every process on commit.
        await conn.execute(
            """INSERT INTO routing_documents (application_id, version, document, created_at)
               VALUES ($1, 1, $2, now())""",
            uuid.UUID(shop.application_id),
            {**SANDBOX_FIRST, "default": {"type": "dynamic"}, "fees": {}, "objective": "approval"},
        )

    await db.transaction(store_elsewhere)
    attempts = iter(range(1000))

    async def routed_by_it() -> bool:
        created = await _created(client, shop, f"after-{next(attempts)}")
        return created["routing"]["rule"] == "sandbox-first"

    await eventually(routed_by_it)


async def test_a_session_created_before_payorch_kept_its_explanation_reads_as_dynamic_at_version_0(
    client: Client, shop: Shop, db: Database
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    created = await _created(client, shop, "k1")

    async def as_before(conn: Connection) -> None:
        await conn.execute(
            """UPDATE checkout_sessions SET routing_rule = NULL, routing_reason = NULL, routing_version = NULL
               WHERE id = $1""",
            uuid.UUID(created["sessionId"]),
        )

    await db.transaction(as_before)
    routing = (await _record(client, shop, created["sessionId"]))["routing"]
    assert (routing["selectedProvider"], routing["rule"], routing["reason"], routing["version"]) == (
        "sandbox",
        None,
        "dynamic",
        0,
    )


# --- Evaluate --------------------------------------------------------------------------------------


def _evaluate_path(application_id: str) -> str:
    return f"/api/v1/applications/{application_id}/routing/evaluate"


async def _evaluate(
    client: Client, shop: Shop, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Any:
    return await post_json(
        client, _evaluate_path(shop.application_id), body, headers or shop.merchant.headers
    )


async def _count(db: Database, table: str) -> int:
    async def count(conn: Connection) -> int:
        return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))  # noqa: S608 - a test's own name

    return await db.autocommit(count)


async def test_evaluate_answers_the_decision_and_creates_nothing(
    client: Client, shop: Shop, db: Database
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    before = (await _count(db, "checkout_sessions"), await _count(db, "idempotency_keys"))
    response = await _evaluate(client, shop, session_body())
    assert response.status_code == 200, await response.get_data(as_text=True)
    assert loads_exact(await response.get_data()) == {
        "rule": "sandbox-first",
        "routeType": "priority",
        "version": 1,
        "selectedProvider": "sandbox",
        "ranking": [{"provider": "sandbox", "score": Decimal("0.7887"), "eligible": True, "reason": "rule"}],
        "attempts": [{"provider": "sandbox", "reason": "rule"}],
    }
    assert (await _count(db, "checkout_sessions"), await _count(db, "idempotency_keys")) == before


async def test_evaluate_tries_a_document_given_instead_of_the_stored_one(
    client: Client, shop: Shop, db: Database
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    tried = {"rules": [{"name": "tried", "when": {"currencies": ["EUR"]}, "route": {"type": "dynamic"}}]}
    response = await _evaluate(client, shop, {**session_body(), "routing": tried})
    answer = await response.get_json()
    assert (answer["rule"], answer["routeType"], answer["version"], answer["selectedProvider"]) == (
        None,
        "dynamic",
        None,
        "sandbox",
    )
    assert [(p["provider"], p["eligible"], p["reason"]) for p in answer["ranking"]] == [
        ("sandbox", True, "dynamic")
    ]
    assert [version for version, _ in await _versions(db, shop.application_id)] == [1]


async def test_a_fee_for_a_payment_method_is_stored_and_scores_that_methods_payments(
    client: Client, shop: Shop
) -> None:
    fees = {"sandbox": {"percent": "50", "methods": {"blik": {"percent": "0", "fixed": {"PLN": "0.00"}}}}}
    stored = await _put(client, shop, {"fees": fees, "objective": "net"})
    assert stored.status_code == 200, await stored.get_data(as_text=True)
    assert (await stored.get_json())["fees"] == {
        "sandbox": {
            "percent": "50",
            "fixed": {},
            "methods": {"blik": {"percent": "0", "fixed": {"PLN": "0.00"}}},
        }
    }
    scores = {}
    for method in ("blik", "card"):
        answer = await (await _evaluate(client, shop, session_body(method=method))).get_json()
        scores[method] = answer["ranking"][0]["score"]
    # The same learned score (the prior: no outcome yet), whole for BLIK, half for card.
    assert scores["card"] == pytest.approx(scores["blik"] / 2, abs=0.0001)
    assert scores["card"] < scores["blik"]


async def test_evaluate_with_no_provider_that_can_take_the_session_selects_none(
    client: Client, shop: Shop
) -> None:
    response = await _evaluate(client, shop, session_body(currency="EUR", method="blik"))
    answer = await response.get_json()
    assert (answer["routeType"], answer["selectedProvider"], answer["ranking"]) == ("dynamic", None, [])


async def test_evaluate_names_each_problem_of_a_document_tried_under_routing(
    client: Client, shop: Shop
) -> None:
    tried = {"rules": [{"name": "", "route": {"type": "split", "weights": {"sandbox": 50}}}]}
    response = await _evaluate(client, shop, {**session_body(), "routing": tried})
    assert response.status_code == 400
    fields = [problem["field"] for problem in (await response.get_json())["details"]]
    assert fields == ["routing.rules.0.name", "routing.rules.0.route.weights"]


async def test_evaluate_validates_the_session_as_its_creation_does(client: Client, shop: Shop) -> None:
    no_customer = {key: value for key, value in session_body().items() if key != "customer"}
    assert (await _evaluate(client, shop, no_customer)).status_code == 400
    unknown_method = await _evaluate(client, shop, session_body(method="cheque"))
    assert unknown_method.status_code == 400
    assert (await unknown_method.get_json())["details"][0]["field"] == "paymentMethod"
    other = await _evaluate(client, shop, {**session_body(), "applicationId": str(uuid.uuid4())})
    assert other.status_code == 403


async def test_evaluate_of_another_merchants_or_an_unknown_application_is_403_or_404(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    stranger = await new_merchant(client, db, settings)
    assert (await _evaluate(client, shop, session_body(), stranger.headers)).status_code == 403
    response = await post_json(
        client, _evaluate_path(str(uuid.uuid4())), session_body(), shop.merchant.headers
    )
    assert response.status_code == 404
    assert (await _evaluate(client, shop, session_body(), shop.headers)).status_code == 401


# --- Outcomes learned ------------------------------------------------------------------------------


async def _outcomes(db: Database, session_id: str) -> list[tuple[str, str, str, str]] | None:
    """The session's recorded outcomes (provider, method, currency, outcome); None while it has none."""

    async def read(conn: Connection) -> list[tuple[str, str, str, str]]:
        rows = await conn.fetch(
            """SELECT provider_name, payment_method, currency, outcome FROM routing_outcomes
               WHERE session_id = $1""",
            uuid.UUID(session_id),
        )
        return [tuple(row.values()) for row in rows]

    return await db.autocommit(read) or None


async def _pay(client: Client, created: dict[str, Any], card: str) -> None:
    response = await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": card})
    assert response.status_code == (402 if card == DECLINED_CARD else 200)


async def test_a_decline_then_a_payment_at_the_same_checkout_is_one_success(
    client: Client, shop: Shop, db: Database
) -> None:
    created = await _created(client, shop, "k1")
    await _pay(client, created, DECLINED_CARD)
    assert await eventually(lambda: _outcomes(db, created["sessionId"])) == [("sandbox", "card", "PLN", "f")]
    _, samples = await scrape(client)
    assert value(samples, "payorch_payment_attempts_ended_total", provider="sandbox", outcome="failure") == 0
    await _pay(client, created, PAID_CARD)

    async def succeeded() -> bool:
        return (await _record(client, shop, created["sessionId"]))["status"] == "SUCCEEDED"

    await eventually(succeeded)
    assert await _outcomes(db, created["sessionId"]) == [("sandbox", "card", "PLN", "s")]
    _, samples = await scrape(client)
    labels = {"provider": "sandbox", "payment_method": "card"}
    # Recorded as a failure at the decline, then made the success the attempt ended with.
    assert value(samples, "payorch_routing_outcomes_total", **labels, outcome="failure") == 1
    assert value(samples, "payorch_routing_outcomes_total", **labels, outcome="success") == 1
    ended = {"provider": "sandbox"}
    assert value(samples, "payorch_payment_attempts_ended_total", **ended, outcome="success") == 1
    assert value(samples, "payorch_payment_attempts_ended_total", **ended, outcome="failure") == 0
    assert value(samples, "payorch_sessions_recovered_total") == 0
    assert value(samples, "payorch_routing_decisions_total", reason="dynamic") == 1


async def test_a_decline_then_expiry_ends_the_attempt_as_one_failure(
    client: Client, shop: Shop, db: Database
) -> None:
    created = await _created(client, shop, "declined-then-left")
    await _pay(client, created, DECLINED_CARD)
    assert await eventually(lambda: _outcomes(db, created["sessionId"])) == [("sandbox", "card", "PLN", "f")]
    await expire_now(db, created["sessionId"])

    async def expired() -> bool:
        return (await _record(client, shop, created["sessionId"]))["status"] == "FAILED"

    await eventually(expired)
    assert await _outcomes(db, created["sessionId"]) == [("sandbox", "card", "PLN", "f")]
    _, samples = await scrape(client)
    ended = "payorch_payment_attempts_ended_total"
    assert value(samples, ended, provider="sandbox", outcome="failure") == 1
    assert value(samples, ended, provider="sandbox", outcome="abandonment") == 0


async def test_a_payment_is_a_success_and_a_checkout_expired_unpaid_an_abandonment(
    client: Client, shop: Shop, db: Database
) -> None:
    paid = await _created(client, shop, "paid")
    await _pay(client, paid, PAID_CARD)
    assert await eventually(lambda: _outcomes(db, paid["sessionId"])) == [("sandbox", "card", "PLN", "s")]
    left = await _created(client, shop, "left")
    await expire_now(db, left["sessionId"])
    assert await eventually(lambda: _outcomes(db, left["sessionId"])) == [("sandbox", "card", "PLN", "a")]
