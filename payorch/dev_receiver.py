"""payorch dev-receiver: an HTTPS webhook receiver on this machine, for local development.

It listens on 127.0.0.1 (port 8787 unless `--port`), on any path, over TLS with a certificate for
`localhost`, `127.0.0.1` and `::1` from the development CA under `server.state_dir`
(`development_ca`), which `payorch serve` trusts when `webhooks.allow_loopback` is on, as `make
run` has it. Each POST is checked as a merchant's server should check it, by the Standard Webhooks
scheme payorch signs with (`standardwebhooks`, the reference library), against the endpoint's
signing secret (`--secret`, or the environment's PAYORCH_DEV_RECEIVER_SECRET). Each delivery prints
one line on stdout and is answered:

    verified session.completed evt_... order-1001 SUCCEEDED  (POST /webhooks, 14:03:07)    -> 204
    REJECTED: bad signature (...): session.completed evt_...  (POST /webhooks, 14:03:09)     -> 401
    unverified (no --secret given) session.completed evt_...  (POST /webhooks, 14:03:11)    -> 204

A rejected delivery is answered 401, as a receiver that verifies answers a forgery, so payorch's
delivery log shows it failed and retries it. Without a secret every delivery is accepted,
unverified.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import trio
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from payorch.config import Settings
from payorch.development_ca import development_ca_certificate, loopback_server_certificate
from payorch.outbound.signing import MalformedSigningSecret, check_secret_form, key_fingerprint

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope

DEFAULT_PORT = 8787
HOST = "127.0.0.1"
SECRET_ENV_VAR = "PAYORCH_DEV_RECEIVER_SECRET"  # noqa: S105 - a variable's name, not a secret
MAX_BODY_BYTES = 1 << 20
SERVER_LOGGER = "payorch.dev_receiver.server"  # hypercorn's errors (its "Running on" is the banner's)
# Why the Standard Webhooks library refused a delivery, as the line says it.
_REJECTIONS = {
    "No matching signature found": "bad signature (not signed with the secret given)",
    "Missing required headers": "not signed (webhook-id, webhook-timestamp or webhook-signature missing)",
    "Message timestamp too old": "stale: webhook-timestamp is over 5 minutes old",
    "Message timestamp too new": "webhook-timestamp is over 5 minutes ahead of this machine's clock",
}

Print = Callable[[str], None]


@dataclass(frozen=True)
class Judgement:
    """What the receiver answers a request, and the line it prints about it."""

    status: int
    body: bytes
    line: str


class Receiver:
    """Checks each request against `secrets` (none: accepts all, unverified) and says so in one line;
    with `show_bodies`, the JSON body follows, indented."""

    def __init__(self, secrets: Sequence[str], show_bodies: bool = False) -> None:
        self.secrets = list(secrets)
        self.show_bodies = show_bodies

    def judge(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Judgement:
        """The answer to one request (`headers` with lower-case names)."""
        where = f"({method} {path}, {datetime.now().strftime('%H:%M:%S')})"
        if method != "POST":
            text = b"payorch dev-receiver: POST webhooks here\n"
            return Judgement(
                200 if method in ("GET", "HEAD") else 405, text, f"{method} {path}: not a delivery"
            )
        if len(body) > MAX_BODY_BYTES:
            return Judgement(413, b"too large\n", f"REJECTED: a body over {MAX_BODY_BYTES} bytes {where}")
        event = _event_of(body)
        if not self.secrets:
            return self._judged(204, b"", f"unverified (no --secret given) {event}  {where}", body)
        problem = self._signature_problem(headers, body)
        if problem is not None:
            return self._judged(
                401, f"rejected: {problem}\n".encode(), f"REJECTED: {problem}: {event}  {where}", body
            )
        return self._judged(204, b"", f"verified {event}  {where}", body)

    def _judged(self, status: int, answer: bytes, line: str, body: bytes) -> Judgement:
        if self.show_bodies:
            line += "\n" + _indented(body)
        return Judgement(status, answer, line)

    def _signature_problem(self, headers: dict[str, str], body: bytes) -> str | None:
        problem = "bad signature"
        for secret in self.secrets:
            try:
                Webhook(secret).verify(body, headers, json_parse=False)
            except WebhookVerificationError as refused:
                problem = _REJECTIONS.get(str(refused), str(refused))
            except ValueError:  # a malformed signature header, or a body that is not UTF-8
                problem = "malformed webhook-signature header or body"
            else:
                return None
        return problem


def _event_of(body: bytes) -> str:
    """`<type> <id>` and, when the event carries them, the order reference and status."""
    try:
        event = json.loads(body)
    except ValueError:
        return "(a body that is not JSON)"
    if not isinstance(event, dict):
        return "(JSON that is not an event)"
    data = event["data"] if isinstance(event.get("data"), dict) else {}
    parts = [event.get("type"), event.get("id"), data.get("orderReference"), data.get("status")]
    return " ".join(str(part) for part in parts if part)


def _indented(body: bytes) -> str:
    try:
        text = json.dumps(json.loads(body), indent=2)
    except ValueError:
        text = body.decode("utf-8", "replace")
    return "\n".join("    " + line for line in text.splitlines())


async def answer_lifespan(
    receive: Callable[[], Awaitable[Mapping[str, Any]]], send: Callable[[Any], Awaitable[None]]
) -> None:
    """An ASGI lifespan that has nothing to start or stop: says so to each message, until shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class ReceiverApp:
    """The receiver as an ASGI application: every request judged, its line handed to `show`."""

    def __init__(self, receiver: Receiver, show: Print) -> None:
        self._receiver = receiver
        self._show = show

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            if len(body) <= MAX_BODY_BYTES:
                body += message["body"]
            if not message.get("more_body", False):
                break
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
        }
        judged = self._receiver.judge(scope["method"], scope["path"], headers, bytes(body))
        self._show(judged.line)
        await send(
            {
                "type": "http.response.start",
                "status": judged.status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8")],
            }
        )
        await send({"type": "http.response.body", "body": judged.body, "more_body": False})


async def serve_dev_receiver(
    state_dir: Path,
    port: int,
    receiver: Receiver,
    show: Print,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `receiver` over HTTPS on 127.0.0.1:`port` (0: any free port) until cancelled; reports
    the port it listens on once it does. The certificate comes from `state_dir`
    (`development_ca.loopback_server_certificate`: the CA and the certificate are made if missing)."""
    # Imported here, not with the module: every command of the CLI imports this one.
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.trio import serve as hypercorn_serve

    certificate = loopback_server_certificate(state_dir)
    config = HypercornConfig()
    config.bind = [f"{HOST}:{port}"]
    config.certfile, config.keyfile = str(certificate.certificate), str(certificate.key)
    config.accesslog = None
    config.errorlog = logging.getLogger(SERVER_LOGGER)
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(hypercorn_serve, ReceiverApp(receiver, show), config))
        bound = urlsplit(binds[0]).port
        assert bound is not None
        task_status.started(bound)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `payorch dev-receiver`."""
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port on {HOST} (default {DEFAULT_PORT}; 0: any free one)",
    )
    parser.add_argument(
        "--secret",
        action="append",
        default=[],
        help=f"the endpoint's signing secret (whsec_...), to verify each delivery; may be given twice "
        f"(during a rotation). Default: ${SECRET_ENV_VAR}, else none (deliveries accepted unverified)",
    )
    parser.add_argument("--bodies", action="store_true", help="print each delivery's JSON body too")


def run(settings: Settings, arguments: argparse.Namespace) -> int:
    """`payorch dev-receiver`: serve until SIGINT or SIGTERM. 0 when stopped so, 2 for a malformed
    secret or port, 1 when it cannot listen."""
    secrets = list(arguments.secret) or [value for value in [os.environ.get(SECRET_ENV_VAR, "")] if value]
    for secret in secrets:
        try:
            check_secret_form(secret)
        except MalformedSigningSecret as malformed:
            print(f"payorch: --secret: {malformed}", file=sys.stderr)
            return 2
    if not 0 <= arguments.port <= 65535:
        print(f"payorch: --port {arguments.port} is not a port number", file=sys.stderr)
        return 2
    show = partial(print, flush=True)
    receiver = Receiver(secrets, show_bodies=arguments.bodies)
    logging.getLogger(SERVER_LOGGER).setLevel(logging.WARNING)
    try:
        trio.run(_serve_until_signalled, settings.server.state_dir, arguments.port, receiver, show)
    except OSError as error:
        print(
            f"payorch: dev-receiver cannot listen on {HOST}:{arguments.port}: {error.strerror or error} "
            "(choose another port with --port)",
            file=sys.stderr,
        )
        return 1
    return 0


async def _serve_until_signalled(state_dir: Path, port: int, receiver: Receiver, show: Print) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(serve_dev_receiver, state_dir, port, receiver, show)
            for line in banner(state_dir, bound, receiver.secrets):
                show(line)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def banner(state_dir: Path, port: int, secrets: Sequence[str]) -> list[str]:
    """What the receiver prints when it starts: where it listens, what payorch needs to trust it,
    and whether it verifies."""
    ca = development_ca_certificate(state_dir)
    if secrets:
        verifying = "verifying signatures with the secret " + " and ".join(
            key_fingerprint(s) for s in secrets
        )
    else:
        verifying = (
            f"NOT verifying signatures: give the endpoint's signingSecret with --secret whsec_... "
            f"(or {SECRET_ENV_VAR}) to verify them"
        )
    return [
        f"payorch dev-receiver listening on https://localhost:{port} (also https://{HOST}:{port}), any path",
        f"  register it as a webhook URL, e.g. https://localhost:{port}/webhooks",
        f"  {verifying}",
        "  payorch serve trusts it with this setting (make run sets it):",
        "      webhooks.allow_loopback = true        # PAYORCH_WEBHOOKS__ALLOW_LOOPBACK=true",
        f'  and server.state_dir = "{state_dir}" (its development CA: {ca});',
        f'  a payorch with another state_dir needs webhooks.ca_bundle = "{ca}" too',
        "  one line per delivery follows; Ctrl-C stops",
    ]
