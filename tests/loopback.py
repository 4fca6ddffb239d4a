"""An ASGI app of the tests (a fake provider, a webhook receiver) served by hypercorn on 127.0.0.1."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.typing import Framework


@asynccontextmanager
async def serving_on_loopback(
    app: Framework,
    logger: str,
    *,
    certfile: Path | None = None,
    keyfile: Path | None = None,
    port: int = 0,
) -> AsyncIterator[int]:
    """Serve `app` on `port` of 127.0.0.1 (0: a free one; over TLS with `certfile` and `keyfile`)
    until the block exits; yields the port. Leaving the block cancels the server and any request
    being answered, and closes its connections."""
    config = HypercornConfig()
    config.bind = [f"127.0.0.1:{port}"]
    if certfile is not None and keyfile is not None:
        config.certfile, config.keyfile = str(certfile), str(keyfile)
    config.accesslog = None
    config.errorlog = logging.getLogger(logger)
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(hypercorn_serve, app, config))
        port = urlsplit(binds[0]).port
        assert port is not None
        yield port
        nursery.cancel_scope.cancel()
