"""SIGHUP reloads a real `payorch serve` while it serves: a bounded stream of requests from a few
concurrent clients goes through the reload without one failed request, the lowered rate limit holds
right after, a key that needs a restart is reported and kept, and a file that does not validate
changes nothing."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from payorch.config import ServerSettings, Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.storage.database import open_database
from tests.helpers import PASSWORD, eventually, signup_body
from tests.processes import GRACEFUL_TIMEOUT_S, config_text, logged_records, serving

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

UNKNOWN_SESSION = "/api/v1/sessions/00000000-0000-4000-8000-000000000000"
STARTING_LIMITS = "[limits]\nrequests_per_second = 1000\nburst = 1000\n"
# One token per 20 s: nothing refills while the test counts the burst, however slow the machine.
RELOADED_LIMITS = "[limits]\nrequests_per_second = 0.05\nburst = 3\n"
CLIENTS = 4
REQUESTS_PER_CLIENT = 100
SIGHUP_AFTER = 100  # requests answered before the file is rewritten and SIGHUP sent
EMAIL = "owner@reload.example"


async def _api_keys(database_dsn: str, base_url: str, count: int) -> list[str]:
    """`count` API keys of one application of a merchant signed up on the running service."""
    async with open_database(database_dsn, min_size=1, max_size=1) as db:
        invite = await issue_invite(db, Settings(server=ServerSettings(public_base_url=base_url)), EMAIL)
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        signup = await http.post(
            f"/api/v1/merchants/signup?token={invite.token}", json=signup_body(EMAIL, "RELOAD-1")
        )
        assert signup.status_code == 201, signup.text
        login = await http.post("/api/v1/auth/login", json={"email": EMAIL, "password": PASSWORD})
        jwt = {"Authorization": f"Bearer {login.json()['accessToken']}"}
        application = (await http.post("/api/v1/applications", json={"name": "shop"}, headers=jwt)).json()
        keys = []
        for _ in range(count):
            created = await http.post(
                f"/api/v1/applications/{application['id']}/api-keys", json={"description": "s"}, headers=jwt
            )
            assert created.status_code == 201, created.text
            keys.append(created.json()["key"])
        return keys


def _logged(stderr_path: Path, message: str) -> list[dict[str, Any]]:
    return [record for record in logged_records(stderr_path) if record.get("msg") == message]


async def _generation(http: httpx.AsyncClient) -> int:
    response = await http.get("/metrics")
    assert response.status_code == 200
    for line in response.text.splitlines():
        if line.startswith("payorch_config_generation "):
            return int(float(line.split()[1]))
    raise AssertionError("/metrics has no payorch_config_generation")


async def test_sighup_reloads_under_a_stream_of_requests_without_a_failed_one(
    database_dsn: str, tmp_path: Path
) -> None:
    async with serving(database_dsn, tmp_path, config=STARTING_LIMITS) as (process, base_url, stderr_path):
        stream_key, probe_key = await _api_keys(database_dsn, base_url, 2)
        answered: list[int] = []
        failures: list[str] = []
        enough_answered = trio.Event()

        async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:

            async def stream() -> None:
                for _ in range(REQUESTS_PER_CLIENT):
                    try:
                        response = await http.get(UNKNOWN_SESSION, headers={"X-API-Key": stream_key})
                    except httpx.TransportError as error:
                        failures.append(repr(error))
                        continue
                    answered.append(response.status_code)
                    if response.status_code not in (404, 429):
                        failures.append(f"{response.status_code}: {response.text}")
                    if len(answered) >= SIGHUP_AFTER:
                        enough_answered.set()

            async def reload_midway() -> None:
                await enough_answered.wait()
                # A lower limit, and a key that needs a restart (the pool was opened with 10).
                config = config_text(RELOADED_LIMITS + "[database]\npool_max = 7\n")
                (tmp_path / "config.toml").write_text(config)
                process.send_signal(signal.SIGHUP)

            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    for _ in range(CLIENTS):
                        nursery.start_soon(stream)
                    nursery.start_soon(reload_midway)
            assert failures == []
            assert len(answered) == CLIENTS * REQUESTS_PER_CLIENT

            async def reloaded() -> bool:
                return await _generation(http) == 2

            await eventually(reloaded, timeout_s=30)
            # The new limit holds right after: a credential's first 3 requests, then 429.
            probe = {"X-API-Key": probe_key}
            statuses = [(await http.get(UNKNOWN_SESSION, headers=probe)).status_code for _ in range(3)]
            assert statuses == [404, 404, 404]
            refused = await http.get(UNKNOWN_SESSION, headers=probe)
            assert refused.status_code == 429
            assert int(refused.headers["Retry-After"]) >= 1
            (done,) = _logged(stderr_path, "configuration reloaded")
            assert done["generation"] == 2
            assert "limits.burst" in done["changed"]
            (kept,) = [record for record in logged_records(stderr_path) if "restartOnly" in record]
            assert kept["restartOnly"] == ["database.pool_max"]

            # A file that does not validate changes nothing: one line names the key.
            (tmp_path / "config.toml").write_text(config_text("[limits]\nburst = 0\n"))
            process.send_signal(signal.SIGHUP)

            async def refused_reload() -> list[dict[str, Any]] | None:
                return _logged(stderr_path, "configuration not reloaded: the running one stays") or None

            (refusal,) = await eventually(refused_reload, timeout_s=30)
            assert refusal["key"] == "limits.burst"
            assert refusal["level"] == "error"
            assert await _generation(http) == 2
            assert (await http.get(UNKNOWN_SESSION, headers=probe)).status_code == 429

        process.send_signal(signal.SIGTERM)
        with trio.fail_after(GRACEFUL_TIMEOUT_S + 5):
            assert await process.wait() == 0
