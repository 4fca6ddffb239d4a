"""`payorch serve` as separate processes, for tests of what only a real process shows (signals,
logs on stderr, two processes on one database)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import trio

GRACEFUL_TIMEOUT_S = 3


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def serve_environment(
    database_dsn: str, tmp_path: Path, port: int, extra: dict[str, str] | None = None
) -> dict[str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "config.toml"
    config.write_text(f"[server]\ngraceful_timeout_s = {GRACEFUL_TIMEOUT_S}\n")
    env = {name: value for name, value in os.environ.items() if not name.upper().startswith("PAYORCH_")}
    env.pop("XDG_RUNTIME_DIR", None)  # as in most containers; nothing may write plain text to stderr
    env.update(
        PAYORCH_CONFIG=str(config),
        PAYORCH_SERVER__BIND=f"127.0.0.1:{port}",
        PAYORCH_SERVER__PUBLIC_BASE_URL=f"http://127.0.0.1:{port}",
        PAYORCH_SERVER__STATE_DIR=str(tmp_path / "state"),
        PAYORCH_DATABASE__URL=database_dsn,
    )
    env.update(extra or {})
    return env


async def wait_until_healthy(base_url: str, process: trio.Process, deadline_s: float = 30.0) -> None:
    async with httpx.AsyncClient(base_url=base_url) as http:
        with trio.fail_after(deadline_s):
            while True:
                assert process.returncode is None, "payorch serve exited before it was healthy"
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.05)


@asynccontextmanager
async def serving(
    database_dsn: str, tmp_path: Path, extra_env: dict[str, str] | None = None
) -> AsyncIterator[tuple[trio.Process, str, Path]]:
    """`payorch serve` running and healthy: its process, base URL and the file holding its stderr."""
    port = free_port()
    env = serve_environment(database_dsn, tmp_path, port, extra_env)  # creates tmp_path
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "payorch", "serve"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        await wait_until_healthy(base_url, process)
        yield process, base_url, stderr_path
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
