"""What one merchant's webhook configurations can cost the others: each event fans out to every
configuration of its application, so an application may have `limits.webhooks_per_application`
of them (100 by default); one more is 409, counted in the create's transaction, so creates sent
together cannot pass the cap together either."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from payorch.config import LimitSettings, Settings
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from tests.helpers import Client, Merchant, new_application

DEFAULT_CAP = LimitSettings().webhooks_per_application
SMALL_CAP = 3
AT_ONCE = 8


@pytest.fixture
async def capped(settings: Settings, db: Database) -> AsyncIterator[Client]:
    """A client of an app whose applications may have `SMALL_CAP` webhook configurations."""
    limits = settings.limits.model_copy(update={"webhooks_per_application": SMALL_CAP})
    async with open_runtime(settings.model_copy(update={"limits": limits}), db) as runtime:
        yield runtime.app.test_client()


async def create_webhook(client: Client, merchant: Merchant, application_id: str, number: int) -> Any:
    return await client.post(
        f"/api/v1/applications/{application_id}/webhooks",
        json={"url": f"https://127.0.0.1/hooks/{number}"},
        headers=merchant.headers,
    )


async def configurations_of(client: Client, merchant: Merchant, application_id: str) -> int:
    response = await client.get(f"/api/v1/applications/{application_id}/webhooks", headers=merchant.headers)
    total: int = (await response.get_json())["totalItems"]
    return total


async def test_a_webhook_configuration_beyond_the_applications_cap_is_409_and_not_made(
    client: Client, merchant: Merchant
) -> None:
    application_id = (await new_application(client, merchant))["id"]
    for number in range(DEFAULT_CAP):
        assert (await create_webhook(client, merchant, application_id, number)).status_code == 201
    response = await create_webhook(client, merchant, application_id, DEFAULT_CAP)
    assert response.status_code == 409, await response.get_data(as_text=True)
    body = await response.get_json()
    assert set(body) == {"error", "message", "code"}
    assert (body["error"], body["code"]) == ("Conflict", 409)
    assert f"the most it may have ({DEFAULT_CAP})" in body["message"]
    assert await configurations_of(client, merchant, application_id) == DEFAULT_CAP


async def test_a_deleted_configuration_makes_room_and_the_cap_is_per_application(
    capped: Client, merchant: Merchant
) -> None:
    application_id = (await new_application(capped, merchant))["id"]
    made = [
        await (await create_webhook(capped, merchant, application_id, n)).get_json() for n in range(SMALL_CAP)
    ]
    assert (await create_webhook(capped, merchant, application_id, SMALL_CAP)).status_code == 409
    other_id = (await new_application(capped, merchant, "Other"))["id"]
    assert (await create_webhook(capped, merchant, other_id, 0)).status_code == 201
    path = f"/api/v1/applications/{application_id}/webhooks/{made[0]['id']}"
    assert (await capped.delete(path, headers=merchant.headers)).status_code == 200
    assert (await create_webhook(capped, merchant, application_id, SMALL_CAP)).status_code == 201


async def test_creates_sent_together_never_pass_the_cap_together(capped: Client, merchant: Merchant) -> None:
    application_id = (await new_application(capped, merchant))["id"]
    statuses: list[int] = []

    async def create(number: int) -> None:
        statuses.append((await create_webhook(capped, merchant, application_id, number)).status_code)

    async with trio.open_nursery() as nursery:
        for number in range(AT_ONCE):
            nursery.start_soon(create, number)
    assert sorted(statuses) == [201] * SMALL_CAP + [409] * (AT_ONCE - SMALL_CAP)
    assert await configurations_of(capped, merchant, application_id) == SMALL_CAP
