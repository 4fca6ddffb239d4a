"""Password hashing's own capacity: at most `auth.password_hashes_at_once` hashes run at once, in
threads that are not the default limiter's; a login or signup that finds every turn taken is 503
with `Retry-After` before it hashes anything, and a signup's invite is checked before its hash.

The app here allows one hash at a time; a test takes that turn itself (`PasswordHasher.turn`) to
hold the hashing capacity full, so whatever the app answers meanwhile was answered without a hash.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

import pytest
import trio
from passlib.hash import argon2
from quart import Response

from payorch.config import AuthSettings, Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.engine.accounts.passwords import (
    HASH_LANES,
    HASH_MEMORY_KIB,
    HASH_TIME_COST,
    HashingThreads,
    PasswordHasher,
)
from payorch.runtime import Runtime
from payorch.storage import accounts
from payorch.storage.database import Connection, Database
from payorch.values.clock import SYSTEM_CLOCK
from payorch.values.secrets import token_hash
from tests.helpers import PASSWORD, Client, Merchant, new_merchant, signup_body


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The test's settings with one password hash at a time."""
    auth = AuthSettings(**{**settings.auth.model_dump(), "password_hashes_at_once": 1})
    return settings.model_copy(update={"auth": auth})


@pytest.fixture
async def owner(client: Client, db: Database, settings: Settings) -> Merchant:
    return await new_merchant(client, db, settings)


async def log_in(client: Client, email: str, password: str = PASSWORD) -> Response:
    return await client.post("/api/v1/auth/login", json={"email": email, "password": password})


async def service_busy(response: Response) -> dict[str, Any]:
    """The body of a 503, checked to be shape A with `retryAfter` equal to `Retry-After`."""
    assert response.status_code == 503, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    assert body["code"] == 503
    assert isinstance(body["retryAfter"], int) and body["retryAfter"] >= 1
    assert response.headers["Retry-After"] == str(body["retryAfter"])
    return body


async def count(db: Database, table: str) -> int:
    async def query(conn: Connection) -> int:
        return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))  # noqa: S608

    return await db.autocommit(query)


async def test_login_while_every_hashing_turn_is_taken_is_503_with_retry_after(
    runtime: Runtime, client: Client, owner: Merchant
) -> None:
    with runtime.services.passwords.turn():
        await service_busy(await log_in(client, owner.email))
        await service_busy(await log_in(client, "nobody@merchant.example"))
    assert (await log_in(client, owner.email)).status_code == 200


async def test_signup_while_every_hashing_turn_is_taken_is_503_and_keeps_the_invite(
    runtime: Runtime, client: Client, db: Database, settings: Settings
) -> None:
    invite = await issue_invite(db, settings, "owner@acme.example")
    path, body = f"/api/v1/merchants/signup?token={invite.token}", signup_body("owner@acme.example", "REG-1")
    merchants = await count(db, "merchants")
    with runtime.services.passwords.turn():
        await service_busy(await client.post(path, json=body))
    assert await count(db, "merchants") == merchants
    assert (await client.post(path, json=body)).status_code == 201


async def test_signup_with_an_unknown_token_is_400_without_a_hash(runtime: Runtime, client: Client) -> None:
    body = signup_body("owner@acme.example", "REG-1")
    with runtime.services.passwords.turn():
        response = await client.post("/api/v1/merchants/signup?token=no-such-token", json=body)
    assert response.status_code == 400, await response.get_data(as_text=True)


async def test_signup_with_a_used_or_expired_token_is_410_without_a_hash(
    runtime: Runtime, client: Client, db: Database, settings: Settings
) -> None:
    used = await issue_invite(db, settings, "first@acme.example")
    response = await client.post(
        f"/api/v1/merchants/signup?token={used.token}", json=signup_body("first@acme.example", "REG-1")
    )
    assert response.status_code == 201
    await db.autocommit(
        accounts.create_invite,
        token_hash=token_hash("expired-token"),
        email="late@acme.example",
        expires_at=SYSTEM_CLOCK.now() - timedelta(seconds=1),
    )
    with runtime.services.passwords.turn():
        for token in (used.token, "expired-token"):
            response = await client.post(
                f"/api/v1/merchants/signup?token={token}", json=signup_body("second@acme.example", "REG-2")
            )
            assert response.status_code == 410, await response.get_data(as_text=True)


@pytest.mark.parametrize(("memory_kib", "time_cost", "lanes"), [(65536, 3, 4), (47104, 1, 1)])
async def test_a_password_hashed_with_earlier_parameters_logs_in_and_is_hashed_anew(
    client: Client, db: Database, owner: Merchant, memory_kib: int, time_cost: int, lanes: int
) -> None:
    earlier = argon2.using(type="ID", memory_cost=memory_kib, rounds=time_cost, parallelism=lanes).hash(
        PASSWORD
    )
    assert earlier.startswith(f"$argon2id$v=19$m={memory_kib},t={time_cost},p={lanes}$")

    async def store(conn: Connection) -> None:
        update = "UPDATE users SET password_hash = $1 WHERE email = $2"
        status = await conn.execute(update, earlier, owner.email)
        assert status == "UPDATE 1"

    async def stored(conn: Connection) -> str:
        return str(await conn.fetchval("SELECT password_hash FROM users WHERE email = $1", owner.email))

    await db.autocommit(store)
    assert (await log_in(client, owner.email, PASSWORD + "x")).status_code == 401
    assert await db.autocommit(stored) == earlier  # a wrong password changes nothing
    assert (await log_in(client, owner.email)).status_code == 200
    today = await db.autocommit(stored)
    assert today.startswith(f"$argon2id$v=19$m={HASH_MEMORY_KIB},t={HASH_TIME_COST},p={HASH_LANES}$")
    assert (await log_in(client, owner.email)).status_code == 200
    assert await db.autocommit(stored) == today  # hashed anew once, not at every login
    assert (await log_in(client, owner.email, PASSWORD + "x")).status_code == 401


async def test_password_hashing_does_not_wait_for_the_default_thread_limiter(
    client: Client, owner: Merchant
) -> None:
    # Every thread of the default limiter (shared with DNS and other blocking work) taken: a login
    # still hashes, in its own threads.
    default = trio.to_thread.current_default_thread_limiter()
    holders = [object() for _ in range(int(default.available_tokens))]
    for holder in holders:
        default.acquire_on_behalf_of_nowait(holder)
    try:
        with trio.fail_after(30):
            response = await log_in(client, owner.email)
    finally:
        for holder in holders:
            default.release_on_behalf_of(holder)
    assert response.status_code == 200


@pytest.mark.parametrize(("cpu_share", "rests"), [(0.25, True), (1.0, False)])
async def test_a_hashing_thread_rests_after_each_hash_in_proportion_to_its_share_of_a_core(
    cpu_share: float, rests: bool
) -> None:
    taken: list[float] = []
    threads = HashingThreads(1, cpu_share, rest=taken.append)
    hasher = PasswordHasher(1)
    hasher.threads = threads
    for _ in range(2):
        with hasher.turn() as turn:
            # A password of its own: hashed for real, not given from the tests' memo of hashes.
            await turn.hash(secrets.token_hex(16))
    # The thread rests after delivering a hash, before it takes the next: the first rest is taken.
    assert (taken[0] > 0) if rests else (taken[0] == 0.0)
