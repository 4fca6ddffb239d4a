"""Changes of an application that processes keep state about: its API keys, its status, its
provider configurations. Each change notifies `APPLICATIONS_CHANNEL` (payload: the application id)
on commit; `keep_fresh` listens, and tells every cache of this process what to forget.

API-key and status changes notify from their storage functions; every write of `provider_configs`
notifies from a trigger (migration 0008), so no way of changing a configuration can forget to.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

import trio
import triopg

from payorch.storage.database import Connection

APPLICATIONS_CHANNEL = "payorch_applications"


class ForgetsApplications(Protocol):
    """Something that keeps state about applications and must hear of every change to use it."""

    listening: bool  # True while `keep_fresh` hears every change: only then may state be kept

    def forget_application(self, application_id: uuid.UUID) -> None: ...

    def forget_all(self) -> None: ...


async def notify_application_changed(conn: Connection, application_id: uuid.UUID) -> None:
    """Tell every process, when this transaction commits, that the application changed."""
    await conn.execute("SELECT pg_notify($1, $2)", APPLICATIONS_CHANNEL, str(application_id))


async def keep_fresh(
    dsn: str,
    caches: Sequence[ForgetsApplications],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen for changes of applications made by any process and make `caches` forget what they
    touch; the caches keep state only while this listens. Runs until cancelled or its connection
    fails (then its supervisor starts it again)."""
    try:
        async with (
            triopg.connect(dsn) as conn,
            conn.listen(APPLICATIONS_CHANNEL, max_buffer_size=1000) as notes,
        ):
            for cache in caches:
                cache.forget_all()  # whatever happened while nobody listened
                cache.listening = True
            task_status.started()
            async for note in notes:
                # An application id; anything else (triopg's overflow marker) may hide a change.
                try:
                    application_id = uuid.UUID(note)
                except (TypeError, ValueError, AttributeError):
                    for cache in caches:
                        cache.forget_all()
                    continue
                for cache in caches:
                    cache.forget_application(application_id)
    finally:
        for cache in caches:
            cache.listening = False
            cache.forget_all()
