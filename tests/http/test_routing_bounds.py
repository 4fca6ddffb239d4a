"""What one merchant's routing documents can cost: the versions an application stores (a document
the same as the one in force stores nothing, changes are rate-limited per application), the
evaluations a merchant runs (rate-limited, bodies bounded), and the names and numbers a document
may hold (catalogue methods, ISO currencies and countries, bounded decimals), so that no document
payorch accepts can fail an application's actor. (The document's own rules: tests/http/test_routing.py.)"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest

from payorch.config import LimitSettings, Settings
from payorch.http.routes.routing import MAX_EVALUATE_BYTES
from payorch.jsonexact import dumps_exact
from payorch.storage.database import Connection, Database
from tests.helpers import Client, Shop, create_session, new_application, new_shop, post_json, session_body
from tests.http.test_rate_limits import too_many_requests

CHANGES_BURST = 2
EVALUATIONS_BURST = 3


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Small buckets that refill slowly: nothing comes back within a test.
    limits = LimitSettings(
        routing_changes_per_hour=0.1,
        routing_changes_burst=CHANGES_BURST,
        routing_evaluations_per_second=0.001,
        routing_evaluations_burst=EVALUATIONS_BURST,
    )
    return settings.model_copy(update={"limits": limits})


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def _path(application_id: str) -> str:
    return f"/api/v1/applications/{application_id}/routing"


async def _put(client: Client, shop: Shop, document: Any, application_id: str | None = None) -> Any:
    return await client.put(
        _path(application_id or shop.application_id),
        data=dumps_exact(document),
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )


async def _evaluate(client: Client, shop: Shop, body: Any) -> Any:
    return await post_json(client, f"{_path(shop.application_id)}/evaluate", body, shop.merchant.headers)


async def stored_versions(db: Database, application_id: str) -> list[int]:
    """The versions of the application's routing document stored, oldest first."""

    async def read(conn: Connection) -> list[int]:
        rows = await conn.fetch(
            "SELECT version FROM routing_documents WHERE application_id = $1 ORDER BY version",
            uuid.UUID(application_id),
        )
        return [row["version"] for row in rows]

    return await db.autocommit(read)


def _named(name: str) -> dict[str, Any]:
    return {"rules": [{"name": name, "route": {"type": "priority", "providers": ["sandbox"]}}]}


# --- Versions kept ---------------------------------------------------------------------------------


async def test_changes_beyond_the_applications_burst_are_429_and_store_nothing(
    client: Client, shop: Shop, db: Database
) -> None:
    for n in range(CHANGES_BURST):
        assert (await _put(client, shop, _named(f"v{n}"))).status_code == 200
    refused = await too_many_requests(await _put(client, shop, _named("one-too-many")))
    assert "routing document changes" in refused["message"]
    assert await stored_versions(db, shop.application_id) == [1, 2]


async def test_sending_the_document_in_force_again_takes_no_change(
    client: Client, shop: Shop, db: Database
) -> None:
    assert (await _put(client, shop, _named("first"))).status_code == 200
    for _ in range(CHANGES_BURST + 2):
        again = await _put(client, shop, _named("first"))
        assert (again.status_code, (await again.get_json())["version"]) == (200, 1)
    assert (await _put(client, shop, _named("second"))).status_code == 200
    assert await stored_versions(db, shop.application_id) == [1, 2]


async def test_a_refused_document_takes_no_change(client: Client, shop: Shop, db: Database) -> None:
    for _ in range(CHANGES_BURST + 2):
        assert (await _put(client, shop, {"objective": "cheapest"})).status_code == 400
    for n in range(CHANGES_BURST):
        assert (await _put(client, shop, _named(f"v{n}"))).status_code == 200


async def test_each_application_has_its_own_changes(client: Client, shop: Shop, db: Database) -> None:
    for n in range(CHANGES_BURST):
        await _put(client, shop, _named(f"v{n}"))
    assert (await _put(client, shop, _named("more"))).status_code == 429
    other = await new_application(client, shop.merchant, "Other")
    assert (await _put(client, shop, _named("elsewhere"), other["id"])).status_code == 200


# --- Evaluations -----------------------------------------------------------------------------------


async def test_evaluations_beyond_the_merchants_burst_are_429(client: Client, shop: Shop) -> None:
    for _ in range(EVALUATIONS_BURST):
        assert (await _evaluate(client, shop, session_body())).status_code == 200
    refused = await too_many_requests(await _evaluate(client, shop, session_body()))
    assert "routing evaluations" in refused["message"]


async def test_an_evaluation_beyond_the_merchants_burst_is_429_before_its_body_is_read(
    client: Client, shop: Shop
) -> None:
    for _ in range(EVALUATIONS_BURST):
        assert (await _evaluate(client, shop, session_body())).status_code == 200
    oversized = b"{" + b" " * MAX_EVALUATE_BYTES + b"}"
    response = await client.post(
        f"{_path(shop.application_id)}/evaluate",
        data=oversized,
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )
    await too_many_requests(response)


async def test_an_evaluation_beyond_the_merchants_burst_is_429_before_its_application_is_read(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    # The merchant's own bucket is asked first: a flood refused over it costs no read of the
    # application, so an application that is not there, or another merchant's, answers 429 too.
    for _ in range(EVALUATIONS_BURST):
        assert (await _evaluate(client, shop, session_body())).status_code == 200
    other = await new_shop(client, db, settings)
    for application_id in (str(uuid.uuid4()), other.application_id):
        response = await post_json(
            client, f"{_path(application_id)}/evaluate", session_body(), shop.merchant.headers
        )
        assert "routing evaluations" in (await too_many_requests(response))["message"]


def test_a_merchant_tries_about_one_evaluation_a_second_by_default() -> None:
    # A person trying documents in the console; each evaluation may check a whole document.
    limits = LimitSettings()
    assert (limits.routing_evaluations_per_second, limits.routing_evaluations_burst) == (1.0, 5)


async def test_an_evaluate_body_over_its_limit_is_400_naming_the_body(client: Client, shop: Shop) -> None:
    padded = dumps_exact(session_body()).encode()
    exactly = padded[:-1] + b" " * (MAX_EVALUATE_BYTES - len(padded)) + b"}"
    response = await client.post(
        f"{_path(shop.application_id)}/evaluate",
        data=exactly,
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 200, await response.get_data(as_text=True)
    response = await client.post(
        f"{_path(shop.application_id)}/evaluate",
        data=exactly[:-1] + b" }",
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert (await response.get_json())["details"] == [
        {"field": "body", "message": f"an evaluate body takes at most {MAX_EVALUATE_BYTES} bytes"}
    ]


# --- What a document may name ----------------------------------------------------------------------


def _when(**conditions: Any) -> dict[str, Any]:
    return {"rules": [{"name": "r", "when": conditions, "route": {"type": "dynamic"}}]}


async def test_each_unknown_method_currency_and_country_is_one_problem_and_nothing_is_stored(
    client: Client, shop: Shop, db: Database
) -> None:
    document = _when(
        paymentMethods=["card", "cheque"],
        currencies=["PLN", "XYZ", "XTS"],
        countries=["PL", "XX", "EU"],
    )
    response = await _put(client, shop, document)
    assert response.status_code == 400
    body = await response.get_json()
    assert (body["error"], body["code"], body["message"]) == (
        "Bad Request",
        400,
        "invalid routing document: 5 problems",
    )
    assert [(problem["field"], problem["message"]) for problem in body["details"]] == [
        (
            "rules.0.when.paymentMethods.1",
            "'cheque' is not a payment method payorch offers: use apple_pay, blik or card",
        ),
        ("rules.0.when.currencies.1", "'XYZ' is not an ISO 4217 currency payorch knows"),
        ("rules.0.when.currencies.2", "'XTS' is not an ISO 4217 currency payorch knows"),
        ("rules.0.when.countries.1", "'XX' is not an ISO 3166-1 alpha-2 country code"),
        ("rules.0.when.countries.2", "'EU' is not an ISO 3166-1 alpha-2 country code"),
    ]
    assert await stored_versions(db, shop.application_id) == []


async def test_a_fee_in_a_currency_payorch_does_not_know_is_400(client: Client, shop: Shop) -> None:
    response = await _put(client, shop, {"fees": {"sandbox": {"fixed": {"ABC": "1.00"}}}})
    assert response.status_code == 400
    assert [problem["field"] for problem in (await response.get_json())["details"]] == [
        "fees.sandbox.fixed.ABC"
    ]


async def test_an_evaluated_document_names_only_catalogue_methods(client: Client, shop: Shop) -> None:
    response = await _evaluate(client, shop, {**session_body(), "routing": _when(paymentMethods=["cheque"])})
    assert response.status_code == 400
    assert [problem["field"] for problem in (await response.get_json())["details"]] == [
        "routing.rules.0.when.paymentMethods.0"
    ]


async def test_a_payment_method_written_in_another_case_is_400_on_put_and_evaluate(
    client: Client, shop: Shop, db: Database
) -> None:
    document = _when(paymentMethods=["Card"])
    refusals = [
        await _put(client, shop, document),
        await _evaluate(client, shop, {**session_body(), "routing": document}),
    ]
    for response, at in zip(refusals, ("", "routing."), strict=True):
        assert response.status_code == 400
        assert (await response.get_json())["details"] == [
            {
                "field": f"{at}rules.0.when.paymentMethods.0",
                "message": "'Card' is not a payment method payorch offers (names are lower case: 'card'): "
                "use apple_pay, blik or card",
            }
        ]
    assert await stored_versions(db, shop.application_id) == []


@pytest.mark.parametrize(
    ("when", "field"),
    [
        ({"amount": {"min": 1000}}, "rules.0.when.amount"),
        ({"currencies": ["EUR", "JPY"], "amount": {"min": Decimal("9.99")}}, "rules.0.when.amount.min"),
        ({"currencies": ["EUR"], "amount": {"min": 0, "max": Decimal("0.001")}}, "rules.0.when.amount.max"),
        ({"currencies": ["JPY"], "amount": {"min": Decimal("0.5")}}, "rules.0.when.amount.min"),
        ({"currencies": ["EUR"], "amount": {"max": 0}}, "rules.0.when.amount.max"),
    ],
    ids=[
        "no currency",
        "a decimal JPY cannot hold",
        "below the minor unit",
        "more decimals than JPY",
        "max 0",
    ],
)
async def test_amount_bounds_that_are_no_amount_of_one_currency_are_400_naming_them(
    client: Client, shop: Shop, db: Database, when: dict[str, Any], field: str
) -> None:
    document = _when(**when)
    for response, at in [
        (await _put(client, shop, document), ""),
        (await _evaluate(client, shop, {**session_body(), "routing": document}), "routing."),
    ]:
        assert response.status_code == 400
        body = await response.get_json()
        assert (body["code"], [problem["field"] for problem in body["details"]]) == (400, [at + field])
    assert await stored_versions(db, shop.application_id) == []


async def test_amount_bounds_of_the_rules_one_currency_are_stored(client: Client, shop: Shop) -> None:
    document = _when(currencies=["JPY"], amount={"min": 1000, "max": Decimal("5000.00")})
    response = await _put(client, shop, document)
    assert response.status_code == 200, await response.get_data(as_text=True)
    assert (await response.get_json())["rules"][0]["when"]["amount"] == {"min": 1000, "max": 5000}


# --- Every decimal bounded -------------------------------------------------------------------------


def _fee(**fee: Any) -> dict[str, Any]:
    return {"objective": "net", "fees": {"sandbox": fee}}


@pytest.mark.parametrize(
    ("document", "field"),
    [
        (_fee(fixed={"PLN": Decimal("1e400")}), "fees.sandbox.fixed.PLN"),
        (_fee(fixed={"PLN": "1" + "0" * 5000}), "fees.sandbox.fixed.PLN"),
        (_fee(fixed={"PLN": Decimal("1e15")}), "fees.sandbox.fixed.PLN"),
        (_fee(fixed={"PLN": "0.0000001"}), "fees.sandbox.fixed.PLN"),
        (_fee(fixed={"PLN": "NaN"}), "fees.sandbox.fixed.PLN"),
        (_fee(fixed={"PLN": "Infinity"}), "fees.sandbox.fixed.PLN"),
        (_fee(fixed={"PLN": "-1.00"}), "fees.sandbox.fixed.PLN"),
        (_fee(percent="100.5"), "fees.sandbox.percent"),
        (_fee(percent=Decimal("1e-400")), "fees.sandbox.percent"),
        (_when(amount={"max": Decimal("1e400")}), "rules.0.when.amount.max"),
        (_when(amount={"min": Decimal("0.0000001")}), "rules.0.when.amount.min"),
        (_when(amount={"min": -1}), "rules.0.when.amount.min"),
        ({"default": {"type": "split", "weights": {"sandbox": Decimal("1e400")}}}, "default.weights.sandbox"),
    ],
    ids=[
        "fixed 1e400",
        "fixed 5001 digits",
        "fixed 1e15",
        "fixed 7 places",
        "fixed NaN",
        "fixed Infinity",
        "fixed negative",
        "percent over 100",
        "percent 1e-400",
        "amount 1e400",
        "amount 7 places",
        "amount negative",
        "weight 1e400",
    ],
)
async def test_a_decimal_out_of_bounds_is_400_naming_it_and_nothing_is_stored(
    client: Client, shop: Shop, db: Database, document: dict[str, Any], field: str
) -> None:
    response = await _put(client, shop, document)
    assert response.status_code == 400, await response.get_data(as_text=True)
    assert [problem["field"] for problem in (await response.get_json())["details"]] == [field]
    assert await stored_versions(db, shop.application_id) == []


async def test_the_largest_decimals_in_bounds_are_stored_and_route(client: Client, shop: Shop) -> None:
    largest = "999999999999999.999999"
    when = {"currencies": ["KWD"], "amount": {"max": Decimal("999999999999999.999")}}
    document = {
        **_fee(percent="100", fixed={"PLN": largest}),
        "rules": [{"name": "r", "when": when, "route": {"type": "dynamic"}}],
    }
    response = await _put(client, shop, document)
    assert response.status_code == 200, await response.get_data(as_text=True)
    assert (await create_session(client, shop, "k1")).status_code == 201


async def test_a_fee_of_1e400_is_refused_and_creates_still_work(
    client: Client, shop: Shop, db: Database
) -> None:
    # Such a document was once stored, and then every create answered 500.
    response = await client.put(
        _path(shop.application_id),
        data=b'{"fees": {"sandbox": {"fixed": {"PLN": 1e400}}}}',
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert [problem["field"] for problem in (await response.get_json())["details"]] == [
        "fees.sandbox.fixed.PLN"
    ]
    assert (await create_session(client, shop, "after")).status_code == 201
    assert (await _evaluate(client, shop, session_body())).status_code == 200


async def test_a_document_stored_before_the_bounds_still_routes(
    client: Client, shop: Shop, db: Database
) -> None:
    # Stored by an earlier payorch, which took any finite fee: read back, it routes as the largest
    # fee there is instead of failing the application's actor.
    stored = {
        "rules": [
            {
                "name": "old",
                "when": {"currencies": ["XTS"], "countries": ["EU"]},
                "route": {"type": "dynamic"},
            }
        ],
        "default": {"type": "dynamic"},
        "fees": {"sandbox": {"percent": "0", "fixed": {"PLN": "1" + "0" * 5000}}},
        "objective": "net",
    }

    async def store(conn: Connection) -> None:
        await conn.execute(
            """INSERT INTO routing_documents (application_id, version, document, created_at)
               VALUES ($1, 1, $2, now())""",
            uuid.UUID(shop.application_id),
            stored,
        )

    await db.transaction(store)
    created = await create_session(client, shop, "k1")
    assert created.status_code == 201, await created.get_data(as_text=True)
    assert (await created.get_json())["routing"]["version"] == 1
    evaluated = await _evaluate(client, shop, session_body())
    assert evaluated.status_code == 200
    assert (await evaluated.get_json())["ranking"][0]["score"] == 0
