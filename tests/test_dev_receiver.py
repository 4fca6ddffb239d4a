"""`payorch dev-receiver`: a webhook receiver on this machine that payorch trusts with
`webhooks.allow_loopback`, printing each delivery verified or rejected. End to end: the command
started as a newcomer starts it, a session paid, `verified session.completed` printed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio

from payorch.config import Settings
from payorch.dev_receiver import Receiver
from payorch.development_ca import ensure_development_ca
from payorch.outbound.signing import key_fingerprint, new_signing_secret, webhook_headers
from payorch.storage.database import Database
from tests.helpers import Client, Shop, new_shop
from tests.test_webhook_delivery import pay

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

BODY = (
    b'{"id":"evt_1","type":"session.completed","createdAt":"2026-01-01T00:00:00Z",'
    b'"applicationId":"a","data":{"id":"s","orderReference":"order-1001","status":"SUCCEEDED"}}'
)


def signed(secret: str, body: bytes = BODY, timestamp: float | None = None) -> dict[str, str]:
    moment = int(time.time() if timestamp is None else timestamp)
    return webhook_headers([secret], "evt_1", moment, body, key_fingerprint(secret))


def test_a_delivery_signed_with_the_secret_is_verified_and_answered_204() -> None:
    secret = new_signing_secret()
    judged = Receiver([secret]).judge("POST", "/webhooks", signed(secret), BODY)
    assert (judged.status, judged.body) == (204, b"")
    assert judged.line.startswith("verified session.completed evt_1 order-1001 SUCCEEDED  (POST /webhooks, ")


def test_a_delivery_signed_with_another_secret_is_rejected_and_answered_401() -> None:
    judged = Receiver([new_signing_secret()]).judge("POST", "/webhooks", signed(new_signing_secret()), BODY)
    assert judged.status == 401
    assert judged.line.startswith(
        "REJECTED: bad signature (not signed with the secret given): session.completed"
    )
    assert judged.body == b"rejected: bad signature (not signed with the secret given)\n"


def test_a_stale_delivery_is_rejected_as_stale() -> None:
    secret = new_signing_secret()
    judged = Receiver([secret]).judge("POST", "/", signed(secret, timestamp=time.time() - 600), BODY)
    assert (judged.status, judged.line.split(":")[0]) == (401, "REJECTED")
    assert "stale" in judged.line


def test_an_unsigned_delivery_is_rejected_as_unsigned() -> None:
    judged = Receiver([new_signing_secret()]).judge("POST", "/", {"content-type": "application/json"}, BODY)
    assert judged.status == 401 and judged.line.startswith("REJECTED: not signed")


def test_either_secret_of_a_rotation_verifies() -> None:
    old, new = new_signing_secret(), new_signing_secret()
    assert Receiver([old, new]).judge("POST", "/", signed(new), BODY).status == 204
    assert Receiver([old, new]).judge("POST", "/", signed(old), BODY).status == 204


def test_without_a_secret_every_delivery_is_accepted_unverified() -> None:
    judged = Receiver([]).judge("POST", "/webhooks", signed(new_signing_secret()), BODY)
    assert judged.status == 204
    assert judged.line.startswith("unverified (no --secret given) session.completed evt_1")


def test_bodies_are_printed_when_asked() -> None:
    secret = new_signing_secret()
    judged = Receiver([secret], show_bodies=True).judge("POST", "/", signed(secret), BODY)
    assert '\n      "type": "session.completed",' in judged.line


def test_a_get_is_answered_but_is_no_delivery() -> None:
    judged = Receiver([]).judge("GET", "/", {}, b"")
    assert (judged.status, judged.line) == (200, "GET /: not a delivery")


def receiver_environment() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.upper().startswith("PAYORCH_")}
    env.pop("XDG_RUNTIME_DIR", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def test_a_malformed_secret_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(f'[server]\nstate_dir = "{tmp_path / "state"}"\n')
    result = subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-m", "payorch", "dev-receiver", "--config", str(tmp_path / "config.toml")],
        env=receiver_environment() | {"PAYORCH_DEV_RECEIVER_SECRET": "not-a-secret"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "payorch: --secret: signing secret does not start with 'whsec_'\n"


class PrintedLines:
    """What a process prints on stdout, line by line, as it comes."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._pending = b""
        self.lines: list[str] = []

    async def until(self, wanted: Callable[[str], bool], timeout_s: float = 60) -> str:
        """The first line from now on that is `wanted` (waiting for it to be printed)."""
        with trio.fail_after(timeout_s):
            while True:
                while b"\n" in self._pending:
                    line, self._pending = self._pending.split(b"\n", 1)
                    self.lines.append(line.decode())
                    if wanted(self.lines[-1]):
                        return self.lines[-1]
                chunk = await self._stream.receive_some()
                if not chunk:
                    raise AssertionError(f"the receiver exited, having printed {self.lines}")
                self._pending += chunk


@asynccontextmanager
async def dev_receiver(tmp_path: Path, state_dir: Path, secret: str) -> AsyncIterator[PrintedLines]:
    """`payorch dev-receiver --port 0 --secret <secret>` with `state_dir` as server.state_dir, running
    until the block exits; yields its stdout once its banner is printed."""
    config = tmp_path / "receiver.toml"
    config.write_text(f'[server]\nstate_dir = "{state_dir}"\n')
    command = [sys.executable, "-m", "payorch", "dev-receiver", "--config", str(config), "--port", "0"]
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                [*command, "--secret", secret],
                stdout=subprocess.PIPE,
                env=receiver_environment(),
                check=False,
            )
        )
        assert process.stdout is not None
        printed = PrintedLines(process.stdout)
        await printed.until(lambda line: "Ctrl-C stops" in line)
        yield printed
        nursery.cancel_scope.cancel()  # SIGTERM: the receiver stops


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """payorch as `make run` runs it: loopback webhooks allowed (the address rule for private
    networks stays), the development CA made under its state directory."""
    webhooks = settings.webhooks.model_copy(update={"allow_loopback": True, "allow_private_networks": False})
    ensure_development_ca(settings.server.state_dir)  # as `load_settings` does for `payorch serve`
    return settings.model_copy(update={"webhooks": webhooks})


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def test_a_paid_session_reaches_the_dev_receiver_verified(
    client: Client, shop: Shop, settings: Settings, tmp_path: Path
) -> None:
    webhooks = f"/api/v1/applications/{shop.application_id}/webhooks"
    # Created first for its signing secret, which the receiver starts with; its URL follows.
    created = await client.post(
        webhooks, json={"url": "https://localhost:1/webhooks"}, headers=shop.merchant.headers
    )
    assert created.status_code == 201, await created.get_data(as_text=True)
    config = await created.get_json()
    async with dev_receiver(tmp_path, settings.server.state_dir, config["signingSecret"]) as printed:
        (banner,) = [line for line in printed.lines if "listening on" in line]
        port = int(banner.split("https://localhost:")[1].split(" ")[0])
        assert (
            "      webhooks.allow_loopback = true        # PAYORCH_WEBHOOKS__ALLOW_LOOPBACK=true"
            in printed.lines
        )
        assert any(f'server.state_dir = "{settings.server.state_dir}"' in line for line in printed.lines)
        moved = await client.patch(
            f"{webhooks}/{config['id']}",
            json={"url": f"https://localhost:{port}/webhooks"},
            headers=shop.merchant.headers,
        )
        assert moved.status_code == 200, await moved.get_data(as_text=True)
        tested = await (
            await client.post(f"{webhooks}/{config['id']}/test", headers=shop.merchant.headers)
        ).get_json()
        assert (tested["success"], tested["httpStatusCode"], tested["error"]) == (True, 204, None)
        await printed.until(lambda line: line.startswith("verified webhook.test evt_"))
        await pay(client, shop)
        line = await printed.until(lambda line: "session.completed" in line)
    assert line.startswith("verified session.completed evt_")
    assert "SUCCEEDED" in line
