"""Building blocks for the way-back tests of a provider that comes first and the sandbox next: the
session, the customer following a URL back through payorch, and the recovered session's record."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

from tests.helpers import Client, Shop, put_routing
from tests.providers.api_support import created, record

SUCCESS, FAILURE = "https://shop.example/ok", "https://shop.example/ko"


async def session_first_at(
    client: Client, shop: Shop, provider: str, recovery: dict[str, Any] | None = None, **change: Any
) -> dict[str, Any]:
    """A session created at `provider` first, the sandbox next, under `recovery`; the merchant's
    URLs are `SUCCESS` and `FAILURE` unless `change` says otherwise."""
    document: dict[str, Any] = {"default": {"type": "priority", "providers": [provider, "sandbox"]}}
    if recovery is not None:
        document["recovery"] = recovery
    await put_routing(client, shop, document)
    change.setdefault("redirectUrls", {"success": SUCCESS, "failure": FAILURE})
    session = await created(client, shop, f"key-{uuid.uuid4()}", **change)
    assert session["routing"]["selectedProvider"] == provider
    return session


async def come_back(client: Client, url: str) -> str:
    """The customer follows `url` (a provider's way back to payorch's return route): where payorch
    sends them on (its 303)."""
    parts = urlsplit(url)
    response = await client.get(f"{parts.path}?{parts.query}")
    assert response.status_code == 303, await response.get_data(as_text=True)
    location: str = response.headers["Location"]
    return location


async def assert_recovered_at_the_sandbox(
    client: Client, shop: Shop, session_id: str, sent_on: str, declined_as: tuple[str, str, str, str]
) -> None:
    """The customer was `sent_on` to the sandbox's checkout, the session's second attempt, open for
    `recovery`; its first attempt ended as `declined_as` (provider, status, failureReason, code)."""
    assert urlsplit(sent_on).path.startswith("/sandbox/checkout/")
    found = await record(client, shop, session_id)
    assert (found["status"], found["providerName"], found["routing"]["reason"]) == (
        "PENDING",
        "sandbox",
        "recovery",
    )
    declined, opened = found["attempts"]
    ended = (declined["provider"], declined["status"], declined["failureReason"], declined["providerCode"])
    assert ended == declined_as
    assert (opened["provider"], opened["status"]) == ("sandbox", "OPEN")
