"""Every input is bounded before it costs anything: body sizes per route, JSON nesting, numbers and text
PostgreSQL cannot store, free-form objects. Each refusal is a 400 (or 413) in shape A and changes
nothing; the login and signup limiter is charged before any body is read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest
import simplejson
import trio
from quart import Response

from payorch.config import LimitSettings, Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.http.jsonio import MAX_NESTING_DEPTH
from payorch.http.models import FREE_FORM_MAX_BYTES, FREE_FORM_MAX_ENTRIES
from payorch.http.operations.applications import APPLICATION_MAX_BODY_BYTES
from payorch.http.routes.accounts import LOGIN_MAX_BODY_BYTES, SIGNUP_MAX_BODY_BYTES
from payorch.runtime import open_runtime
from payorch.storage.database import Connection, Database
from tests.helpers import (
    PASSWORD,
    Client,
    Merchant,
    Shop,
    create_session,
    new_shop,
    session_body,
    signup_body,
)
from tests.http.test_errors import fields_named, shape_a_body

JSON = {"Content-Type": "application/json"}
ASTRAL = "\U0001f600"  # sent as a \ud83d\ude00 escape pair: 12 bytes for one character


def nested(depth: int, inner: str = "1") -> str:
    """JSON text of `depth` arrays inside each other."""
    return "[" * depth + inner + "]" * depth


async def post_text(client: Client, path: str, text: str, headers: dict[str, str] | None = None) -> Response:
    return await client.post(path, data=text.encode(), headers={**JSON, **(headers or {})})


async def create_application(client: Client, merchant: Merchant, text: str) -> Response:
    return await post_text(client, "/api/v1/applications", text, merchant.headers)


async def application_count(db: Database) -> int:
    async def query(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM applications"))

    return await db.autocommit(query)


async def refused(response: Response, status: int = 400) -> dict[str, Any]:
    body = await shape_a_body(response, status)
    if status == 400:
        assert fields_named(body)
    return body


# --- Body size per route -----------------------------------------------------------------------


async def test_login_body_over_its_limit_is_413_naming_the_limit(client: Client) -> None:
    text = json.dumps({"email": "a@b.example", "password": "x" * LOGIN_MAX_BODY_BYTES})
    body = await refused(await post_text(client, "/api/v1/auth/login", text), 413)
    assert str(LOGIN_MAX_BODY_BYTES) in body["message"]


async def test_signup_body_over_its_limit_is_413(client: Client, db: Database, settings: Settings) -> None:
    invite = await issue_invite(db, settings, "big@merchant.example")
    body = signup_body("big@merchant.example", "REG-BIG")
    body["organization"]["industry"] = "x" * SIGNUP_MAX_BODY_BYTES
    response = await post_text(client, f"/api/v1/merchants/signup?token={invite.token}", json.dumps(body))
    await refused(response, 413)


async def test_largest_valid_login_body_fits_its_limit_even_all_escaped(client: Client) -> None:
    text = json.dumps({"email": ASTRAL * 320, "password": ASTRAL * 256}, ensure_ascii=True)
    assert len(text) <= LOGIN_MAX_BODY_BYTES
    assert (await post_text(client, "/api/v1/auth/login", text)).status_code == 401


def test_largest_valid_signup_body_fits_its_limit_even_all_escaped() -> None:
    def longest(value: Any) -> Any:
        # Every text at its longest (255 characters is the bound of any signup field), none shorter.
        if isinstance(value, dict):
            return {key: longest(item) for key, item in value.items()}
        return ASTRAL * 255

    text = json.dumps(longest(signup_body("a@b.example", "REG-1")), ensure_ascii=True)
    assert len(text) <= SIGNUP_MAX_BODY_BYTES


async def test_body_over_its_limit_is_refused_before_it_ends(client: Client) -> None:
    # No Content-Length and a body that never ends: the answer cannot wait for the whole body.
    async with client.request("/api/v1/auth/login", method="POST", headers=JSON) as connection:
        with trio.fail_after(10):
            await connection.send(b'{"email": "' + b"a" * (LOGIN_MAX_BODY_BYTES + 1))
            response = await connection.as_response()
    await refused(response, 413)


async def test_other_routes_keep_the_general_body_limit(client: Client, merchant: Merchant) -> None:
    description = {"notes": "x" * (LOGIN_MAX_BODY_BYTES + 100)}
    response = await client.post(
        "/api/v1/applications", json={"name": "Shop", "description": description}, headers=merchant.headers
    )
    assert response.status_code == 201, await response.get_data(as_text=True)


# --- Nesting -----------------------------------------------------------------------------------


async def test_deeply_nested_json_is_400_not_500(client: Client) -> None:
    response = await post_text(client, "/api/v1/auth/login", f'{{"email": {nested(3000)}}}')
    body = await refused(response)
    assert fields_named(body) == ["body"]
    assert str(MAX_NESTING_DEPTH) in body["details"][0]["message"]


async def test_nesting_far_past_the_parsers_recursion_is_400(
    client: Client, merchant: Merchant, db: Database
) -> None:
    before = await application_count(db)
    response = await create_application(
        client, merchant, f'{{"name": "Shop", "description": {nested(40_000)}}}'
    )
    await refused(response)
    assert await application_count(db) == before


def description_nested(arrays: int) -> str:
    """An application body nesting 3 + `arrays` levels deep: the body, `description`, `arrays` arrays
    and an empty object inside them."""
    return f'{{"name": "Shop", "description": {{"deep": {nested(arrays, "{}")}}}}}'


async def test_nesting_at_the_limit_is_accepted_and_stored(client: Client, merchant: Merchant) -> None:
    response = await create_application(client, merchant, description_nested(MAX_NESTING_DEPTH - 3))
    assert response.status_code == 201, await response.get_data(as_text=True)
    deepest = (await response.get_json())["description"]["deep"]
    for _ in range(MAX_NESTING_DEPTH - 3):
        deepest = deepest[0]
    assert deepest == {}


async def test_nesting_one_past_the_limit_is_400(client: Client, merchant: Merchant) -> None:
    text = description_nested(MAX_NESTING_DEPTH - 2)
    await refused(await create_application(client, merchant, text))


async def test_brackets_inside_strings_are_not_nesting(client: Client, merchant: Merchant) -> None:
    notes = '[{"\\' + "[" * 100
    response = await client.post(
        "/api/v1/applications",
        json={"name": "Shop", "description": {"notes": notes}},
        headers=merchant.headers,
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    assert (await response.get_json())["description"]["notes"] == notes


# --- The login and signup limiter is charged before the body is read ------------------------------

LOGINS = 3


@pytest.fixture
async def limited(settings: Settings, db: Database) -> AsyncIterator[Client]:
    """A client of an app whose bucket holds 3 logins or signups per address, refilled slowly."""
    small = settings.model_copy(
        update={
            "limits": LimitSettings(
                requests_per_second=100, burst=100, login_per_minute=LOGINS, login_refusal_hold_s=0
            )
        }
    )
    async with open_runtime(small, db) as runtime:
        yield runtime.app.test_client()


async def test_refused_login_bodies_spend_the_address_bucket_then_a_valid_login_is_429(
    limited: Client, merchant: Merchant
) -> None:
    oversized = json.dumps({"email": merchant.email, "password": "x" * LOGIN_MAX_BODY_BYTES})
    await refused(await post_text(limited, "/api/v1/auth/login", oversized), 413)
    await refused(await post_text(limited, "/api/v1/auth/login", f'{{"email": {nested(3000)}}}'))
    await refused(await post_text(limited, "/api/v1/auth/login", '{"email": '))
    response = await limited.post("/api/v1/auth/login", json={"email": merchant.email, "password": PASSWORD})
    await refused(response, 429)


async def test_refused_signup_bodies_spend_the_address_bucket(
    limited: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    invite = await issue_invite(db, settings, "later@merchant.example")
    path = f"/api/v1/merchants/signup?token={invite.token}"
    for _ in range(LOGINS):
        await refused(await post_text(limited, path, f'{{"admin": {nested(3000)}}}'))
    response = await limited.post(path, json=signup_body("later@merchant.example", "REG-LATER"))
    await refused(response, 429)


# --- Text PostgreSQL cannot store --------------------------------------------------------------


# Every place and kind is in tests/http/test_jsonio.py; here, through the app and its database.
@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"name": "Shop\\ud800"}', "name"),
        ('{"name": "Shop\\u0000"}', "name"),
        ('{"name": "Shop", "description": {"notes": ["ok", "x\\uDFFF"]}}', "description.notes[1]"),
        ('{"name": "Shop", "description": {"a": {"k\\ud800": 1}}}', "description.a.k\\ud800"),
        ('{"name": "Shop", "description": {"a": {"k\\u0000": 1}}}', "description.a.k\\u0000"),
    ],
    ids=["lone_surrogate_in_name", "nul_in_name", "nested_value", "surrogate_in_nested_key", "nul_in_key"],
)
async def test_unstorable_text_in_a_body_is_400_naming_where(
    client: Client, merchant: Merchant, db: Database, text: str, field: str
) -> None:
    before = await application_count(db)
    body = await refused(await create_application(client, merchant, text))
    assert fields_named(body) == [field]
    assert await application_count(db) == before


async def test_lone_surrogate_in_login_is_400_not_401(client: Client) -> None:
    response = await post_text(
        client, "/api/v1/auth/login", '{"email": "a\\ud800@b.example", "password": "x"}'
    )
    body = await refused(response)
    assert fields_named(body) == ["email"]


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


@pytest.mark.parametrize(
    "extra",
    [
        {"orderReference": "order-\ud800"},
        {"additionalInformation": {"k\ud800": "v"}},
        {"customer": {"email": "buyer@example.com", "firstName": "Jan\x00"}},
    ],
    ids=["order_reference", "additional_information_key", "customer_name"],
)
async def test_unstorable_text_in_a_session_is_400(client: Client, shop: Shop, extra: dict[str, Any]) -> None:
    text = simplejson.dumps(session_body(**extra), use_decimal=True)  # escapes: \ud800, \u0000
    response = await post_text(client, "/api/v1/sessions", text, {**shop.headers, "Idempotency-Key": "k-1"})
    await refused(response)
    # The key was not claimed by the refused request: the same key with a good body succeeds.
    assert (await create_session(client, shop, "k-1")).status_code == 201


async def test_surrogate_pair_is_one_character_and_accepted(client: Client, merchant: Merchant) -> None:
    response = await create_application(
        client, merchant, '{"name": "Shop \\ud83d\\ude00", "description": {"\\ud83d\\ude00": "\\u00e9"}}'
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    created = await response.get_json()
    assert created["name"] == "Shop \U0001f600"
    assert created["description"] == {"\U0001f600": "é"}


async def test_escaped_backslash_before_u_is_plain_text(client: Client, merchant: Merchant) -> None:
    response = await create_application(client, merchant, '{"name": "Shop \\\\ud800 \\\\u0000"}')
    assert response.status_code == 201, await response.get_data(as_text=True)
    assert (await response.get_json())["name"] == "Shop \\ud800 \\u0000"


async def test_nul_in_a_query_string_is_400(client: Client) -> None:
    response = await client.post(
        "/api/v1/merchants/signup?token=abc%00def", json=signup_body("a@b.example", "R")
    )
    body = await refused(response)
    assert fields_named(body) == ["token"]


async def test_query_string_that_is_not_utf8_is_400_not_500(client: Client, merchant: Merchant) -> None:
    # HTTP/2 lets such bytes through to the app; they reach validation percent-encoded.
    response = await client.get(
        "/api/v1/applications", headers=merchant.headers, scope_base={"query_string": b"include=\xff"}
    )
    body = await refused(response)
    assert fields_named(body) == ["include"]


# --- Numbers -----------------------------------------------------------------------------------


# Every bound is in tests/http/test_jsonio.py; here, through the app and its database.
@pytest.mark.parametrize("number", ["1e999999", "1e-16384"])
async def test_number_jsonb_cannot_hold_in_a_description_is_400(
    client: Client, merchant: Merchant, db: Database, number: str
) -> None:
    before = await application_count(db)
    text = f'{{"name": "Shop", "description": {{"x": {number}}}}}'
    body = await refused(await create_application(client, merchant, text))
    assert fields_named(body) == ["body"]
    assert await application_count(db) == before


async def test_numbers_at_the_bounds_are_stored_exactly(client: Client, merchant: Merchant) -> None:
    numbers = ["1e1000", "-1.5e-1000", "9" * 100, "0." + "1" * 99, "6.02214076e23"]
    text = f'{{"name": "Shop", "description": {{"x": [{", ".join(numbers)}]}}}}'
    response = await create_application(client, merchant, text)
    assert response.status_code == 201, await response.get_data(as_text=True)
    application_id = (await response.get_json())["id"]
    read = await client.get(f"/api/v1/applications/{application_id}", headers=merchant.headers)
    stored = json.loads(await read.get_data(as_text=True), parse_float=Decimal)["description"]["x"]
    assert [Decimal(number) for number in stored] == [Decimal(number) for number in numbers]


async def test_amount_with_a_huge_exponent_is_400(client: Client, shop: Shop) -> None:
    text = simplejson.dumps(session_body(), use_decimal=True)
    assert '"total": 100.00' in text
    text = text.replace('"total": 100.00', '"total": 1e-16384')
    response = await post_text(client, "/api/v1/sessions", text, {**shop.headers, "Idempotency-Key": "k-2"})
    await refused(response)


async def test_stored_json_beyond_the_request_bounds_still_reads(db: Database) -> None:
    # The bounds are the requests'; what the database holds is read back whatever it is.
    stored_text = f'{{"x": 1e2000, "y": {nested(MAX_NESTING_DEPTH + 10)}}}'

    async def query(conn: Connection) -> Any:
        return await conn.fetchval("SELECT $1::text::jsonb", stored_text)

    stored = await db.autocommit(query)
    assert stored["x"] == Decimal("1e2000")


# --- Free-form objects -------------------------------------------------------------------------


async def test_description_over_its_size_is_400_naming_it(client: Client, merchant: Merchant) -> None:
    description = {"notes": "x" * FREE_FORM_MAX_BYTES}
    response = await client.post(
        "/api/v1/applications", json={"name": "Shop", "description": description}, headers=merchant.headers
    )
    body = await refused(response)
    assert fields_named(body) == ["description"]


async def test_description_with_too_many_entries_is_400_naming_it(client: Client, merchant: Merchant) -> None:
    description = {"items": list(range(FREE_FORM_MAX_ENTRIES))}
    response = await client.post(
        "/api/v1/applications", json={"name": "Shop", "description": description}, headers=merchant.headers
    )
    body = await refused(response)
    assert fields_named(body) == ["description"]


async def test_megabyte_description_is_413_before_it_is_parsed(
    client: Client, merchant: Merchant, db: Database
) -> None:
    before = await application_count(db)
    description = {f"k{index}": index for index in range(50_000)}  # about 800 KB, within the ceiling
    response = await client.post(
        "/api/v1/applications", json={"name": "Shop", "description": description}, headers=merchant.headers
    )
    body = await refused(response, 413)
    assert str(APPLICATION_MAX_BODY_BYTES) in body["message"]
    assert await application_count(db) == before


async def test_largest_valid_description_fits_the_application_body_limit_even_all_escaped(
    client: Client, merchant: Merchant
) -> None:
    description = {"notes": "x" * (FREE_FORM_MAX_BYTES - 20)}
    text = json.dumps({"name": "Shop", "description": description}).replace("x", "\\u0078")
    assert len(text) <= APPLICATION_MAX_BODY_BYTES
    response = await create_application(client, merchant, text)
    assert response.status_code == 201, await response.get_data(as_text=True)


async def test_description_at_its_bounds_is_accepted(client: Client, merchant: Merchant) -> None:
    description = {"items": list(range(FREE_FORM_MAX_ENTRIES - 1))}
    response = await client.post(
        "/api/v1/applications", json={"name": "Shop", "description": description}, headers=merchant.headers
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
