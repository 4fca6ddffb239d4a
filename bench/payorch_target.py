"""The measured target: payorch itself, started in this process with `payorch.service.run` on port 0,
on an embedded PostgreSQL under a fresh data directory; and what a request to it looks like.

Merchants, applications and API keys are set up by `bench.shop`.
"""

from __future__ import annotations

import json
import logging
import secrets
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio
from cryptography.fernet import Fernet
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from payorch.config import (
    AuthSettings,
    DatabaseSettings,
    EngineSettings,
    LimitSettings,
    ProviderSettings,
    ReconciliationSettings,
    SecuritySettings,
    ServerSettings,
    Settings,
    StripeSettings,
)
from payorch.logs import JsonFormatter
from payorch.service import RunningService, run

SESSIONS_PATH = "/api/v1/sessions"
# Written out, not serialised: the amount is the JSON number 100.00 exactly as a merchant sends it.
SESSION_BODY = (
    '{"orderReference": "bench-order-1", "paymentMethod": "card", "currency": "PLN", '
    '"amount": {"total": 100.00, "shipping": 0, "tax": 0}, '
    '"customer": {"email": "buyer@example.com", "firstName": "Jan", "lastName": "Kowalski"}}'
)
# Database connections for 32 concurrent requests: the HTTP layer's reads run beside the actor's
# transactions, and the embedded server shares the machine's two cores with everything else.
POOL_MIN = 4
POOL_MAX = 16
# The per-credential rate limit (default 50 requests/s per API key) would measure the limiter, not the
# service: it is raised out of reach. Each request still pays for being charged to its bucket.
UNREACHABLE_RATE = 1_000_000
# Every client of the benchmark connects from 127.0.0.1, standing for many: one address may hold as
# many connections as the node (server.max_connections), as behind a proxy.
ONE_ADDRESS_FOR_ALL = ServerSettings().max_connections
# Limits the speed scenarios cannot reach: one merchant creates through many keys of up to 10,000
# applications (idle), and lists as often as its connections ask.
UNREACHABLE_LIMITS = LimitSettings(
    requests_per_second=UNREACHABLE_RATE,
    burst=UNREACHABLE_RATE,
    merchant_requests_per_second=UNREACHABLE_RATE,
    merchant_burst=UNREACHABLE_RATE,
    merchant_list_reads=POOL_MAX,
    applications_per_merchant=UNREACHABLE_RATE,
)


class _InitOnlySettings(Settings):
    """`Settings` from the constructor alone: no PAYORCH_* variable of the caller's shell applies."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def bench_settings(
    work_dir: Path,
    *,
    stripe_api_base: str = "",
    actor_idle_s: float | None = None,
    limits: LimitSettings | None = None,
    bind: str = "127.0.0.1:0",
) -> Settings:
    """Defaults, except: `bind` (loopback, port 0), the embedded database and state under
    `work_dir`, fresh secrets, no connection limit per address below the node's, rate limits the
    benchmark cannot reach unless `limits` are given, and no daily reconciliation (from its
    `run_at_utc` payorch would start a run for every linked account, thousands in some scenarios,
    and a figure would depend on the hour it was measured at; the reconciliation scenario starts its
    runs itself). With `stripe_api_base`, the Stripe provider is enabled too, its API there; with
    `actor_idle_s`, actors stop after that long idle."""
    providers = ProviderSettings()
    if stripe_api_base:
        providers = ProviderSettings(stripe=StripeSettings(enabled=True, api_base=stripe_api_base))
    engine = EngineSettings() if actor_idle_s is None else EngineSettings(actor_idle_s=actor_idle_s)
    return _InitOnlySettings(
        server=ServerSettings(
            bind=bind,
            state_dir=work_dir / "state",
            max_connections_per_address=ONE_ADDRESS_FOR_ALL,
        ),
        database=DatabaseSettings(url="", data_dir=work_dir / "pgdata", pool_min=POOL_MIN, pool_max=POOL_MAX),
        auth=AuthSettings(jwt_secret=secrets.token_urlsafe(48)),
        security=SecuritySettings(encryption_key=Fernet.generate_key().decode()),
        engine=engine,
        providers=providers,
        limits=limits or UNREACHABLE_LIMITS,
        reconciliation=ReconciliationSettings(daily=False),
    )


IDEMPOTENCY_HEADER = "Idempotency-Key"
API_KEY_HEADER = "X-API-Key"


@dataclass(frozen=True)
class Target:
    """Where to send the benchmark's requests, how, and the headers they need. Requests with a
    `unique_header` each get a value of their own (an Idempotency-Key for creates), and so does the
    mark `unique_in_body` in the body; with `header_sets`, each request adds the next set in turn
    (one API key per application); with `local_addresses`, the connections come from those
    addresses in turn (`bench.load`)."""

    url: str
    headers: dict[str, str]
    method: str = "POST"
    body: str = SESSION_BODY
    unique_header: str | None = IDEMPOTENCY_HEADER
    header_sets: list[dict[str, str]] = field(default_factory=list)
    unique_in_body: str | None = None
    local_addresses: list[str] = field(default_factory=list)


def create_target(base_url: str, api_keys: list[str]) -> Target:
    """`POST /api/v1/sessions`, spread evenly over the applications of `api_keys`."""
    return Target(
        url=base_url + SESSIONS_PATH,
        headers={},
        header_sets=[{API_KEY_HEADER: key} for key in api_keys],
    )


def read_target(base_url: str, session_id: str, headers: dict[str, str]) -> Target:
    """`GET /api/v1/sessions/{session_id}`, the same request every time."""
    return Target(
        url=f"{base_url}{SESSIONS_PATH}/{session_id}",
        headers=headers,
        method="GET",
        body="",
        unique_header=None,
    )


@contextmanager
def json_log_file(path: Path) -> Iterator[None]:
    """Log as `payorch serve` does (one JSON line per request, INFO and up), into `path`: the cost
    of the request log is part of what is measured, its lines are not part of the output."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    handler = logging.FileHandler(path)
    handler.setFormatter(JsonFormatter())
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        handler.close()


def problems_logged(log_path: Path) -> list[str]:
    """The warnings and errors in payorch's JSON log at `log_path`, and any line that is not JSON (a
    process's stderr goes there too when payorch runs apart), the first few also shown on stderr
    (the log itself is in a temporary directory, gone after the run)."""
    lines = log_path.read_text().splitlines() if log_path.exists() else []
    problems = [line for line in lines if _is_problem(line)]
    for line in problems[:5]:
        print(f"bench: payorch logged: {line}", file=sys.stderr, flush=True)
    return problems


def _is_problem(line: str) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return bool(line.strip())
    return not isinstance(record, dict) or record.get("level") in ("warning", "error", "critical")


@asynccontextmanager
async def temporary_postgres(data_dir: Path) -> AsyncIterator[None]:
    """The embedded PostgreSQL under `data_dir`, stopped and deleted when the block ends.

    Started here with pgserver's cleanup mode "delete"; payorch's own start (`database.url` empty)
    then joins this server, and nothing outlives the benchmark."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pgserver warns at import when XDG_RUNTIME_DIR is unset
        import pgserver

    start = partial(pgserver.get_server, data_dir, cleanup_mode="delete")  # type: ignore[attr-defined]
    server = await trio.to_thread.run_sync(start)
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(server.cleanup)


@dataclass(frozen=True)
class Payorch:
    """payorch, serving."""

    base_url: str
    service: RunningService
    settings: Settings
    log_path: Path  # its JSON log


@asynccontextmanager
async def running_payorch(settings: Settings, log_path: Path) -> AsyncIterator[Payorch]:
    """payorch serving on loopback with `settings` (`bench_settings`), on a fresh embedded
    PostgreSQL, logging to `log_path`, until the block ends; then shut down."""
    shutdown = trio.Event()
    with json_log_file(log_path):
        async with temporary_postgres(settings.database.data_dir), trio.open_nursery() as nursery:
            service: RunningService = await nursery.start(partial(run, settings, shutdown=shutdown))
            yield Payorch(service.addresses[0], service, settings, log_path)
            shutdown.set()
