"""A merchant's webhook receiver as a process of its own: HTTPS on loopback, every POST answered at
once with the status it was given, and, when asked, the moment each webhook arrived written out.

Run apart (`python -m bench.receiver`), so that terminating the receiver's TLS and answering costs
neither payorch (which may run in the benchmark's process) nor another receiver: a receiver draining
a backlog and the one whose latency is measured do not delay each other. It reads one JSON
`ReceiverSpec` on stdin and writes JSON lines on stdout: `{"url": ...}` once it listens, then, with
`note`, `{"id": <webhook-id>, "at": <Unix time the body had arrived>}` per webhook.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from payorch.dev_receiver import answer_lifespan

HOOK_PATH = "/hooks"
# Idle connections kept as long as nginx keeps them by default: whether payorch reuses its
# connections between deliveries depends on payorch alone.
KEEP_ALIVE_S = 75.0
START_TIMEOUT_S = 30.0

ASGIReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
ASGISend = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class ReceiverSpec:
    cert_path: str  # the certificate chain for localhost, PEM
    key_path: str
    status: int = 204
    note: bool = False  # write out each webhook's id and arrival


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _app(spec: ReceiverSpec) -> Callable[..., Awaitable[None]]:
    """A bare ASGI app (a framework would measure itself): takes every request's body, notes its
    `webhook-id` when asked, answers `spec.status` with no body."""

    async def app(scope: MutableMapping[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        at = time.time()
        event_id = dict(scope["headers"]).get(b"webhook-id")
        if spec.note and event_id is not None:
            _emit({"id": event_id.decode(), "at": at})
        await send({"type": "http.response.start", "status": spec.status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    return app


async def _serve(spec: ReceiverSpec) -> None:
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.certfile, config.keyfile = spec.cert_path, spec.key_path
    config.accesslog = None
    config.errorlog = logging.getLogger("bench.receiver")
    config.keep_alive_timeout = KEEP_ALIVE_S
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(hypercorn_serve, _app(spec), config))
        _emit({"url": f"https://localhost:{urlsplit(binds[0]).port}{HOOK_PATH}"})


def main() -> None:
    spec = ReceiverSpec(**json.loads(sys.stdin.read()))
    trio.run(_serve, spec)


@dataclass
class Receiver:
    """A receiver process, serving: its URL, and what it noted (webhook id: Unix time of arrival)."""

    url: str = ""
    received_at: dict[str, float] = field(default_factory=dict)


async def _lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[dict[str, Any]]:
    buffer = b""
    while chunk := await stream.receive_some():
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield json.loads(line)


@asynccontextmanager
async def running_receiver(
    cert_path: Path, key_path: Path, *, status: int = 204, note: bool = False
) -> AsyncIterator[Receiver]:
    """A receiver process serving on loopback with the certificate at `cert_path` (for localhost),
    answering `status`, noting arrivals when `note`, until the block ends; then stopped."""
    spec = ReceiverSpec(str(cert_path), str(key_path), status, note)
    receiver, listening = Receiver(), trio.Event()

    async def read(stream: trio.abc.ReceiveStream) -> None:
        async for line in _lines(stream):
            if "url" in line:
                receiver.url = line["url"]
                listening.set()
            else:
                receiver.received_at.setdefault(line["id"], line["at"])

    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                [sys.executable, "-m", "bench.receiver"],
                stdin=json.dumps(asdict(spec)).encode(),
                stdout=subprocess.PIPE,
                check=False,
            )
        )
        assert process.stdout is not None
        nursery.start_soon(read, process.stdout)
        with trio.fail_after(START_TIMEOUT_S):
            await listening.wait()
        yield receiver
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    main()
