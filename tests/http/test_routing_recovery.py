"""An application's recovery policy through the routing API: stored and read back with the rest of
the document, left out of a document without one, refused with every wrong place named, and shown
by evaluate as the attempts a session would get. (The attempts across two providers:
tests/providers/test_recovery_evaluate.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from payorch.config import Settings
from payorch.storage.database import Database
from tests.helpers import Client, Shop, new_shop, post_json, put_routing, session_body

RECOVERY = {
    "maxAttempts": 2,
    "retryOn": ["CARD_DECLINED", "INSUFFICIENT_FUNDS"],
    "neverRetry": ["do_not_honor"],
}


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def _path(shop: Shop) -> str:
    return f"/api/v1/applications/{shop.application_id}/routing"


async def _put(client: Client, shop: Shop, document: Any) -> Any:
    return await client.put(_path(shop), json=document, headers=shop.merchant.headers)


async def test_a_recovery_policy_is_stored_and_read_back_as_sent(client: Client, shop: Shop) -> None:
    stored = await put_routing(client, shop, {"recovery": RECOVERY})
    assert stored["recovery"] == RECOVERY
    read = await client.get(_path(shop), headers=shop.merchant.headers)
    assert (await read.get_json())["recovery"] == RECOVERY


async def test_a_recovery_policy_without_its_lists_reads_back_with_their_defaults(
    client: Client, shop: Shop
) -> None:
    stored = await put_routing(client, shop, {"recovery": {"maxAttempts": 3}})
    assert stored["recovery"] == {
        "maxAttempts": 3,
        "retryOn": ["CARD_DECLINED", "INSUFFICIENT_FUNDS", "EXPIRED_OR_CANCELED_CARD", "PAYMENT_FAILED"],
        "neverRetry": [],
    }


async def test_a_document_read_with_its_recovery_and_sent_back_stores_nothing(
    client: Client, shop: Shop
) -> None:
    stored = await put_routing(client, shop, {"recovery": RECOVERY})
    again = await put_routing(client, shop, stored)
    assert again["version"] == stored["version"]


async def test_a_document_without_recovery_reads_without_it(client: Client, shop: Shop) -> None:
    stored = await put_routing(client, shop, {"objective": "net"})
    assert "recovery" not in stored


@pytest.mark.parametrize(
    ("recovery", "fields"),
    [
        ("twice", ["recovery"]),
        ({"retryOn": ["CARD_DECLINED"]}, ["recovery.maxAttempts"]),
        ({"maxAttempts": 0}, ["recovery.maxAttempts"]),
        ({"maxAttempts": 6}, ["recovery.maxAttempts"]),
        ({"maxAttempts": True}, ["recovery.maxAttempts"]),
        ({"maxAttempts": 2, "tries": 3}, ["recovery.tries"]),
        ({"maxAttempts": 2, "retryOn": "CARD_DECLINED"}, ["recovery.retryOn"]),
        ({"maxAttempts": 2, "retryOn": []}, ["recovery.retryOn"]),
        ({"maxAttempts": 2, "retryOn": ["CARD_DECLINED", "SOMETHING"]}, ["recovery.retryOn.1"]),
        ({"maxAttempts": 2, "retryOn": ["EXPIRED"]}, ["recovery.retryOn.0"]),
        ({"maxAttempts": 2, "retryOn": ["LOST_OR_STOLEN_CARD"]}, ["recovery.retryOn.0"]),
        ({"maxAttempts": 2, "retryOn": ["CARD_DECLINED", "CARD_DECLINED"]}, ["recovery.retryOn.1"]),
        ({"maxAttempts": 2, "retryOn": ["CARD_DECLINED"] * 11}, ["recovery.retryOn"]),
        ({"maxAttempts": 2, "neverRetry": ["do not honor"]}, ["recovery.neverRetry.0"]),
        ({"maxAttempts": 2, "neverRetry": ["x" * 65]}, ["recovery.neverRetry.0"]),
        ({"maxAttempts": 2, "neverRetry": [7]}, ["recovery.neverRetry.0"]),
        ({"maxAttempts": 2, "neverRetry": ["fraudulent", "fraudulent"]}, ["recovery.neverRetry.1"]),
        ({"maxAttempts": 2, "neverRetry": [f"code_{n}" for n in range(101)]}, ["recovery.neverRetry"]),
        (
            {"maxAttempts": 9, "retryOn": ["NOPE"], "neverRetry": [""]},
            ["recovery.maxAttempts", "recovery.retryOn.0", "recovery.neverRetry.0"],
        ),
    ],
    ids=[
        "not an object",
        "maxAttempts left out",
        "maxAttempts 0",
        "maxAttempts 6",
        "maxAttempts a boolean",
        "unknown key",
        "retryOn not a list",
        "retryOn empty",
        "unknown reason",
        "not a decline's reason",
        "a hard decline's reason",
        "reason twice",
        "retryOn too long",
        "code with spaces",
        "code too long",
        "code not a string",
        "code twice",
        "neverRetry too long",
        "every place named",
    ],
)
async def test_a_bad_recovery_policy_is_400_naming_each_wrong_place_and_nothing_is_stored(
    client: Client, shop: Shop, recovery: Any, fields: list[str]
) -> None:
    response = await _put(client, shop, {"recovery": recovery})
    assert response.status_code == 400
    assert [problem["field"] for problem in (await response.get_json())["details"]] == fields
    read = await client.get(_path(shop), headers=shop.merchant.headers)
    assert (await read.get_json())["version"] == 0


async def test_evaluate_answers_one_attempt_without_a_recovery_policy(client: Client, shop: Shop) -> None:
    path = f"{_path(shop)}/evaluate"
    response = await post_json(client, path, session_body(), shop.merchant.headers)
    assert response.status_code == 200, await response.get_data(as_text=True)
    assert (await response.get_json())["attempts"] == [{"provider": "sandbox", "reason": "dynamic"}]


async def test_evaluate_names_a_bad_recovery_policy_tried_under_routing(client: Client, shop: Shop) -> None:
    tried = {"recovery": {"maxAttempts": 7}}
    response = await post_json(
        client, f"{_path(shop)}/evaluate", {**session_body(), "routing": tried}, shop.merchant.headers
    )
    assert response.status_code == 400
    assert [problem["field"] for problem in (await response.get_json())["details"]] == [
        "routing.recovery.maxAttempts"
    ]
