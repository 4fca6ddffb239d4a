"""Which exceptions mean the database failed, as opposed to payorch's own code.

A unit of work that fails on the database fails the requests it served; what they are answered
depends on whether a retry can succeed (`UNAVAILABLE`: connection lost, server starting or full,
a serialization failure or deadlock, a statement cut off by its timeout) or not (`INTERNAL`: any
other error PostgreSQL reported, which is a bug of payorch's SQL).
"""

from __future__ import annotations

import enum

import asyncpg

_UNAVAILABLE = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.SerializationError,
    asyncpg.DeadlockDetectedError,
    asyncpg.QueryCanceledError,
    asyncpg.AdminShutdownError,
    OSError,
    TimeoutError,
)


class StorageFailure(enum.Enum):
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


def storage_failure(error: BaseException) -> StorageFailure | None:
    """How `error` failed on the database, or None when it is not a database failure."""
    if isinstance(error, _UNAVAILABLE):
        return StorageFailure.UNAVAILABLE
    if isinstance(error, asyncpg.PostgresError):
        return StorageFailure.INTERNAL
    return None
