"""A claim names its node, and a node that is gone loses its claims at once, while a live node keeps
its own however long it works: Idempotency-Key claims and provider configuration changes are taken
over by the request that meets them, deliveries and refund submissions by `release_claims_of`.

"Another node" here is `hold_node_identity` itself, run in a nursery; it is gone when the nursery is
cancelled, which closes its connection as a killed process's would be closed. (Its connection is a
dedicated one of the `db` fixture's database.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
import trio

from payorch.config import Settings
from payorch.runtime import open_runtime
from payorch.storage import claim_takeover, idempotency_keys, provider_configs
from payorch.storage.database import Connection, Database
from payorch.storage.nodes import NodeIdentity, hold_node_identity
from payorch.storage.webhook_deliveries import claim_due_deliveries
from payorch.values.clock import SYSTEM_CLOCK
from payorch.values.errors import ProviderAlreadyLinked
from tests.helpers import eventually
from tests.storage.test_webhook_deliveries import _application, _endpoint, _events


@asynccontextmanager
async def another_node(db: Database) -> AsyncIterator[int]:
    """A node holding its identity until the block is left, when it is gone: its id."""
    identity = NodeIdentity()
    async with trio.open_nursery() as nursery:
        await nursery.start(hold_node_identity, db, identity)
        assert identity.id is not None
        yield identity.id
        nursery.cancel_scope.cancel()


async def delivery_claimed_by_a_gone_node(db: Database, settings: Settings) -> int:
    """One webhook delivery of a new application, claimed by a node that is gone by the time this
    returns: that node's id."""
    application_id = await _application(db, settings)
    await _endpoint(db, application_id, "receiver")
    await _events(db, application_id, 1)
    async with another_node(db) as gone:
        claimed = await db.transaction(
            claim_due_deliveries,
            limit=1,
            per_endpoint=4,
            per_merchant=16,
            lease_s=600,
            owner=gone,
            now=SYSTEM_CLOCK.now(),
        )
        assert len(claimed) == 1
    return gone


async def _claim_key(
    db: Database, application_id: uuid.UUID, owner: int | None, after_s: float = 0
) -> idempotency_keys.ClaimResult:
    """Claim key-1 (a 60 s lease) for `owner`, `after_s` seconds from now."""
    return await db.transaction(
        idempotency_keys.claim_idempotency_key,
        application_id=application_id,
        scope="POST /api/v1/sessions",
        key="key-1",
        fingerprint=b"\1" * 32,
        lease_s=60,
        retention_s=86400,
        owner=owner,
        now=SYSTEM_CLOCK.now() + timedelta(seconds=after_s),
    )


async def test_a_key_claimed_by_a_live_node_stays_in_progress_and_is_taken_over_once_that_node_is_gone(
    db: Database, settings: Settings
) -> None:
    application_id = await _application(db, settings)
    async with another_node(db) as other:
        first = await _claim_key(db, application_id, owner=other)
        assert isinstance(first, idempotency_keys.Claimed)
        assert isinstance(await _claim_key(db, application_id, owner=None), idempotency_keys.InProgress)
    # Gone: the retry takes the claim over at once, with the resource id the first request was given.
    async with another_node(db) as survivor:
        assert await _claim_key(db, application_id, owner=survivor) == first
        assert isinstance(await _claim_key(db, application_id, owner=None), idempotency_keys.InProgress)


async def test_a_live_nodes_key_claim_is_taken_over_only_once_its_lease_has_run_out(
    db: Database, settings: Settings
) -> None:
    application_id = await _application(db, settings)
    async with another_node(db) as wedged:
        first = await _claim_key(db, application_id, owner=wedged)
        assert isinstance(first, idempotency_keys.Claimed)
        # Alive but never finishing: in progress until the lease's last moment, taken over after it.
        assert isinstance(
            await _claim_key(db, application_id, owner=None, after_s=59.9), idempotency_keys.InProgress
        )
        assert await _claim_key(db, application_id, owner=None, after_s=60) == first


async def test_a_node_takes_a_new_id_and_never_one_a_gone_node_had(db: Database) -> None:
    async with another_node(db) as first:
        pass
    async with another_node(db) as second:
        assert second > first


async def _begin_link(db: Database, application_id: uuid.UUID, owner: int | None) -> None:
    await db.transaction(
        provider_configs.begin_link,
        application_id=application_id,
        provider="sandbox",
        payment_methods=["card"],
        credentials=b"sealed",
        key_fingerprint="sk_sandb...0000",
        owner=owner,
        now=SYSTEM_CLOCK.now(),
    )


async def test_a_link_a_gone_node_was_making_may_be_made_again_at_once(
    db: Database, settings: Settings
) -> None:
    application_id = await _application(db, settings)
    async with another_node(db) as other:
        await _begin_link(db, application_id, owner=other)
        with pytest.raises(ProviderAlreadyLinked):
            await _begin_link(db, application_id, owner=None)
    await _begin_link(db, application_id, owner=None)


async def _owners(conn: Connection) -> list[int | None]:
    rows = await conn.fetch("SELECT claimed_by FROM webhook_deliveries WHERE claimed_until IS NOT NULL")
    return [row["claimed_by"] for row in rows]


async def test_a_live_nodes_delivery_claim_is_claimable_again_only_once_its_lease_has_run_out(
    db: Database, settings: Settings
) -> None:
    application_id = await _application(db, settings)
    await _endpoint(db, application_id, "only")
    await _events(db, application_id, 1)
    start = SYSTEM_CLOCK.now()

    async def claim(owner: int | None, after_s: float) -> int:
        claimed = await db.transaction(
            claim_due_deliveries,
            limit=1,
            per_endpoint=4,
            per_merchant=16,
            lease_s=60,
            owner=owner,
            now=start + timedelta(seconds=after_s),
        )
        return len(claimed)

    async with another_node(db) as wedged:
        assert await claim(wedged, after_s=0) == 1
        assert await claim(None, after_s=59.9) == 0
        assert await claim(None, after_s=60) == 1  # the lease ran out: attempted again, counted again


async def test_deliveries_claimed_by_a_gone_node_are_due_again_and_a_live_nodes_stay_claimed(
    db: Database, settings: Settings
) -> None:
    application_id = await _application(db, settings)
    for name in ("first", "second"):
        await _endpoint(db, application_id, name)
    await _events(db, application_id, 1)

    async def claim(owner: int, limit: int) -> int:
        claimed = await db.transaction(
            claim_due_deliveries,
            limit=limit,
            per_endpoint=4,
            per_merchant=16,
            lease_s=60,
            owner=owner,
            now=SYSTEM_CLOCK.now(),
        )
        return len(claimed)

    async with another_node(db) as live:
        async with another_node(db) as doomed:
            assert await claim(doomed, limit=1) == 1
            assert await claim(live, limit=1) == 1
            assert await db.autocommit(claim_takeover.gone_claim_owners) == []
        gone = await db.autocommit(claim_takeover.gone_claim_owners)
        assert gone == [doomed]
        released = await db.transaction(claim_takeover.release_claims_of, gone, now=SYSTEM_CLOCK.now())
        assert released == claim_takeover.Released(
            webhook_deliveries=1, sandbox_deliveries=0, refund_submissions=0
        )
        assert await db.autocommit(_owners) == [live]
        assert await claim(live, limit=10) == 1  # the released delivery, due again now
        assert await db.autocommit(claim_takeover.gone_claim_owners) == []


async def test_a_running_service_takes_over_a_gone_nodes_deliveries_by_itself_and_counts_them(
    db: Database, settings: Settings
) -> None:
    doomed = await delivery_claimed_by_a_gone_node(db, settings)
    async with open_runtime(settings, db) as runtime:
        client = runtime.app.test_client()

        async def taken_over() -> bool:
            exposition = await (await client.get("/metrics")).get_data()
            return b'payorch_claims_taken_over_total{kind="webhook_delivery"} 1.0' in exposition

        await eventually(taken_over, timeout_s=10)
    assert doomed not in await db.autocommit(_owners)
