"""A page of one of an application's lists (its API keys, its linked providers, its webhook
configurations), read the way the API's lists and the console's pages read them: the principal's
right to the application checked (`application_for`), then the read done within one of the
merchant's list-read turns (`RequestLimits.list_read`)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from payorch.http.auth import Principal, application_for
from payorch.http.services import Services
from payorch.storage.database import Connection
from payorch.values.pagination import PageRequest

T = TypeVar("T")

# A storage function reading a page of an application's list: its items and how many it holds.
PageRead = Callable[[Connection, uuid.UUID, PageRequest], Awaitable[tuple[list[T], int]]]


async def application_page(
    services: Services, principal: Principal, application_id: str, read: PageRead[T], page: PageRequest
) -> tuple[list[T], int]:
    """The `page` of the application's list that `read` reads, and how many the list holds: the
    application's errors of `application_for`, `RateLimited` when the merchant's list reads are all
    taken for longer than `limits.merchant_list_read_wait_s`."""
    application = await application_for(principal, application_id)
    async with services.limits.list_read(principal.merchant_id):
        return await services.context.db.autocommit(read, application.id, page)
