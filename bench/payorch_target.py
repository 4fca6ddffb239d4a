"""The measured target: payorch itself, started in this process with `payorch.service.run` on port 0,
on an embedded PostgreSQL under a fresh data directory, with one merchant ready to create sessions.

The merchant is set up as a real one is: invited (straight into the database, as `payorch invite`
does), then signup, login, an application, the sandbox provider linked, an API key, all over HTTP.
"""

from __future__ import annotations

import logging
import secrets
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio
import trio_asyncio
from cryptography.fernet import Fernet
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from payorch.config import (
    AuthSettings,
    DatabaseSettings,
    LimitSettings,
    SecuritySettings,
    ServerSettings,
    Settings,
)
from payorch.invites import issue_invite
from payorch.logs import JsonFormatter
from payorch.service import RunningService, run
from payorch.storage.database import open_database

SESSIONS_PATH = "/api/v1/sessions"
# Written out, not serialised: the amount is the JSON number 100.00 exactly as a merchant sends it.
SESSION_BODY = (
    '{"orderReference": "bench-order-1", "paymentMethod": "card", "currency": "PLN", '
    '"amount": {"total": 100.00, "shipping": 0, "tax": 0}, '
    '"customer": {"email": "buyer@example.com", "firstName": "Jan", "lastName": "Kowalski"}}'
)
MERCHANT_EMAIL = "bench@merchant.example"
# A throwaway merchant in a temporary database.
PASSWORD = "correct-horse-battery"  # noqa: S105
SANDBOX_API_KEY = "sk_sandbox_bench_0123456789"
# Database connections for 32 concurrent requests: the HTTP layer's reads run beside the actor's
# transactions, and the embedded server shares the machine's two cores with everything else.
POOL_MIN = 4
POOL_MAX = 16
# The per-credential rate limit (default 50 requests/s per API key) would measure the limiter, not the
# service: it is raised out of reach. Each request still pays for being charged to its bucket.
UNREACHABLE_RATE = 1_000_000


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


def bench_settings(work_dir: Path) -> Settings:
    """Defaults, except: port 0, the embedded database and state under `work_dir`, fresh secrets,
    and a per-credential rate limit the benchmark cannot reach."""
    return _InitOnlySettings(
        server=ServerSettings(bind="127.0.0.1:0", state_dir=work_dir / "state"),
        database=DatabaseSettings(url="", data_dir=work_dir / "pgdata", pool_min=POOL_MIN, pool_max=POOL_MAX),
        auth=AuthSettings(jwt_secret=secrets.token_urlsafe(48)),
        security=SecuritySettings(encryption_key=Fernet.generate_key().decode()),
        limits=LimitSettings(requests_per_second=UNREACHABLE_RATE, burst=UNREACHABLE_RATE),
    )


IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass(frozen=True)
class Target:
    """Where to send the benchmark's requests, how, and the headers they need. Requests with a
    `unique_header` each get a value of their own (an Idempotency-Key for creates)."""

    url: str
    headers: dict[str, str]
    method: str = "POST"
    body: str = SESSION_BODY
    unique_header: str | None = IDEMPOTENCY_HEADER


@dataclass(frozen=True)
class Targets:
    """The two measured requests of one server: create a session, and read one."""

    create: Target
    read: Target


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


async def _invite_token(service: RunningService, settings: Settings) -> str:
    # `service.db` belongs to run()'s trio_asyncio loop, which only run()'s own tasks can reach (the
    # loop is a context variable of that task tree), so the invite goes through a small pool of ours.
    async with (
        trio_asyncio.open_loop(),
        open_database(service.db.dsn, min_size=1, max_size=1) as db,
    ):
        invite = await issue_invite(db, settings, MERCHANT_EMAIL)
    return invite.token


async def _expect(response: httpx.Response, status: int) -> Any:
    if response.status_code != status:
        raise RuntimeError(
            f"{response.request.method} {response.request.url.path}: expected {status}, "
            f"got {response.status_code}: {response.text[:500]}"
        )
    return response.json()


def _signup_body() -> dict[str, Any]:
    return {
        "organization": {
            "legalBusinessName": "Bench Widgets Ltd",
            "companyRegistrationNumber": "BENCH-000001",
            "registeredAddress": {
                "line1": "1 Market Street",
                "city": "Warsaw",
                "state": "Mazowieckie",
                "postalCode": "00-001",
                "country": "PL",
            },
            "companyWebsite": "https://bench.example",
            "industry": "Retail",
            "sector": "E-commerce",
            "contactPersonFirstName": "Ada",
            "contactPersonLastName": "Lovelace",
            "contactPersonEmail": "ada@bench.example",
        },
        "admin": {"email": MERCHANT_EMAIL, "password": PASSWORD, "firstName": "Ada", "lastName": "Lovelace"},
    }


async def _api_key_of_new_shop(base_url: str, invite_token: str) -> str:
    """Sign up, log in, create an application linked to the sandbox, and return an API key for it."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        await _expect(
            await http.post(f"/api/v1/merchants/signup?token={invite_token}", json=_signup_body()), 201
        )
        login = await _expect(
            await http.post("/api/v1/auth/login", json={"email": MERCHANT_EMAIL, "password": PASSWORD}), 200
        )
        jwt = {"Authorization": f"Bearer {login['accessToken']}"}
        application = await _expect(
            await http.post("/api/v1/applications", json={"name": "Bench"}, headers=jwt), 201
        )
        app_path = f"/api/v1/applications/{application['id']}"
        await _expect(
            await http.post(
                f"{app_path}/providers",
                json={
                    "name": "sandbox",
                    "paymentMethods": ["card"],
                    "credentials": {"apiKey": SANDBOX_API_KEY},
                },
                headers=jwt,
            ),
            201,
        )
        key = await _expect(
            await http.post(f"{app_path}/api-keys", json={"description": "bench"}, headers=jwt), 201
        )
    return str(key["key"])


async def _new_session(base_url: str, headers: dict[str, str]) -> str:
    """A session of the merchant, for the read benchmark."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        created = await _expect(
            await http.post(
                SESSIONS_PATH,
                content=SESSION_BODY,
                headers={**headers, "Content-Type": "application/json", IDEMPOTENCY_HEADER: "bench-read"},
            ),
            201,
        )
    return str(created["sessionId"])


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


@asynccontextmanager
async def running_payorch(work_dir: Path) -> AsyncIterator[Targets]:
    """payorch serving on loopback with a merchant ready, and one session of it to read, until the
    block ends; then shut down."""
    settings = bench_settings(work_dir)
    shutdown = trio.Event()
    with json_log_file(work_dir / "payorch.log"):
        async with temporary_postgres(settings.database.data_dir), trio.open_nursery() as nursery:
            service: RunningService = await nursery.start(partial(run, settings, shutdown=shutdown))
            base_url = service.addresses[0]
            api_key = await _api_key_of_new_shop(base_url, await _invite_token(service, settings))
            headers = {"X-API-Key": api_key}
            session_id = await _new_session(base_url, headers)
            yield Targets(
                create=Target(url=base_url + SESSIONS_PATH, headers=headers),
                read=read_target(base_url, session_id, headers),
            )
            shutdown.set()
