"""Shutdown lets requests in flight finish: a request still running when shutdown begins gets its
full answer, and the service then stops; a login refusal it holds is answered at once."""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from payorch.config import Settings
from payorch.service import RunningService, run
from tests import webhook_receiver as receiving
from tests.helpers import PASSWORD, eventually, signup_body
from tests.webhook_receiver import ScriptedResponse, WebhookReceiver

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

webhook_receiver = receiving.webhook_receiver


async def _invite_token(settings: Settings, tmp_path: Path) -> str:
    """An invite made the way an operator makes one: `payorch invite --json`."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYORCH_")}
    env.update(PAYORCH_DATABASE__URL=settings.database.url, PAYORCH_SERVER__STATE_DIR=str(tmp_path / "state"))
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "payorch", "invite", "--email", "owner@shutdown.example", "--json"],
            env=env,
            cwd=tmp_path,
            capture_stdout=True,
            capture_stderr=True,
        )
    return str(json.loads(done.stdout)["token"])


async def test_request_in_flight_at_shutdown_gets_its_answer(
    settings: Settings, tmp_path: Path, webhook_receiver: WebhookReceiver
) -> None:
    trusting = settings.model_copy(
        update={"webhooks": settings.webhooks.model_copy(update={"ca_bundle": webhook_receiver.ca_path})}
    )
    token = await _invite_token(trusting, tmp_path)
    shutdown = trio.Event()
    answers: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        service: RunningService = await nursery.start(partial(run, trusting, shutdown=shutdown))
        async with httpx.AsyncClient(base_url=service.addresses[0], timeout=30) as http:
            signup = await http.post(
                f"/api/v1/merchants/signup?token={token}", json=signup_body("owner@shutdown.example", "SD-1")
            )
            assert signup.status_code == 201, signup.text
            login = await http.post(
                "/api/v1/auth/login", json={"email": "owner@shutdown.example", "password": PASSWORD}
            )
            jwt = {"Authorization": f"Bearer {login.json()['accessToken']}"}
            application = (await http.post("/api/v1/applications", json={"name": "shop"}, headers=jwt)).json()
            webhook = (
                await http.post(
                    f"/api/v1/applications/{application['id']}/webhooks",
                    json={"url": webhook_receiver.url},
                    headers=jwt,
                )
            ).json()
            webhook_receiver.script([ScriptedResponse(200, delay_s=1.5)])  # the test delivery takes a while

            async def slow_request() -> None:
                response = await http.post(
                    f"/api/v1/applications/{application['id']}/webhooks/{webhook['id']}/test", headers=jwt
                )
                answers.append({"status": response.status_code, **response.json()})

            nursery.start_soon(slow_request)
            await webhook_receiver.wait_for(1, timeout_s=10)  # the request is in flight now
            shutdown.set()

            async def answered() -> bool:
                return bool(answers)

            await eventually(answered, trusting.server.graceful_timeout_s + 5)
    (answer,) = answers
    assert (answer["status"], answer["success"], answer["httpStatusCode"]) == (200, True, 200)


async def test_a_login_held_at_shutdown_is_answered_429_and_the_service_stops_without_waiting_out_its_hold(
    settings: Settings,
) -> None:
    holding = settings.model_copy(
        update={
            "limits": settings.limits.model_copy(
                update={"login_per_minute": 1, "login_refusal_hold_s": 60.0, "login_refusal_hold_max_s": 60.0}
            )
        }
    )
    shutdown = trio.Event()
    answers: list[int] = []
    body = {"email": "nobody@held.example", "password": PASSWORD}
    with trio.fail_after(holding.server.graceful_timeout_s):  # the hold alone would be 30 s or more
        async with trio.open_nursery() as nursery:
            service: RunningService = await nursery.start(partial(run, holding, shutdown=shutdown))
            async with httpx.AsyncClient(base_url=service.addresses[0], timeout=30) as http:
                assert (await http.post("/api/v1/auth/login", json=body)).status_code == 401  # the one token

                async def held_login() -> None:
                    answers.append((await http.post("/api/v1/auth/login", json=body)).status_code)

                async with trio.open_nursery() as held:
                    held.start_soon(held_login)
                    await trio.sleep(1.0)  # sent, and held: its hold is 30 s or more
                    shutdown.set()
    assert answers == [429]
