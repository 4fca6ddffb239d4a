"""Replacing `security.encryption_key`, as docs/operations.md tells an operator to: add the new key
first (every node restarts with [new, old]), `payorch rotate-credentials`, remove the old key and
restart. Afterwards every provider call, provider event and merchant webhook works under the new key
alone; the rotation never overwrites a change made while it runs, and resumes where it stopped."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from cryptography.fernet import Fernet, InvalidToken

from payorch.config import SecuritySettings, Settings
from payorch.engine.accounts.key_rotation import ColumnCounts, rotate_sealed_secrets
from payorch.runtime import open_runtime
from payorch.storage import webhooks as webhooks_store
from payorch.storage.database import Connection, Database
from payorch.storage.sealed_secrets import SEALED_COLUMNS, replace_sealed, sealed_after
from payorch.values.clock import SYSTEM_CLOCK
from payorch.values.secretbox import SecretBox
from tests import webhook_receiver as receiving
from tests.clock import ShiftedClock
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.helpers import Client, Shop, create_session, eventually, new_shop, post_json, session_body
from tests.test_cli import cli_environment, payorch_async
from tests.webhook_receiver import ReceivedRequest, WebhookReceiver, assert_signed_during_overlap

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

webhook_receiver = receiving.webhook_receiver

OLD_KEY = TEST_ENCRYPTION_KEY  # what the `settings` fixture seals with
NEW_KEY = Fernet.generate_key().decode()
COLUMNS = [column.name for column in SEALED_COLUMNS]


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    """The test settings under the old key alone, trusting the receiver's CA."""
    return settings.model_copy(
        update={"webhooks": settings.webhooks.model_copy(update={"ca_bundle": webhook_receiver.ca_path})}
    )


def with_keys(settings: Settings, *keys: str) -> Settings:
    return settings.model_copy(update={"security": SecuritySettings(encryption_keys=list(keys))})


@asynccontextmanager
async def node(settings: Settings, db: Database, clock: ShiftedClock) -> AsyncIterator[Client]:
    """A payorch node serving with `settings` (started as a restart would), and a client of it."""
    async with open_runtime(settings, db, clock) as runtime:
        yield runtime.app.test_client()


async def every_sealed_value(db: Database) -> dict[str, list[bytes]]:
    found: dict[str, list[bytes]] = {}
    for column in SEALED_COLUMNS:
        found[column.name] = [
            sealed.value for sealed in await db.autocommit(sealed_after, column, None, 1000)
        ]
    return found


def opens_with(key: str, token: bytes) -> bool:
    try:
        Fernet(key.encode()).decrypt(token)
    except InvalidToken:
        return False
    return True


def tally(counts: list[ColumnCounts]) -> dict[str, tuple[int, int, int, int, int]]:
    """(re-encrypted, already current, unreadable, changed meanwhile, left) per column."""
    return {c.column: (c.reencrypted, c.current, c.unreadable, c.changed, c.left) for c in counts}


async def subscribe(client: Client, shop: Shop, receiver: WebhookReceiver) -> dict[str, Any]:
    response = await client.post(
        f"/api/v1/applications/{shop.application_id}/webhooks",
        json={"url": receiver.url},
        headers=shop.merchant.headers,
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    config: dict[str, Any] = await response.get_json()
    return config


async def rotate_webhook_secret(client: Client, shop: Shop, webhook_id: str) -> dict[str, Any]:
    response = await client.patch(
        f"/api/v1/applications/{shop.application_id}/webhooks/{webhook_id}/secret",
        headers=shop.merchant.headers,
    )
    assert response.status_code == 200, await response.get_data(as_text=True)
    rotated: dict[str, Any] = await response.get_json()
    return rotated


async def session_record(client: Client, shop: Shop, session_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
    assert response.status_code == 200
    record: dict[str, Any] = await response.get_json()
    return record


async def pay(client: Client, shop: Shop) -> str:
    """A session created through the sandbox (the provider key opened) and paid; returns once the
    sandbox's signed event (its endpoint's secret, and the configuration's copy) made it SUCCEEDED."""
    response = await create_session(client, shop, f"pay-{uuid.uuid4()}", session_body())
    assert response.status_code == 201, await response.get_data(as_text=True)
    created = await response.get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})
    session_id = str(created["sessionId"])

    async def succeeded() -> bool:
        return (await session_record(client, shop, session_id))["status"] == "SUCCEEDED"

    await eventually(succeeded)
    return session_id


async def delivered(
    receiver: WebhookReceiver, event_type: str, session_id: str, fingerprint: str
) -> ReceivedRequest:
    """The delivery of the session's `event_type` to the webhook whose key is `fingerprint`."""

    async def arrived() -> ReceivedRequest | None:
        for request in receiver.requests:
            body = request.json()
            if (
                body["type"] == event_type
                and session_id in (body["data"].get("id"), body["data"].get("sessionId"))
                and request.headers["webhook-key-fingerprint"] == fingerprint
            ):
                return request
        return None

    return await eventually(arrived)


async def test_the_documented_rotation_leaves_everything_working_under_the_new_key_alone(
    settings: Settings, db: Database, clock: ShiftedClock, webhook_receiver: WebhookReceiver, tmp_path: Path
) -> None:
    # Before: everything sealed under the old key. A shop linked to the sandbox (its key, its event
    # secret, the sandbox's own copy) and a webhook whose secret was rotated once (two secrets).
    async with node(settings, db, clock) as client:
        shop = await new_shop(client, db, settings)
        created = await subscribe(client, shop, webhook_receiver)
        rotated = await rotate_webhook_secret(client, shop, created["id"])
        webhook_receiver.accept_secret(rotated["signingSecret"])
        first = await pay(client, shop)
        assert (
            await delivered(webhook_receiver, "session.completed", first, rotated["keyFingerprint"])
        ).verified
    before = await every_sealed_value(db)
    assert {name: len(values) for name, values in before.items()} == dict.fromkeys(COLUMNS, 1)
    assert all(opens_with(OLD_KEY, token) for values in before.values() for token in values)

    # Step 1: every node restarts with [new, old]. Step 2: the rotation, while a node serves.
    both = with_keys(settings, NEW_KEY, OLD_KEY)
    async with node(both, db, clock) as client:
        counts = await rotate_sealed_secrets(db, SecretBox(both.security.keys))
        assert tally(counts) == dict.fromkeys(COLUMNS, (1, 0, 0, 0, 0))
        # Serving meanwhile: a value sealed now is under the new key (a second webhook's secret).
        extra = await subscribe(client, shop, webhook_receiver)
        assert (await create_session(client, shop, "during-rotation")).status_code == 201
        # Running again re-encrypts nothing: all of it is under the first key.
        again = await rotate_sealed_secrets(db, SecretBox(both.security.keys))
        assert tally(again) == dict.fromkeys(COLUMNS, (0, 1, 0, 0, 0)) | {
            "webhook_configs.secret": (0, 2, 0, 0, 0)
        }
    # The command says the same, counted per column.
    (tmp_path / "cli").mkdir()
    env = cli_environment(
        tmp_path / "cli", settings.database.url, f'[security]\nencryption_keys = ["{NEW_KEY}", "{OLD_KEY}"]\n'
    )
    result = await payorch_async("rotate-credentials", env=env)
    assert result.returncode == 0, result.stderr
    output = result.stdout.decode()
    assert (
        "provider_configs.credentials: 0 re-encrypted, 1 already under the first key, 0 unreadable" in output
    )
    assert "webhook_configs.secret: 0 re-encrypted, 2 already under the first key" in output
    assert NEW_KEY not in output + result.stderr.decode()
    after = await every_sealed_value(db)
    assert all(opens_with(NEW_KEY, token) for values in after.values() for token in values)
    assert not any(opens_with(OLD_KEY, token) for values in after.values() for token in values)

    # Step 3: the old key removed, every node restarted. Everything works under the new key alone.
    webhook_receiver.accept_secret(extra["signingSecret"])
    async with node(with_keys(settings, NEW_KEY), db, clock) as client:
        paid = await pay(client, shop)  # provider key, the sandbox's event secret and payorch's copy
        request = await delivered(webhook_receiver, "session.completed", paid, rotated["keyFingerprint"])
        assert_signed_during_overlap(
            request, created["signingSecret"], rotated["signingSecret"], rotated["keyFingerprint"]
        )
        response = await post_json(
            client,
            f"/api/v1/sessions/{paid}/refunds",
            {"amount": Decimal("10.00")},
            {**shop.headers, "Idempotency-Key": "r1"},
        )
        assert response.status_code == 201, await response.get_data(as_text=True)

        async def refund_completed() -> bool:
            return (await session_record(client, shop, paid))["refunds"][0]["status"] == "COMPLETED"

        await eventually(refund_completed)
        for fingerprint in (rotated["keyFingerprint"], extra["keyFingerprint"]):
            assert (await delivered(webhook_receiver, "refund.completed", paid, fingerprint)).verified


async def test_a_change_made_during_the_rotation_is_kept_and_the_next_run_resumes(
    client: Client, db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    shop = await new_shop(client, db, settings)  # under the old key
    created = await subscribe(client, shop, webhook_receiver)
    webhook_id = uuid.UUID(created["id"])
    both = SecretBox([NEW_KEY, OLD_KEY])

    class MerchantRotatesMeanwhile:
        """The database, where the merchant rotates the webhook's secret (on a node with the new key
        first) between the rotation's read of that secret and its write."""

        def __init__(self) -> None:
            self.pending = True

        async def autocommit(self, unit: Any, *args: Any, **kwargs: Any) -> Any:
            return await db.autocommit(unit, *args, **kwargs)

        async def transaction(self, unit: Any, *args: Any, **kwargs: Any) -> Any:
            if unit is replace_sealed and args[0].name == "webhook_configs.secret" and self.pending:
                self.pending = False
                await db.transaction(
                    webhooks_store.rotate_secret,
                    uuid.UUID(shop.application_id),
                    webhook_id,
                    secret=both.seal("whsec_rotated_meanwhile"),
                    key_fingerprint="whsec_ro...hile",
                    overlap_s=60,
                    now=SYSTEM_CLOCK.now(),
                )
            return await db.transaction(unit, *args, **kwargs)

    counts = tally(await rotate_sealed_secrets(MerchantRotatesMeanwhile(), both))  # type: ignore[arg-type]
    assert counts["webhook_configs.secret"] == (0, 1, 0, 1, 0)  # read again: the merchant's, already new
    assert counts["webhook_configs.previous_secret"] == (1, 0, 0, 0, 0)  # the one it replaced
    config = await db.autocommit(webhooks_store.get_webhook, uuid.UUID(shop.application_id), webhook_id)
    assert SecretBox(NEW_KEY).open(config.secret) == "whsec_rotated_meanwhile"
    assert config.previous_secret is not None
    assert SecretBox(NEW_KEY).open(config.previous_secret) == created["signingSecret"]


async def test_an_interrupted_rotation_resumes_with_what_is_left(
    client: Client, db: Database, settings: Settings
) -> None:
    for _ in range(3):
        await new_shop(client, db, settings)
    both = SecretBox([NEW_KEY, OLD_KEY])

    class Interrupted(Exception):
        pass

    class InterruptedAfterOneBatch:
        def __init__(self) -> None:
            self.writes = 0

        async def autocommit(self, unit: Any, *args: Any, **kwargs: Any) -> Any:
            return await db.autocommit(unit, *args, **kwargs)

        async def transaction(self, unit: Any, *args: Any, **kwargs: Any) -> Any:
            if self.writes == 1:
                raise Interrupted  # as by the operator's Ctrl-C, after one batch of one value
            self.writes += 1
            return await db.transaction(unit, *args, **kwargs)

    with pytest.raises(Interrupted):
        await rotate_sealed_secrets(InterruptedAfterOneBatch(), both, batch_size=1)  # type: ignore[arg-type]
    counts = tally(await rotate_sealed_secrets(db, both, batch_size=2))
    assert counts["provider_configs.credentials"] == (2, 1, 0, 0, 0)
    assert counts["provider_configs.webhook_secret"] == (3, 0, 0, 0, 0)


async def test_a_stale_value_is_not_replaced(client: Client, db: Database, settings: Settings) -> None:
    await new_shop(client, db, settings)
    (column,) = [column for column in SEALED_COLUMNS if column.name == "provider_configs.credentials"]
    (sealed,) = await db.autocommit(sealed_after, column, None, 10)
    replaced = await db.transaction(replace_sealed, column, [(sealed.key, b"not what is stored", b"new")])
    assert replaced == []
    assert (await db.autocommit(sealed_after, column, None, 10))[0].value == sealed.value


async def test_rotate_credentials_with_a_key_missing_exits_1_and_changes_nothing(
    client: Client, db: Database, settings: Settings, tmp_path: Path
) -> None:
    await new_shop(client, db, settings)  # under the old key
    before = await every_sealed_value(db)
    env = cli_environment(tmp_path, settings.database.url, f'[security]\nencryption_key = "{NEW_KEY}"\n')
    result = await payorch_async("rotate-credentials", env=env)
    assert result.returncode == 1
    assert "provider_configs.credentials: 0 re-encrypted, 0 already under the first key, 1 unreadable" in (
        result.stdout.decode()
    )
    assert "decrypt with none of security.encryption_keys" in result.stderr.decode()
    assert await every_sealed_value(db) == before


async def test_rotate_credentials_from_the_command_line(
    client: Client, db: Database, settings: Settings, tmp_path: Path
) -> None:
    await new_shop(client, db, settings)  # under the old key
    env = cli_environment(
        tmp_path, settings.database.url, f'[security]\nencryption_key = ["{NEW_KEY}", "{OLD_KEY}"]\n'
    )
    result = await payorch_async("rotate-credentials", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines == [
        "provider_configs.credentials: 1 re-encrypted, 0 already under the first key, 0 unreadable, "
        "0 changed meanwhile, 0 left",
        "provider_configs.webhook_secret: 1 re-encrypted, 0 already under the first key, 0 unreadable, "
        "0 changed meanwhile, 0 left",
        "webhook_configs.secret: 0 re-encrypted, 0 already under the first key, 0 unreadable, "
        "0 changed meanwhile, 0 left",
        "webhook_configs.previous_secret: 0 re-encrypted, 0 already under the first key, 0 unreadable, "
        "0 changed meanwhile, 0 left",
        "sandbox_webhook_endpoints.secret: 1 re-encrypted, 0 already under the first key, 0 unreadable, "
        "0 changed meanwhile, 0 left",
    ]
    after = await every_sealed_value(db)
    assert all(opens_with(NEW_KEY, token) for values in after.values() for token in values)


async def test_every_bytea_column_is_sealed_and_rotated_or_a_hash(db: Database) -> None:
    """A new column holding sealed values must join SEALED_COLUMNS, or rotation would leave it
    under the old key, unreadable once that key is removed."""
    hashes = {
        "invites.token_hash",
        "user_invites.token_hash",
        "password_resets.token_hash",
        "api_keys.key_hash",
        "idempotency_keys.fingerprint",
        "schema_migrations.checksum",  # of each migration's SQL (storage.migrations)
    }

    async def bytea_columns(conn: Connection) -> set[str]:
        rows = await conn.fetch(
            """SELECT table_name, column_name FROM information_schema.columns
               WHERE table_schema = current_schema() AND data_type = 'bytea'"""
        )
        return {f"{row['table_name']}.{row['column_name']}" for row in rows}

    assert await db.autocommit(bytea_columns) == set(COLUMNS) | hashes


async def test_with_nothing_stored_every_column_counts_nothing(db: Database) -> None:
    counts = await rotate_sealed_secrets(db, SecretBox([NEW_KEY, OLD_KEY]))
    assert tally(counts) == dict.fromkeys(COLUMNS, (0, 0, 0, 0, 0))
