"""An application's routing document through the API: read (the default until one is stored),
replaced as a new version with every earlier one kept, refused with every problem named."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest
import trio

from payorch.config import Settings
from payorch.engine.routing_rules import MAX_DOCUMENT_BYTES
from payorch.jsonexact import dumps_exact
from payorch.storage.database import Connection, Database
from tests.helpers import Client, Merchant, Shop, new_application, new_merchant, new_shop

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

    async def put() -> None:
        statuses.append((await _put(client, shop, DOCUMENT)).status_code)

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(put)
    assert statuses == [200] * 5
    assert [version for version, _ in await _versions(db, shop.application_id)] == [1, 2, 3, 4, 5]


async def test_a_document_read_can_be_sent_back_as_it_is(client: Client, shop: Shop) -> None:
    first = await (await _put(client, shop, DOCUMENT)).get_json()
    again = await _put(client, shop, first)
    assert again.status_code == 200
    second = await again.get_json()
    assert second["version"] == 2
    assert {key: second[key] for key in DOCUMENT} == {key: first[key] for key in DOCUMENT}
    assert second["rules"][0]["when"]["amount"] == {"min": Decimal(0), "max": Decimal(5000)}


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
