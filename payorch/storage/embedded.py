"""An embedded PostgreSQL for local use and tests, run by pgserver under a data directory.

The server outlives nothing: pgserver stops it when the last process using it exits. A server left
running by a killed process is found through its postmaster.pid and reused.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import trio
from pgserver import get_server  # type: ignore[attr-defined]

DATABASE_NAME = "payorch"


def _start_blocking(data_dir: Path) -> str:
    data_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # pgserver falls back to /tmp for its lock files when XDG_RUNTIME_DIR is unset: harmless.
        warnings.simplefilter("ignore")
        server = get_server(data_dir, cleanup_mode="stop")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    return str(server.get_uri(DATABASE_NAME))


async def start_embedded_postgres(data_dir: Path) -> str:
    """Start (or join) the embedded server under `data_dir` and return the URL of its payorch database."""
    return await trio.to_thread.run_sync(_start_blocking, data_dir)
