"""Which exceptions mean the database failed, as opposed to payorch's own code.

A unit of work that fails on the database fails the requests it served; what they are answered
depends on whether a retry can succeed (`UNAVAILABLE`: connection lost, server starting, stopping or
full, no writable server among the URL's hosts, a server that became read-only (a standby, or a
primary demoted or fenced in a failover), a serialization failure or deadlock, a statement cut off by
its timeout) or not (`INTERNAL`: any other error PostgreSQL reported, which is a bug of payorch's SQL).

`server_lost` says which of them mean that the server a pooled connection was on cannot serve
payorch's writes any more (gone, shutting down, or read-only): then every connection of the pool
may be on it too, and is replaced (`storage.database`), so the next units find the primary there is
now instead of failing one by one on its predecessor.
"""

from __future__ import annotations

import enum

import asyncpg
from asyncpg.exceptions import InternalClientError, TargetServerAttributeNotMatched

# The server of the connection is gone, is going, or no longer takes writes.
_SERVER_LOST = (
    asyncpg.PostgresConnectionError,  # the connection broke (SQLSTATE class 08), or never opened
    asyncpg.AdminShutdownError,  # the server is shutting down (a fast stop, a switchover)
    asyncpg.CrashShutdownError,  # another backend crashed and the server restarts
    asyncpg.CannotConnectNowError,  # starting up, shutting down, or in recovery
    asyncpg.ReadOnlySQLTransactionError,  # a standby, or a primary demoted or fenced read-only
    TargetServerAttributeNotMatched,  # none of the URL's hosts is writable: no primary right now
    # asyncpg's protocol met what it did not expect, as on a pooled connection whose server said
    # FATAL (shutting down) while it was idle: the connection cannot be trusted any more.
    InternalClientError,
    OSError,  # the socket failed: reset, refused, unreachable
)

_UNAVAILABLE = (
    *_SERVER_LOST,
    asyncpg.InterfaceError,
    asyncpg.TooManyConnectionsError,
    asyncpg.SerializationError,
    asyncpg.DeadlockDetectedError,
    asyncpg.QueryCanceledError,
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


def server_lost(error: BaseException) -> bool:
    """Whether `error` says the server of the connection that raised it is gone, shutting down or
    read-only: one that cannot take payorch's writes now, whichever way it came to be so. The errors
    it was raised while handling count too: a transaction whose connection broke ends with
    asyncpg's `InterfaceError` (it cannot roll back on a closed connection), raised in the handling
    of the break."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, _SERVER_LOST):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
