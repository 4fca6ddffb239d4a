"""The array types payorch's statements pass and read, known to each new connection without asking.

asyncpg decodes PostgreSQL's scalar types itself, but an array of `integer` or of `uuid` (which
payorch passes as `= ANY($1)` and reads from `array_agg`) it first looks up in the server's catalog:
once per type per connection, with a recursive query whose planning cost a fresh server process
about 8 ms of CPU each time, two or three times per connection (each lookup also switches JIT off
and back). A pool replaces its connections over time and a failover replaces them all, so that cost
recurs. `know_array_types` looks them up once per process, on the first connection, and hands the
answer to every later connection: built-in types keep their ids on every server, so the answer holds
for any server payorch connects to.

asyncpg offers no public way to hand a connection type information, so this uses two of its
internals (`Connection._introspect_types`, the protocol settings' `register_data_types`). Should a
later asyncpg lack either, nothing is registered and asyncpg looks the types up itself, as before.
"""

from __future__ import annotations

from typing import Any

from asyncpg import Connection

from payorch.storage.database_thread import on_database_thread

# int4[] and uuid[]: PostgreSQL's fixed ids for them (pg_type.dat), the same on every server.
ARRAY_TYPE_OIDS = (1007, 2951)
LOOKUP_TIMEOUT_S = 10.0

# The catalog's rows for ARRAY_TYPE_OIDS, once looked up. Two first connections at once (two pools'
# threads) may both look them up: the same rows, set twice.
_known: list[Any] | None = None


@on_database_thread
async def know_array_types(conn: Connection) -> None:
    """Give `conn` the type information of `ARRAY_TYPE_OIDS`, looked up on this process's first
    connection (with `conn`, should this be it)."""
    global _known
    introspect = getattr(conn, "_introspect_types", None)
    settings = getattr(getattr(conn, "_protocol", None), "get_settings", lambda: None)()
    register = getattr(settings, "register_data_types", None)
    if introspect is None or register is None:
        return  # an asyncpg without these internals looks the types up itself
    if _known is None:
        rows, _statement = await introspect(ARRAY_TYPE_OIDS, LOOKUP_TIMEOUT_S)
        _known = list(rows)
    register(_known)
