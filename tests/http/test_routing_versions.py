"""An application's routing document versions through the API: the version in force as a strong
`ETag`, a PUT made on the condition of a version (`If-Match`: 412 and nothing stored when another
is in force), the kept versions listed a page at a time with who stored them, one read back, and a
PUT of it restoring it as a new version. (The document itself: tests/http/test_routing.py.)"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
import trio

from payorch.config import LimitSettings, Settings
from payorch.jsonexact import dumps_exact
from payorch.storage.database import Database
from tests.helpers import Client, Merchant, Shop, new_merchant, new_shop, put_routing
from tests.http.test_routing_bounds import stored_versions

CHANGES_BURST = 3


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Room for a few versions per test, and a bucket that does not refill within one.
    limits = LimitSettings(routing_changes_per_hour=0.1, routing_changes_burst=CHANGES_BURST)
    return settings.model_copy(update={"limits": limits})


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def _path(application_id: str, rest: str = "") -> str:
    return f"/api/v1/applications/{application_id}/routing{rest}"


def _named(name: str) -> dict[str, Any]:
    return {"rules": [{"name": name, "route": {"type": "priority", "providers": ["sandbox"]}}]}


async def _put(client: Client, shop: Shop, document: Any, if_match: str | None = None) -> Any:
    headers = {**shop.merchant.headers, "Content-Type": "application/json"}
    if if_match is not None:
        headers["If-Match"] = if_match
    return await client.put(_path(shop.application_id), data=dumps_exact(document), headers=headers)


def _user_id(merchant: Merchant) -> str:
    """The id of the user whose access token `merchant` holds (its `sub` claim)."""
    payload = merchant.access_token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return str(claims["sub"])


# --- ETag and If-Match -----------------------------------------------------------------------------


async def test_get_answers_the_version_in_force_as_a_strong_etag(client: Client, shop: Shop) -> None:
    before = await client.get(_path(shop.application_id), headers=shop.merchant.headers)
    assert before.headers["ETag"] == '"0"'
    stored = await _put(client, shop, _named("a"))
    assert (stored.status_code, stored.headers["ETag"]) == (200, '"1"')
    after = await client.get(_path(shop.application_id), headers=shop.merchant.headers)
    assert (after.headers["ETag"], (await after.get_json())["version"]) == ('"1"', 1)


async def test_put_on_the_version_in_force_stores_the_next_one(client: Client, shop: Shop) -> None:
    await put_routing(client, shop, _named("a"))
    response = await _put(client, shop, _named("b"), if_match='"1"')
    assert response.status_code == 200, await response.get_data(as_text=True)
    assert ((await response.get_json())["version"], response.headers["ETag"]) == (2, '"2"')


async def test_put_on_a_stale_version_is_412_and_stores_nothing(
    client: Client, shop: Shop, db: Database
) -> None:
    await put_routing(client, shop, _named("a"))
    await put_routing(client, shop, _named("b"))
    response = await _put(client, shop, _named("c"), if_match='"1"')
    assert response.status_code == 412
    body = await response.get_json()
    assert (body["error"], body["code"]) == ("Precondition Failed", 412)
    assert "version 2" in body["message"]
    assert await stored_versions(db, shop.application_id) == [1, 2]
    current = await client.get(_path(shop.application_id), headers=shop.merchant.headers)
    assert (await current.get_json())["rules"][0]["name"] == "b"


async def test_if_match_0_stores_only_while_no_document_was_ever_stored(
    client: Client, shop: Shop, db: Database
) -> None:
    assert (await _put(client, shop, _named("first"), if_match='"0"')).status_code == 200
    assert (await _put(client, shop, _named("second"), if_match='"0"')).status_code == 412
    assert await stored_versions(db, shop.application_id) == [1]


async def test_if_match_may_list_several_versions_or_be_any(client: Client, shop: Shop) -> None:
    await put_routing(client, shop, _named("a"))
    assert (await _put(client, shop, _named("b"), if_match='"7", "1"')).status_code == 200
    assert (await _put(client, shop, _named("c"), if_match="*")).status_code == 200


async def test_a_weak_or_foreign_entity_tag_matches_no_version(
    client: Client, shop: Shop, db: Database
) -> None:
    await put_routing(client, shop, _named("a"))
    for tag in ('W/"1"', '"v1"', '"01x"'):
        response = await _put(client, shop, _named("b"), if_match=tag)
        assert response.status_code == 412, tag
    assert await stored_versions(db, shop.application_id) == [1]


@pytest.mark.parametrize("header", ["1", "", '"1', "1, 2"])
async def test_if_match_that_is_not_entity_tags_is_400_naming_it(
    client: Client, shop: Shop, db: Database, header: str
) -> None:
    response = await _put(client, shop, _named("a"), if_match=header)
    assert response.status_code == 400
    body = await response.get_json()
    assert body["details"] == [
        {
            "field": "If-Match",
            "message": 'must be entity tags as ETag writes them, such as "3" (quoted), or *',
        }
    ]
    assert await stored_versions(db, shop.application_id) == []


async def test_a_refused_precondition_takes_no_change(client: Client, shop: Shop, db: Database) -> None:
    await put_routing(client, shop, _named("a"))
    for _ in range(CHANGES_BURST):
        assert (await _put(client, shop, _named("late"), if_match='"0"')).status_code == 412
    for name in ("b", "c"):  # the burst's two changes left are still there
        assert (await _put(client, shop, _named(name))).status_code == 200
    assert await stored_versions(db, shop.application_id) == [1, 2, 3]


async def test_two_changes_made_on_the_same_version_at_once_store_one_and_refuse_the_other(
    client: Client, shop: Shop, db: Database
) -> None:
    await put_routing(client, shop, _named("a"))
    statuses: list[int] = []

    async def change(name: str) -> None:
        statuses.append((await _put(client, shop, _named(name), if_match='"1"')).status_code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(change, "b")
        nursery.start_soon(change, "c")
    assert sorted(statuses) == [200, 412]
    assert await stored_versions(db, shop.application_id) == [1, 2]


# --- The versions kept -----------------------------------------------------------------------------


async def test_versions_are_listed_newest_first_with_who_stored_them(client: Client, shop: Shop) -> None:
    stored = [await put_routing(client, shop, _named(name)) for name in ("a", "b", "c")]
    response = await client.get(_path(shop.application_id, "/versions"), headers=shop.merchant.headers)
    assert response.status_code == 200
    body = await response.get_json()
    author = _user_id(shop.merchant)
    assert body["items"] == [
        {"version": item["version"], "updatedAt": item["updatedAt"], "updatedBy": author}
        for item in reversed(stored)
    ]
    assert (body["page"], body["limit"], body["totalItems"]) == (1, 20, 3)


async def test_versions_are_paged_as_every_list(client: Client, shop: Shop) -> None:
    for name in ("a", "b", "c"):
        await put_routing(client, shop, _named(name))
    path = _path(shop.application_id, "/versions")
    second = await client.get(path, query_string={"page": "2", "limit": "2"}, headers=shop.merchant.headers)
    assert [item["version"] for item in (await second.get_json())["items"]] == [1]
    past = await client.get(path, query_string={"page": "9"}, headers=shop.merchant.headers)
    assert (await past.get_json())["items"] == []
    wrong = await client.get(path, query_string={"limit": "0"}, headers=shop.merchant.headers)
    assert wrong.status_code == 400


async def test_an_application_that_never_stored_a_document_lists_no_version(
    client: Client, shop: Shop
) -> None:
    response = await client.get(_path(shop.application_id, "/versions"), headers=shop.merchant.headers)
    assert ((await response.get_json())["items"], (await response.get_json())["totalItems"]) == ([], 0)


async def test_a_kept_version_reads_back_as_it_was_in_force_and_a_put_of_it_restores_it(
    client: Client, shop: Shop, db: Database
) -> None:
    first = await put_routing(client, shop, _named("a"))
    await put_routing(client, shop, _named("b"))
    response = await client.get(_path(shop.application_id, "/versions/1"), headers=shop.merchant.headers)
    assert response.status_code == 200
    kept = await response.get_json()
    assert kept == first
    restored = await _put(client, shop, kept, if_match='"2"')
    assert restored.status_code == 200
    body = await restored.get_json()
    assert (body["version"], body["rules"]) == (3, first["rules"])
    assert await stored_versions(db, shop.application_id) == [1, 2, 3]


@pytest.mark.parametrize(
    "version", ["0", "2", "99", "2147483648", "99999999999999999999", "1.0", "-1", "one"]
)
async def test_a_version_the_application_does_not_keep_is_404(
    client: Client, shop: Shop, version: str
) -> None:
    await put_routing(client, shop, _named("a"))
    response = await client.get(
        _path(shop.application_id, f"/versions/{version}"), headers=shop.merchant.headers
    )
    assert response.status_code == 404
    assert (await response.get_json())["code"] == 404


async def test_another_applications_version_is_not_this_ones(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    other = await new_shop(client, db, settings)
    await put_routing(client, other, _named("other"))
    response = await client.get(_path(shop.application_id, "/versions/1"), headers=shop.merchant.headers)
    assert response.status_code == 404


# --- Who may read them -----------------------------------------------------------------------------


async def test_another_merchants_versions_are_403_and_an_unknown_application_404(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    await put_routing(client, shop, _named("a"))
    stranger = await new_merchant(client, db, settings)
    for rest in ("/versions", "/versions/1"):
        assert (
            await client.get(_path(shop.application_id, rest), headers=stranger.headers)
        ).status_code == 403
        unknown = _path(str(uuid.uuid4()), rest)
        assert (await client.get(unknown, headers=shop.merchant.headers)).status_code == 404
    response = await _put(client, shop, _named("b"), if_match='"1"')  # the stranger changed nothing
    assert response.status_code == 200


async def test_an_api_key_is_401_for_the_versions(client: Client, shop: Shop) -> None:
    for rest in ("/versions", "/versions/1"):
        assert (await client.get(_path(shop.application_id, rest), headers=shop.headers)).status_code == 401
