"""Rate limits through the app: a bucket per credential and per client address for login and signup,
answered with 429 in shape A carrying `retryAfter` and `Retry-After`.

Merchants, applications and keys are set up through the ordinary app (`client`); the limits are
tested on a second app over the same database whose buckets are small. Its refill is slow (one
token per 10 s, and per 30 s for logins) so that a slow machine cannot refill a bucket mid-test.
Refill over time is tested on the pure module with an explicit clock (tests/engine/test_ratelimit.py).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from quart import Response

from payorch.config import LimitSettings, Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.http.request_limits import LOGINS_PER_ADDRESS_WHILE_ACCOUNT_SPENT
from payorch.runtime import open_runtime
from payorch.storage.database import Connection, Database
from tests.helpers import (
    PASSWORD,
    Client,
    Merchant,
    Shop,
    new_api_key,
    new_merchant,
    new_shop,
    signup_body,
)

BURST = 3
LOGINS = 2
# Refused logins answered at once, not held (tests/http/test_login_refusal_hold.py holds them).
SMALL_LIMITS = LimitSettings(
    requests_per_second=0.1, burst=BURST, login_per_minute=LOGINS, login_refusal_hold_s=0
)
_numbers = itertools.count(1)


@pytest.fixture
async def limited(settings: Settings, db: Database) -> AsyncIterator[Client]:
    """A client of an app whose buckets hold 3 requests per credential and 2 logins per address."""
    small = settings.model_copy(update={"limits": SMALL_LIMITS})
    async with open_runtime(small, db) as runtime:
        yield runtime.app.test_client()


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def too_many_requests(response: Response) -> dict[str, Any]:
    """The body of a 429, checked to be shape A with `retryAfter` equal to `Retry-After`."""
    assert response.status_code == 429, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    assert set(body) == {"error", "message", "code", "retryAfter"}
    assert body["error"] == "Too Many Requests"
    assert body["code"] == 429
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["retryAfter"], int) and body["retryAfter"] >= 1
    assert response.headers["Retry-After"] == str(body["retryAfter"])
    return body


async def get_session_with(client: Client, headers: dict[str, str]) -> Response:
    # An unknown session: 404 after authentication, so each call spends exactly one token.
    return await client.get("/api/v1/sessions/00000000-0000-4000-8000-000000000000", headers=headers)


async def list_applications(client: Client, merchant: Merchant) -> Response:
    return await client.get("/api/v1/applications", headers=merchant.headers)


async def log_in(client: Client, email: str, password: str, address: str | None = None) -> Response:
    scope = {"client": (address, 40000)} if address else None
    return await client.post(
        "/api/v1/auth/login", json={"email": email, "password": password}, scope_base=scope
    )


async def sign_up(client: Client, db: Database, settings: Settings) -> tuple[Response, str, dict[str, Any]]:
    """A signup with a fresh invite: the response, and the path and body to send it again."""
    number = next(_numbers)
    email = f"limited{number}@merchant.example"
    invite = await issue_invite(db, settings, email)
    path = f"/api/v1/merchants/signup?token={invite.token}"
    body = signup_body(email, f"RL-{number:06d}")
    return await client.post(path, json=body), path, body


async def count(db: Database, table: str) -> int:
    async def query(conn: Connection) -> int:
        return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))  # noqa: S608

    return await db.autocommit(query)


async def test_api_key_request_beyond_the_burst_is_429_with_retry_after(limited: Client, shop: Shop) -> None:
    for _ in range(BURST):
        assert (await get_session_with(limited, shop.headers)).status_code == 404
    body = await too_many_requests(await get_session_with(limited, shop.headers))
    assert body["retryAfter"] <= 10  # one token comes back every 10 s


async def test_each_api_key_of_an_application_has_its_own_bucket(
    limited: Client, client: Client, shop: Shop
) -> None:
    second = await new_api_key(client, shop.merchant, shop.application_id)
    for _ in range(BURST):
        await get_session_with(limited, shop.headers)
    await too_many_requests(await get_session_with(limited, shop.headers))
    assert (await get_session_with(limited, {"X-API-Key": second["key"]})).status_code == 404


async def test_api_key_and_jwt_of_one_merchant_have_separate_buckets(limited: Client, shop: Shop) -> None:
    for _ in range(BURST):
        await get_session_with(limited, shop.headers)
    await too_many_requests(await get_session_with(limited, shop.headers))
    assert (await list_applications(limited, shop.merchant)).status_code == 200


async def test_jwt_requests_share_one_bucket_per_merchant(
    limited: Client, client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    other = await new_merchant(client, db, settings)
    relogin = await log_in(client, merchant.email, PASSWORD)
    second_token = Merchant(merchant.email, (await relogin.get_json())["accessToken"])
    assert second_token.access_token != merchant.access_token
    for _ in range(BURST):
        assert (await list_applications(limited, merchant)).status_code == 200
    await too_many_requests(await list_applications(limited, merchant))
    await too_many_requests(await list_applications(limited, second_token))
    assert (await list_applications(limited, other)).status_code == 200


async def test_429_changes_nothing(limited: Client, client: Client, db: Database, settings: Settings) -> None:
    merchant = await new_merchant(client, db, settings)
    for _ in range(BURST):
        await list_applications(limited, merchant)
    before = await count(db, "applications")
    response = await limited.post("/api/v1/applications", json={"name": "Shop"}, headers=merchant.headers)
    await too_many_requests(response)
    assert await count(db, "applications") == before


async def test_failed_credentials_are_not_charged_to_anyone(limited: Client, shop: Shop) -> None:
    for _ in range(2 * BURST):
        response = await get_session_with(limited, {"X-API-Key": shop.api_key + "x"})
        assert response.status_code == 401
    assert (await get_session_with(limited, shop.headers)).status_code == 404


async def test_health_probes_are_not_limited(limited: Client) -> None:
    for _ in range(2 * BURST):
        assert (await limited.get("/healthz")).status_code == 200


async def test_third_login_from_one_address_within_a_minute_is_429_even_with_a_wrong_password(
    limited: Client, client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    for _ in range(LOGINS):
        assert (await log_in(limited, merchant.email, PASSWORD + "x")).status_code == 401
    body = await too_many_requests(await log_in(limited, merchant.email, PASSWORD + "x"))
    assert body["retryAfter"] <= 30  # one attempt comes back every 30 s
    # The right password does not get through either: guessing stops at the limit.
    response = await log_in(limited, merchant.email, PASSWORD)
    await too_many_requests(response)
    assert "accessToken" not in await response.get_json()


async def test_another_address_has_its_own_login_bucket(
    limited: Client, client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    for _ in range(LOGINS):
        await log_in(limited, merchant.email, PASSWORD, address="192.0.2.1")
    await too_many_requests(await log_in(limited, merchant.email, PASSWORD, address="192.0.2.1"))
    assert (await log_in(limited, merchant.email, PASSWORD, address="192.0.2.2")).status_code == 200


async def test_addresses_in_one_ipv6_64_share_a_login_bucket_and_another_64_has_its_own(
    limited: Client, client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    for address in ("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:fffe"):
        assert (await log_in(limited, merchant.email, PASSWORD, address=address)).status_code == 200
    await too_many_requests(await log_in(limited, merchant.email, PASSWORD, address="2001:db8:1:2:abcd::9"))
    assert (await log_in(limited, merchant.email, PASSWORD, address="2001:db8:1:3::1")).status_code == 200


async def test_an_ipv4_mapped_ipv6_address_shares_the_bucket_of_its_ipv4_address(
    limited: Client, client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    for _ in range(LOGINS):
        assert (await log_in(limited, merchant.email, PASSWORD, address="192.0.2.10")).status_code == 200
    await too_many_requests(await log_in(limited, merchant.email, PASSWORD, address="::ffff:192.0.2.10"))
    # IPv4 addresses are counted one by one: the next address has its own bucket.
    assert (await log_in(limited, merchant.email, PASSWORD, address="192.0.2.11")).status_code == 200


async def test_signup_shares_the_login_bucket_and_a_refused_signup_creates_nothing(
    limited: Client, client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    for _ in range(LOGINS):
        assert (await log_in(limited, merchant.email, PASSWORD)).status_code == 200
    merchants_before = await count(db, "merchants")
    response, path, body = await sign_up(limited, db, settings)
    await too_many_requests(response)
    assert await count(db, "merchants") == merchants_before
    # The invite was not used up: the same signup succeeds from an address with tokens left (the
    # buckets are shared by every app on the database, so not from this one through another app).
    retry = await client.post(path, json=body, scope_base={"client": ("192.0.2.99", 40000)})
    assert retry.status_code == 201, await retry.get_data(as_text=True)


async def test_signups_spend_the_bucket_that_login_then_finds_empty(
    limited: Client, db: Database, settings: Settings
) -> None:
    for _ in range(LOGINS):
        response, _, _ = await sign_up(limited, db, settings)
        assert response.status_code == 201, await response.get_data(as_text=True)
    await too_many_requests(await log_in(limited, "nobody@merchant.example", PASSWORD))


FAILED_LOGINS = 3


@pytest.fixture
async def account_limited(settings: Settings, db: Database) -> AsyncIterator[Client]:
    """A client of an app that allows 3 failed logins per account and many logins per address."""
    limits = LimitSettings(login_per_minute=100, failed_logins_per_account_per_hour=FAILED_LOGINS)
    async with open_runtime(settings.model_copy(update={"limits": limits}), db) as runtime:
        yield runtime.app.test_client()


async def test_twenty_failed_logins_from_three_addresses_leave_the_right_password_from_a_fourth_working(
    client: Client, db: Database, settings: Settings
) -> None:
    # The default limits: 20 failed logins an account, 10 attempts an address a minute.
    merchant = await new_merchant(client, db, settings)
    for number in range(20):
        response = await log_in(client, merchant.email, PASSWORD + "x", address=f"192.0.2.{number % 3 + 1}")
        assert response.status_code == 401
    assert (await log_in(client, merchant.email, PASSWORD, address="198.51.100.7")).status_code == 200


async def test_once_an_accounts_failed_logins_are_spent_an_address_that_keeps_failing_is_refused(
    account_limited: Client, client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    stranger = "192.0.2.1"
    for _ in range(FAILED_LOGINS + LOGINS_PER_ADDRESS_WHILE_ACCOUNT_SPENT):
        response = await log_in(account_limited, merchant.email, PASSWORD + "x", address=stranger)
        assert response.status_code == 401
    body = await too_many_requests(await log_in(account_limited, merchant.email, PASSWORD, address=stranger))
    assert body["retryAfter"] <= 3600 // FAILED_LOGINS  # the account forgets a failure every 20 minutes
    # The same e-mail written in other case is the same account.
    await too_many_requests(await log_in(account_limited, merchant.email.upper(), PASSWORD, address=stranger))
    # The owner, from an address that has not failed on the account, still gets in.
    assert (
        await log_in(account_limited, merchant.email, PASSWORD, address="198.51.100.7")
    ).status_code == 200


async def test_addresses_in_one_ipv6_64_share_their_logins_while_the_accounts_failures_are_spent(
    account_limited: Client, client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    for number in range(FAILED_LOGINS + LOGINS_PER_ADDRESS_WHILE_ACCOUNT_SPENT):
        address = f"2001:db8:7:7::{number + 1:x}"
        assert (
            await log_in(account_limited, merchant.email, PASSWORD + "x", address=address)
        ).status_code == 401
    await too_many_requests(
        await log_in(account_limited, merchant.email, PASSWORD, address="2001:db8:7:7::99")
    )
    assert (
        await log_in(account_limited, merchant.email, PASSWORD, address="2001:db8:7:8::1")
    ).status_code == 200


async def test_failed_logins_of_one_account_leave_another_account_alone(
    account_limited: Client, client: Client, db: Database, settings: Settings
) -> None:
    target = await new_merchant(client, db, settings)
    bystander = await new_merchant(client, db, settings)
    for _ in range(FAILED_LOGINS):
        await log_in(account_limited, target.email, PASSWORD + "x")
    assert (await log_in(account_limited, bystander.email, PASSWORD)).status_code == 200


async def test_successful_logins_do_not_spend_the_accounts_failure_budget(
    account_limited: Client, client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    for _ in range(FAILED_LOGINS + 2):
        assert (await log_in(account_limited, merchant.email, PASSWORD)).status_code == 200


async def test_an_unknown_email_is_limited_like_a_registered_one(account_limited: Client) -> None:
    for _ in range(FAILED_LOGINS + LOGINS_PER_ADDRESS_WHILE_ACCOUNT_SPENT):
        assert (await log_in(account_limited, "nobody@merchant.example", PASSWORD)).status_code == 401
    await too_many_requests(await log_in(account_limited, "nobody@merchant.example", PASSWORD))
