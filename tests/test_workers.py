"""`payorch serve --workers N` as an operator runs it: one parent, N worker processes answering on one
address, each a node of its own. A worker killed under load is started again while the other keeps
answering, and every create retried with its Idempotency-Key has one session; SIGTERM drains every
worker and exits 0 with every accepted request answered; SIGHUP reaches every worker; workers whose
parent is killed drain and exit by themselves; the embedded PostgreSQL is started once, by the
parent, and stopped after the workers; a worker that cannot start stops the start; pools that do
not fit in PostgreSQL's connections are refused."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from payorch.config import Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage.database import Connection, Database
from payorch.storage.nodes import LIVE_NODES
from payorch.workers import worker_count
from tests import webhook_receiver as receiving
from tests.helpers import PASSWORD, SANDBOX_KEY, eventually, session_body, signup_body
from tests.processes import config_text, keys_and_sessions, logged_records, serve_environment, serving
from tests.webhook_receiver import ScriptedResponse, WebhookReceiver

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

webhook_receiver = receiving.webhook_receiver

TWO_WORKERS = ["--workers", "2"]
# Each worker imports the whole of payorch and starts a node: on a busy machine that takes a while.
START_S = 120
STOP_S = 60
# Bucket sizes no test here reaches: the load is the point, not the limits.
UNLIMITED = {
    "PAYORCH_LIMITS__REQUESTS_PER_SECOND": "100000",
    "PAYORCH_LIMITS__BURST": "100000",
    "PAYORCH_LIMITS__MERCHANT_REQUESTS_PER_SECOND": "100000",
    "PAYORCH_LIMITS__MERCHANT_BURST": "100000",
}
# A new connection for each request, so that the kernel hands each to either worker.
NEW_CONNECTION_EACH = httpx.Limits(max_keepalive_connections=0)
CLIENTS = 3
BURST = 64  # connections opened at once
ANSWER_S = 10  # far more than a request to a serving worker takes
IN_FLIGHT = 2  # webhook test sends held at the receiver when SIGTERM comes (2: a merchant's limit per node)


def _matching(records: list[dict[str, Any]], message: str, **fields: Any) -> list[int]:
    """The indexes of the records saying `message` with every one of `fields`."""
    return [
        index
        for index, record in enumerate(records)
        if record.get("msg") == message and all(record.get(key) == value for key, value in fields.items())
    ]


def _logged(stderr_path: Path, message: str, **fields: Any) -> list[dict[str, Any]]:
    records = logged_records(stderr_path)
    return [records[index] for index in _matching(records, message, **fields)]


async def _every_worker_serves(stderr_path: Path) -> dict[str, Any]:
    async def serves() -> list[dict[str, Any]] | None:
        return _logged(stderr_path, "every worker serves") or None

    (record,) = await eventually(serves, START_S)
    return record


async def _stopped(process: trio.Process) -> int:
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(STOP_S):
        return await process.wait()


async def _post(http: httpx.AsyncClient, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    return await http.post(
        path, content=dumps_exact(body), headers={**headers, "Content-Type": "application/json"}
    )


async def _created(http: httpx.AsyncClient, path: str, body: Any, headers: dict[str, str]) -> Any:
    response = await _post(http, path, body, headers)
    assert response.status_code in (200, 201), response.text
    return loads_exact(response.content)


async def _shop(
    http: httpx.AsyncClient, db: Database, settings: Settings, email: str
) -> tuple[str, dict[str, str], dict[str, str]]:
    """A merchant's application linked to the sandbox: its id, the merchant's JWT headers and the
    application's API-key headers."""
    invite = await issue_invite(db, settings, email)
    await _created(http, f"/api/v1/merchants/signup?token={invite.token}", signup_body(email, "WORK-1"), {})
    tokens = await _created(http, "/api/v1/auth/login", {"email": email, "password": PASSWORD}, {})
    jwt = {"Authorization": f"Bearer {tokens['accessToken']}"}
    application = await _created(http, "/api/v1/applications", {"name": "shop"}, jwt)
    base = f"/api/v1/applications/{application['id']}"
    link = {"name": "sandbox", "paymentMethods": ["card"], "credentials": {"apiKey": SANDBOX_KEY}}
    await _created(http, f"{base}/providers", link, jwt)
    key = await _created(http, f"{base}/api-keys", {}, jwt)
    return application["id"], jwt, {"X-API-Key": key["key"]}


@asynccontextmanager
async def _two_workers_serving(
    database_dsn: str, tmp_path: Path
) -> AsyncIterator[tuple[trio.Process, str, Path]]:
    """`payorch serve --workers 2`, once every worker serves: its parent, base URL and stderr's file."""
    async with serving(database_dsn, tmp_path, arguments=TWO_WORKERS, deadline_s=START_S) as served:
        await _every_worker_serves(served[2])
        yield served


async def _live_nodes(conn: Connection) -> int:
    return int(await conn.fetchval(f"SELECT cardinality({LIVE_NODES})"))


async def test_workers_drain_and_exit_when_their_parent_is_killed(database_dsn: str, tmp_path: Path) -> None:
    async with serving(database_dsn, tmp_path, arguments=TWO_WORKERS, deadline_s=START_S) as (
        parent,
        _,
        stderr_path,
    ):
        await _every_worker_serves(stderr_path)
        pids = [record["pid"] for record in _logged(stderr_path, "worker serving")]
        parent.send_signal(signal.SIGKILL)
        with trio.fail_after(STOP_S):
            await parent.wait()

        async def both_stopped() -> bool:
            gone = {
                record["worker"]
                for record in _logged(stderr_path, "the parent process is gone: shutting down")
            }
            stopped = {record.get("worker") for record in _logged(stderr_path, "stopped")}
            return gone == stopped == {1, 2}

        await eventually(both_stopped, STOP_S)

        def exited(pid: int) -> bool:
            try:  # the process's state is the field after its name, which ends with ")"
                return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] == "Z"
            except FileNotFoundError:
                return True  # gone; a zombie ("Z") exited but is not reaped yet

        async def both_exited() -> bool:
            return all(exited(pid) for pid in pids)

        await eventually(both_exited, STOP_S)


def test_auto_is_a_worker_per_core_this_process_may_run_on() -> None:
    assert worker_count("auto") == min(len(os.sched_getaffinity(0)), 64)
    assert worker_count(3) == 3


async def test_one_worker_is_one_process_with_no_parent(database_dsn: str, tmp_path: Path) -> None:
    async with serving(database_dsn, tmp_path, arguments=["--workers", "1"], deadline_s=START_S) as (
        process,
        _,
        stderr_path,
    ):
        (serving_line,) = _logged(stderr_path, "serving")
        assert "worker" not in serving_line
        assert not [record for record in logged_records(stderr_path) if record["logger"] == "payorch.workers"]
        assert await _stopped(process) == 0


async def test_two_workers_answer_on_one_address_each_a_node_of_its_own(
    database_dsn: str, db: Database, tmp_path: Path
) -> None:
    async with serving(database_dsn, tmp_path, arguments=TWO_WORKERS, deadline_s=START_S) as (
        parent,
        base_url,
        stderr_path,
    ):
        serves = await _every_worker_serves(stderr_path)
        assert serves["addresses"] == [base_url]
        serving_lines = _logged(stderr_path, "serving")
        assert sorted(record["worker"] for record in serving_lines) == [1, 2]
        assert all(record["addresses"] == [base_url] for record in serving_lines)
        assert await db.autocommit(_live_nodes) == 2
        async with httpx.AsyncClient(base_url=base_url) as http:
            assert (await http.get("/readyz")).status_code == 200
        assert await _stopped(parent) == 0


async def test_a_burst_of_connections_is_shared_out_among_the_workers(
    database_dsn: str, tmp_path: Path
) -> None:
    async with _two_workers_serving(database_dsn, tmp_path) as (parent, base_url, stderr_path):
        before = len(_logged(stderr_path, "request", path="/healthz"))
        host, port = urlsplit(base_url).hostname, urlsplit(base_url).port
        assert host is not None and port is not None
        # A client opening its keep-alive connections at once (a proxy's pool, a load generator):
        # every one connected before any asks anything.
        streams: list[trio.SocketStream] = []

        async def connect() -> None:
            streams.append(await trio.open_tcp_stream(host, port))

        async with trio.open_nursery() as connecting:
            for _ in range(BURST):
                connecting.start_soon(connect)
        answers: list[bytes] = []

        async def ask(stream: trio.SocketStream) -> None:
            async with stream:
                await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: payorch\r\nConnection: close\r\n\r\n")
                answer = b""
                while chunk := await stream.receive_some():
                    answer += chunk
                answers.append(answer)

        with trio.fail_after(STOP_S):
            async with trio.open_nursery() as nursery:
                for stream in streams:
                    nursery.start_soon(ask, stream)
        assert all(answer.startswith(b"HTTP/1.1 200") for answer in answers)

        async def every_request_logged() -> list[dict[str, Any]] | None:
            found = _logged(stderr_path, "request", path="/healthz")[before:]
            return found if len(found) == BURST else None

        logged = await eventually(every_request_logged, STOP_S)
        by_worker = Counter(record["worker"] for record in logged)
        # The kernel's hash of each connection's addresses: 32 each on average; under 16 for one
        # worker about once in 30,000 bursts (one socket for both gave them 30 and 2).
        assert sorted(by_worker) == [1, 2] and min(by_worker.values()) >= BURST // 4, by_worker
        assert await _stopped(parent) == 0


def _listening_on(port: int) -> int:
    """How many sockets listen on 127.0.0.1:`port` (the kernel's table, whichever process holds them)."""
    wanted = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if row[1] == wanted and row[3] == "0A")  # 0A: LISTEN


async def test_each_worker_listens_on_a_socket_of_its_own_and_none_waits_while_one_starts_again(
    database_dsn: str, tmp_path: Path
) -> None:
    async with _two_workers_serving(database_dsn, tmp_path) as (parent, base_url, stderr_path):
        port = urlsplit(base_url).port
        assert port is not None
        assert _listening_on(port) == 2
        (first,) = _logged(stderr_path, "worker serving", worker=1)
        os.kill(first["pid"], signal.SIGKILL)

        async def exited() -> list[dict[str, Any]] | None:
            return _logged(stderr_path, "worker exited; starting it again", worker=1) or None

        await eventually(exited, START_S)
        # Its socket was closed with it, and the next one listens once the new worker serves:
        # meanwhile every new connection goes to the other worker, none to a socket nobody accepts on.
        async with httpx.AsyncClient(base_url=base_url, limits=NEW_CONNECTION_EACH, timeout=ANSWER_S) as http:
            while not _logged(stderr_path, "worker serving", worker=1)[1:]:
                assert (await http.get("/healthz")).status_code == 200
        assert _listening_on(port) == 2
        assert await _stopped(parent) == 0


async def test_a_worker_killed_under_load_is_started_again_and_each_retried_key_has_one_session(
    database_dsn: str, db: Database, settings: Settings, tmp_path: Path
) -> None:
    environment = {**UNLIMITED, "PAYORCH_SERVER__WORKERS": "2"}  # server.workers, not --workers
    async with serving(database_dsn, tmp_path, environment, deadline_s=START_S) as (
        parent,
        base_url,
        stderr_path,
    ):
        await _every_worker_serves(stderr_path)
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
            application_id, _, api_key = await _shop(http, db, settings, "owner@kill.example")
        sessions: dict[str, str] = {}
        enough = trio.Event()

        async def create(http: httpx.AsyncClient, key: str) -> str:
            async def answered() -> str | None:
                try:
                    response = await _post(
                        http, "/api/v1/sessions", session_body(), {**api_key, "Idempotency-Key": key}
                    )
                except httpx.TransportError:
                    return None  # its worker died with the connection: retried with the same key
                if response.status_code >= 500 or response.status_code == 409:
                    return None  # retried with the same key, as a client would
                assert response.status_code in (200, 201), f"{key}: {response.status_code} {response.text}"
                session_id: str = loads_exact(response.content)["sessionId"]
                return session_id

            return await eventually(answered, timeout_s=60)

        async def trickle(client: int) -> None:
            async with httpx.AsyncClient(base_url=base_url, timeout=30, limits=NEW_CONNECTION_EACH) as http:
                number = 0
                while not enough.is_set():
                    key = f"client-{client}-{number}"
                    sessions[key] = await create(http, key)
                    number += 1

        def logged_after(index: int, message: str, **fields: Any) -> list[int] | None:
            found = _matching(logged_records(stderr_path), message, **fields)
            return [at for at in found if at > index] or None

        def create_answered(worker: int) -> dict[str, Any]:
            return {"worker": worker, "method": "POST", "path": "/api/v1/sessions", "status": 201}

        async def kill_worker_1_and_see_it_answer_again() -> None:
            (first,) = _logged(stderr_path, "worker serving", worker=1)

            async def answered_by_worker_1() -> list[int] | None:
                return logged_after(-1, "request", **create_answered(1))

            await eventually(answered_by_worker_1, START_S)  # it has connections of the trickle's
            os.kill(first["pid"], signal.SIGKILL)

            async def exited() -> list[int] | None:
                return logged_after(-1, "worker exited; starting it again", worker=1, signal="SIGKILL")

            (exit_index,) = await eventually(exited, START_S)

            async def back() -> list[int] | None:
                return logged_after(exit_index, "worker serving", worker=1)

            (back_index,) = await eventually(back, START_S)
            assert logged_records(stderr_path)[back_index]["pid"] != first["pid"]

            async def other_kept_answering() -> list[int] | None:
                return logged_after(exit_index, "request", **create_answered(2))

            async def restarted_answers() -> list[int] | None:
                return logged_after(back_index, "request", **create_answered(1))

            await eventually(other_kept_answering, START_S)
            await eventually(restarted_answers, START_S)
            enough.set()

        with trio.fail_after(4 * START_S):
            async with trio.open_nursery() as nursery:
                for client in range(CLIENTS):
                    nursery.start_soon(trickle, client)
                nursery.start_soon(kill_worker_1_and_see_it_answer_again)
        assert _logged(stderr_path, "worker exited; starting it again", worker=2) == []
        keys, stored = await db.autocommit(keys_and_sessions, uuid.UUID(application_id))
        assert keys == {key: uuid.UUID(session_id) for key, session_id in sessions.items()}
        assert sorted(stored) == sorted(keys.values())  # one session per key, none besides
        assert await _stopped(parent) == 0


async def test_sigterm_drains_every_worker_and_exits_0_with_every_accepted_request_answered(
    database_dsn: str, db: Database, settings: Settings, tmp_path: Path, webhook_receiver: WebhookReceiver
) -> None:
    environment = {
        "PAYORCH_WEBHOOKS__CA_BUNDLE": str(webhook_receiver.ca_path),
        "PAYORCH_WEBHOOKS__ALLOW_PRIVATE_NETWORKS": "true",
        "PAYORCH_WEBHOOKS__TIMEOUT_S": "120",
        "PAYORCH_SERVER__GRACEFUL_TIMEOUT_S": "120",  # the drain ends with the requests, not with this
    }
    async with serving(database_dsn, tmp_path, environment, arguments=TWO_WORKERS, deadline_s=START_S) as (
        parent,
        base_url,
        stderr_path,
    ):
        await _every_worker_serves(stderr_path)
        async with httpx.AsyncClient(base_url=base_url, timeout=STOP_S, limits=NEW_CONNECTION_EACH) as http:
            application_id, jwt, _ = await _shop(http, db, settings, "owner@drain.example")
            webhooks = f"/api/v1/applications/{application_id}/webhooks"
            webhook = await _created(http, webhooks, {"url": webhook_receiver.url}, jwt)
            holds = [trio.Event() for _ in range(IN_FLIGHT)]
            webhook_receiver.script([ScriptedResponse(200, hold=hold) for hold in holds])
            answers: list[tuple[int, Any]] = []

            async def test_send() -> None:
                response = await http.post(f"{webhooks}/{webhook['id']}/test", headers=jwt)
                answers.append((response.status_code, response.json().get("success")))

            async def every_worker_shutting_down() -> bool:
                return {record["worker"] for record in _logged(stderr_path, "shutting down")} == {1, 2}

            async with trio.open_nursery() as nursery:
                for _ in range(IN_FLIGHT):
                    nursery.start_soon(test_send)
                await webhook_receiver.wait_for(IN_FLIGHT, timeout_s=START_S)  # in flight now
                parent.send_signal(signal.SIGTERM)
                await eventually(every_worker_shutting_down, STOP_S)
                for hold in holds:
                    hold.set()
        assert answers == [(200, True)] * IN_FLIGHT
        with trio.fail_after(STOP_S):
            assert await parent.wait() == 0
    assert _logged(stderr_path, "shutting down: SIGTERM passed to every worker")
    drained = [record["worker"] for record in _logged(stderr_path, "stopped") if "worker" in record]
    assert sorted(drained) == [1, 2]


async def test_sighup_reaches_every_worker(database_dsn: str, tmp_path: Path) -> None:
    environment = {"PAYORCH_SERVER__WORKERS": "2"}
    async with serving(database_dsn, tmp_path, environment, deadline_s=START_S) as (parent, _, stderr_path):
        await _every_worker_serves(stderr_path)
        (tmp_path / "config.toml").write_text(config_text("[limits]\nburst = 7\n"))
        parent.send_signal(signal.SIGHUP)

        async def reloaded_by_both() -> list[dict[str, Any]] | None:
            found = _logged(stderr_path, "configuration reloaded")
            return found if {record["worker"] for record in found} == {1, 2} else None

        for record in await eventually(reloaded_by_both, STOP_S):
            assert (record["generation"], record["changed"]) == (2, ["limits.burst"])
        assert await _stopped(parent) == 0


@pytest.fixture
def embedded_data_dir() -> Iterator[Path]:
    """A data directory for an embedded PostgreSQL, outside pytest's temporary directories (which a
    concurrent pytest run may make private to root while the server, as another user, starts); a
    server a failed test left running there is stopped (immediate mode), and the directory removed."""
    parent = Path(tempfile.mkdtemp(prefix="payorch-test-workers-"))
    data_dir = parent / "pgdata"
    yield data_dir
    with_pid = data_dir / "postmaster.pid"
    if with_pid.exists():
        with suppress(ProcessLookupError, ValueError):
            os.kill(int(with_pid.read_text().split()[0]), signal.SIGQUIT)
    shutil.rmtree(parent, ignore_errors=True)


async def test_workers_share_the_embedded_postgresql_the_parent_starts_and_stops(
    tmp_path: Path, embedded_data_dir: Path
) -> None:
    environment = {"PAYORCH_DATABASE__DATA_DIR": str(embedded_data_dir)}
    # No database URL: the embedded server.
    async with serving("", tmp_path, environment, arguments=TWO_WORKERS, deadline_s=START_S) as (
        parent,
        _,
        stderr_path,
    ):
        await _every_worker_serves(stderr_path)
        assert len(_logged(stderr_path, "starting embedded PostgreSQL")) == 1
        identities = _logged(stderr_path, "holding the node identity")
        assert sorted(record["worker"] for record in identities) == [1, 2]
        assert len({record["node"] for record in identities}) == 2  # one sequence: one server
        assert await _stopped(parent) == 0
    assert not (embedded_data_dir / "postmaster.pid").exists()  # stopped once the workers were gone


async def _payorch_serve(environment: dict[str, str], *arguments: str) -> tuple[int, list[dict[str, Any]]]:
    """`payorch serve` run to its end: its exit status and the lines it logged."""
    with trio.fail_after(START_S + STOP_S):
        done = await trio.run_process(
            [sys.executable, "-m", "payorch", "serve", *arguments],
            env=environment,
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    lines = [json.loads(line) for line in done.stderr.decode().splitlines() if line.startswith("{")]
    return done.returncode, lines


async def test_workers_with_a_bad_configuration_are_refused_with_exit_2_before_any_starts(
    database_dsn: str, tmp_path: Path
) -> None:
    # A CA bundle that is not there: the parent checks the configuration as a lone process does,
    # and starts no worker.
    environment = serve_environment(
        database_dsn, tmp_path, 0, {"PAYORCH_WEBHOOKS__CA_BUNDLE": str(tmp_path / "missing.pem")}
    )
    status, lines = await _payorch_serve(environment, *TWO_WORKERS)
    assert status == 2
    assert not [line for line in lines if "worker" in line]


async def test_workers_whose_pools_exceed_max_connections_are_refused_with_exit_2(
    database_dsn: str, tmp_path: Path
) -> None:
    environment = serve_environment(database_dsn, tmp_path, 0, {"PAYORCH_DATABASE__POOL_MAX": "5000"})
    status, lines = await _payorch_serve(environment, *TWO_WORKERS)
    assert status == 2
    (refusal,) = [line for line in lines if line["level"] == "error"]
    assert refusal["key"] == "server.workers"
    assert refusal["connectionsNeeded"] == 2 * (5000 + 1)
    assert not [line for line in lines if line["msg"] == "worker started"]
