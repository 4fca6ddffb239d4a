"""`payorch serve` as separate processes, for tests of what only a real process shows (signals,
logs on stderr, two processes on one database)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from payorch.engine.payments.checkout import SESSION_CREATE_SCOPE
from payorch.storage.database import Connection
from tests.helpers import eventually

GRACEFUL_TIMEOUT_S = 3
# Tries at starting `payorch serve` on a free port: between `free_port` closing its probe and the
# process binding, another process (a parallel test, a client's ephemeral port) can take the port.
START_ATTEMPTS = 3


class PortTaken(Exception):
    """`payorch serve` exited because its port was taken before it could bind it."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def config_text(more: str = "") -> str:
    """What `serve_environment` writes to the configuration file: `more` after its own lines."""
    return f"[server]\ngraceful_timeout_s = {GRACEFUL_TIMEOUT_S}\n{more}"


def serve_environment(
    database_dsn: str, tmp_path: Path, port: int, extra: dict[str, str] | None = None, config: str = ""
) -> dict[str, str]:
    """The environment of `payorch serve` on `port`; its configuration file, `tmp_path/config.toml`,
    holds `config_text(config)`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.toml").write_text(config_text(config))
    config_path = tmp_path / "config.toml"
    env = {name: value for name, value in os.environ.items() if not name.upper().startswith("PAYORCH_")}
    env.pop("XDG_RUNTIME_DIR", None)  # as in most containers; nothing may write plain text to stderr
    env.update(
        PAYORCH_CONFIG=str(config_path),
        PAYORCH_SERVER__BIND=f"127.0.0.1:{port}",
        PAYORCH_SERVER__PUBLIC_BASE_URL=f"http://127.0.0.1:{port}",
        PAYORCH_SERVER__STATE_DIR=str(tmp_path / "state"),
        PAYORCH_DATABASE__URL=database_dsn,
        PAYORCH_RECONCILIATION__DAILY="false",  # no reconciliation run starting by itself beside a test
    )
    env.update(extra or {})
    return env


def _text(path: Path) -> str:
    return path.read_text(errors="replace")  # a few lines, written by a process of the test's own


def serving_at(stderr_path: Path) -> list[str]:
    """The addresses `payorch serve` logged it serves at (its `serving` line on stderr), if it did yet."""
    for line in _text(stderr_path).splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("msg") == "serving":
            return list(record.get("addresses") or [])
    return []


async def wait_until_healthy(
    base_url: str, process: trio.Process, deadline_s: float = 30.0, stderr_path: Path | None = None
) -> None:
    """Until `process` answers 200 on /healthz. With its `stderr_path`, only once it has logged that it
    serves at `base_url`: a 200 from whoever else listens there does not count."""
    async with httpx.AsyncClient(base_url=base_url) as http:

        async def healthy() -> bool:
            if process.returncode is not None:
                logged = _text(stderr_path) if stderr_path else ""
                # Taken before serve checked it (its one line), or between its check and its bind.
                if "is in use by another process" in logged or "Address already in use" in logged:
                    raise PortTaken(base_url)
                raise AssertionError(f"payorch serve exited before it was healthy:\n{logged[-2000:]}")
            if stderr_path is not None and base_url not in serving_at(stderr_path):
                return False
            try:
                return (await http.get("/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(healthy, deadline_s)


@asynccontextmanager
async def serving(
    database_dsn: str,
    tmp_path: Path,
    extra_env: dict[str, str] | None = None,
    config: str = "",
    arguments: Sequence[str] = (),
    deadline_s: float = 30.0,
) -> AsyncIterator[tuple[trio.Process, str, Path]]:
    """`payorch serve [arguments]` running and healthy within `deadline_s`: its process, base URL and
    the file holding its stderr. Its configuration file is `tmp_path/config.toml`, holding
    `config_text(config)`."""
    for attempt in range(1, START_ATTEMPTS + 1):
        port = free_port()
        env = serve_environment(database_dsn, tmp_path, port, extra_env, config)  # creates tmp_path
        stderr_path = tmp_path / "stderr.log"
        with stderr_path.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "payorch", "serve", *arguments],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        try:
            base_url = f"http://127.0.0.1:{port}"
            try:
                await wait_until_healthy(base_url, process, deadline_s, stderr_path=stderr_path)
            except PortTaken:
                if attempt == START_ATTEMPTS:
                    raise
                continue
            yield process, base_url, stderr_path
            return
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
    raise AssertionError("unreachable")


def logged_records(stderr_path: Path) -> list[dict[str, Any]]:
    """The JSON log records a process wrote to `stderr_path`, in order; other lines are skipped."""
    records = []
    for line in stderr_path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


async def keys_and_sessions(
    conn: Connection, application_id: uuid.UUID
) -> tuple[dict[str, uuid.UUID], list[uuid.UUID]]:
    """The application's create keys with the session each names, and every session it has."""
    keys = await conn.fetch(
        "SELECT key, resource_id FROM idempotency_keys WHERE application_id = $1 AND scope = $2",
        application_id,
        SESSION_CREATE_SCOPE,
    )
    stored = await conn.fetch("SELECT id FROM checkout_sessions WHERE application_id = $1", application_id)
    return {row["key"]: row["resource_id"] for row in keys}, [row["id"] for row in stored]
