"""run(): the whole service as one Trio nursery tree.

    database                   asyncpg on an event loop in a thread of its own (storage/loop_thread.py):
    │                          the pool, and the node's dedicated connection (its lock, LISTEN);
    │                          embedded PostgreSQL when database.url is empty
    ├── runtime                actors and supervisors (runtime.py)
    └── HTTP server            hypercorn's HTTP/1.1 on trio (http/server.py), started with nursery.start

Cancellation is the shutdown: `shutdown` set (by SIGTERM/SIGINT in `serve_until_signalled`) makes
hypercorn stop accepting and finish in-flight requests within `server.graceful_timeout_s`; then the
tree unwinds and the pool closes.

SIGHUP reloads the configuration: `serve_until_signalled` asks for it, and a task beside hypercorn
loads it again (`reload_settings`, in a worker thread) and applies it (`Runtime.reload`), one
SIGHUP after the other, in the order they came; requests are served meanwhile.
"""

from __future__ import annotations

import gc
import logging
import math
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.middleware import ProxyFixMiddleware
from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, ASGISendEvent, Scope

from payorch.config import ConfigError, Settings
from payorch.http import server as http_server
from payorch.http.request_limits import RequestLimits
from payorch.runtime import Runtime, open_runtime
from payorch.storage.database import Database, database_url, open_database
from payorch.storage.migrations import migrate

log = logging.getLogger("payorch.service")


@dataclass(frozen=True)
class RunningService:
    """Handed to whoever started the service once it accepts connections."""

    addresses: list[str]
    db: Database


def _hypercorn_config(settings: Settings) -> HypercornConfig:
    config = HypercornConfig()  # http_server.serve sets what bounds a client's connections
    config.bind = [settings.server.bind]
    config.graceful_timeout = settings.server.graceful_timeout_s
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


def _finish_responses_uncancelled(app: ASGIFramework) -> ASGIFramework:
    """`app`, with the last send of each HTTP response shielded from quart-trio's cancellation.

    quart-trio cancels its request nursery as soon as the client's side is done, which interrupts
    hypercorn while it handles that last send: hypercorn then never arms the connection's idle
    timer, so an idle keep-alive connection is never closed, neither after `keep_alive_timeout`
    nor on shutdown, and every shutdown waits out `server.graceful_timeout_s`.
    """

    async def asgi(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        async def send_last_uncancelled(message: ASGISendEvent) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                with trio.fail_after(5, shield=True):
                    await send(message)
            else:
                await send(message)

        await app(scope, receive, send_last_uncancelled)

    return asgi


def client_address_from_proxies(app: ASGIFramework, trusted_hops: int) -> ASGIFramework:
    """`app`, seeing the client's address (and scheme and host) as the `trusted_hops` proxies in
    front of it forwarded them in `X-Forwarded-*`; `app` itself when no proxy is trusted, so a
    forged header changes nothing. Only the rightmost `trusted_hops` entries count: what a client
    puts in front of them itself is ignored."""
    if trusted_hops == 0:
        return app
    return ProxyFixMiddleware(app, mode="legacy", trusted_hops=trusted_hops)


async def reload_when_asked(
    runtime: Runtime, requests: trio.MemoryReceiveChannel[None], reload_settings: Callable[[], Settings]
) -> None:
    """For each request (a SIGHUP), in order, until the channel closes: load the configuration with
    `reload_settings` and apply it. One that does not load, or cannot be applied, changes nothing:
    one log line names the key, and the running configuration stays."""
    async for _ in requests:
        try:
            loaded = await trio.to_thread.run_sync(reload_settings)
            runtime.reload(loaded)
        except ConfigError as error:
            runtime.services.context.metrics.config_reload_failed()
            log.error(
                "configuration not reloaded: the running one stays",
                extra={
                    "error": str(error),
                    "key": error.key,
                    "generation": runtime.services.context.live.generation,
                },
            )
        except Exception:
            # A bug, not the file: the service keeps serving on the configuration it had.
            runtime.services.context.metrics.config_reload_failed()
            log.exception(
                "configuration not reloaded: the running one stays",
                extra={"key": None, "generation": runtime.services.context.live.generation},
            )


# Objects the garbage collector tracks, made and not yet freed since its last young collection, that
# start the next one (Python's default: 700).
YOUNG_COLLECTION_THRESHOLD = 10_000


def _collect_young_less_often() -> None:
    """Start a young collection after `YOUNG_COLLECTION_THRESHOLD` objects, not 700. What a request
    makes lives until it is answered: with a few dozen requests in flight, 700 new objects were
    reached every few requests, and each young collection walked the objects of the requests in
    flight, all alive, and moved them on to the middle generation, to be walked again there. At peak
    in the bench's process, collections cost 70 µs per create, 125 µs per create over 50
    applications and 78 µs per read (a tenth of a read's CPU); at 10,000, most of those objects are
    freed by their reference count before a collection comes, and collections cost 6, 16 and 9 µs.
    Each young collection walks more then: under peak load one pause of 4 to 10 ms about every
    second, instead of a pause of 0.3 ms every few milliseconds (docs/benchmarks.md, "Where the
    time goes"). A cycle of garbage is kept until the next collection, as before: at most the
    threshold's objects."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, middle, old)


def _freeze_what_startup_made() -> None:
    """What the process holds once it serves (its modules, the app and its routes, the runtime, and
    in a process that hosts payorch beside other code, that code's) lives about as long as the
    process: after one collection, so that no garbage is kept, it is frozen out of the garbage
    collector's sight (`gc.freeze`). A full collection while serving then walks what requests and
    sessions made only. It runs every ten seconds or so under load, all of it in the event loop's
    thread: walking everything, it took 75 to 97 ms in the bench's process (which hosts payorch),
    and every request in flight waited that long (the neighbours bench's others' create p99 beside
    a routing flood was such a pause). What is frozen and later dropped is still freed by its
    reference count; only a cycle among such objects stays. `payorch serve` has frozen what its
    imports made already (`cli._no_collections_while_importing`); this adds what startup built."""
    gc.collect()
    gc.freeze()


async def run(
    settings: Settings,
    *,
    shutdown: trio.Event,
    reload_settings: Callable[[], Settings] | None = None,
    reload_requests: trio.MemoryReceiveChannel[None] | None = None,
    sockets: list[socket.socket] | None = None,
    task_status: trio.TaskStatus[RunningService] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until `shutdown` is set, then stop gracefully. Reports `RunningService` when ready. With
    `reload_settings`, each message on `reload_requests` reloads the configuration (until the
    channel closes, which its sender does once it sets `shutdown`). With `sockets` (listening), it
    serves on them instead of binding `server.bind`."""
    dsn = await database_url(settings)
    async with open_database(
        dsn, min_size=settings.database.pool_min, max_size=settings.database.pool_max
    ) as db:
        applied = await migrate(db)
        if applied:
            log.info("migrations applied", extra={"migrations": applied})
        limits = http_server.ConnectionLimits.of(settings.server)
        http_server.ensure_open_files(limits)
        async with open_runtime(settings, db) as runtime, trio.open_nursery() as nursery:
            addresses: list[str] = await nursery.start(
                partial(
                    http_server.serve,
                    client_address_from_proxies(
                        _finish_responses_uncancelled(runtime.app), settings.server.trusted_proxy_hops
                    ),
                    _hypercorn_config(settings),
                    limits,
                    shutdown_trigger=shutdown.wait,
                    refused=runtime.services.context.metrics.connection_refused,
                    sockets=sockets,
                )
            )
            log.info("serving", extra={"addresses": addresses})
            nursery.start_soon(_end_login_holds_at, shutdown, runtime.services.limits)
            _freeze_what_startup_made()
            _collect_young_less_often()
            if reload_settings is not None and reload_requests is not None:
                nursery.start_soon(reload_when_asked, runtime, reload_requests, reload_settings)
            task_status.started(RunningService(addresses=addresses, db=db))
    log.info("stopped")


async def _end_login_holds_at(shutdown: trio.Event, limits: RequestLimits) -> None:
    """Once `shutdown` is set, answer the login refusals held (`RequestLimits.end_login_holds`):
    the graceful shutdown waits for requests in flight, and a held refusal is one."""
    await shutdown.wait()
    limits.end_login_holds()


async def serve_until_signalled(
    settings: Settings,
    reload_settings: Callable[[], Settings] | None = None,
    *,
    sockets: list[socket.socket] | None = None,
    task_status: trio.TaskStatus[RunningService] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the service until SIGTERM or SIGINT, then shut down gracefully. SIGHUP reloads the
    configuration with `reload_settings` (ignored without one). Serves on `sockets` when given (see
    `run`); reports `RunningService` when ready."""
    shutdown = trio.Event()
    asked, reload_requests = trio.open_memory_channel[None](math.inf)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:

            async def on_signals() -> None:
                async with asked:
                    async for signum in signals:
                        if signum == signal.SIGHUP:
                            log.info("reloading the configuration", extra={"signal": "SIGHUP"})
                            asked.send_nowait(None)
                            continue
                        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
                        shutdown.set()
                        return

            nursery.start_soon(on_signals)
            await run(
                settings,
                shutdown=shutdown,
                reload_settings=reload_settings,
                reload_requests=reload_requests,
                sockets=sockets,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()
