"""A real HTTPS webhook receiver on loopback, for tests of outgoing webhooks.

A QuartTrio app served by hypercorn's trio worker with a certificate from a throwaway trustme CA (for
`localhost` and `127.0.0.1`), one per test process. The CA is written to `ca_path`, for payorch's
`webhooks.ca_bundle`. The receiver records every POST, checks its Standard Webhooks signature against
the secrets the test accepted, and answers from a script the test sets (default 200).

    async def test_...(webhook_receiver: WebhookReceiver) -> None:
        webhook_receiver.accept_secret(secret)
        webhook_receiver.script([500, 500, 200])
        ...  # make payorch deliver to webhook_receiver.url
        first, second, third = await webhook_receiver.wait_for(3, timeout_s=10)

`open_webhook_receiver(directory, self_signed=True)` serves a plain self-signed certificate instead,
one no CA vouches for (payorch refuses it: "TLS: certificate verify failed: self-signed certificate").

A script may be for one path only (`script([...], path="/hooks/slow")`): requests to that path take
their answers from it, all others from the shared script. Answers can misbehave on purpose: hang
until the test releases them (`hold`), stream a body of many megabytes (`streamed_body_bytes`),
carry any status, header value or body bytes.
"""

from __future__ import annotations

import datetime
import ipaddress
import tempfile
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from quart import request
from quart_trio import QuartTrio
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from payorch.jsonexact import loads_exact
from tests.loopback import serving_on_loopback

HOOK_PATH = "/hooks"


@dataclass(frozen=True)
class ScriptedResponse:
    """One answer of the receiver, given after waiting `delay_s` (for timeout tests) and, when `hold`
    is given, not before the test sets it. After `body` come `streamed_body_bytes` more bytes, streamed
    in chunks (for tests of huge answers); how many were sent is `WebhookReceiver.streamed_bytes`."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay_s: float = 0.0
    hold: trio.Event | None = None
    streamed_body_bytes: int = 0


DEFAULT_RESPONSE = ScriptedResponse(200, {"content-type": "application/json"}, b'{"received":true}')


@dataclass(frozen=True)
class ReceivedRequest:
    """A request as it arrived, with the outcome of its signature check."""

    method: str
    path: str
    headers: dict[str, str]  # names lowercased
    body: bytes  # raw, exactly as received
    received_at: float  # Unix seconds (wall clock), comparable with `webhook-timestamp`
    received_at_trio: float  # trio.current_time(): for intervals between attempts, MockClock-friendly
    verified_with: str | None  # the accepted secret that verified the signature, None when none did
    client: tuple[str, int] | None = None  # the sender's address and port: which connection it came on

    def json(self) -> Any:
        """The body parsed, numbers with a fraction as exact Decimal."""
        return loads_exact(self.body)

    @property
    def verified(self) -> bool:
        return self.verified_with is not None


class WebhookReceiver:
    """State shared by the test and the receiving app: accepted secrets, the script, what arrived."""

    def __init__(self, ca_path: Path) -> None:
        self.ca_path = ca_path
        self.url = ""  # set once the server is bound
        self.requests: list[ReceivedRequest] = []
        self._secrets: list[str] = []
        self._script: deque[ScriptedResponse] = deque()
        self._path_scripts: dict[str, deque[ScriptedResponse]] = {}
        self._arrived = trio.Event()
        self.streamed_bytes = 0  # bytes of `streamed_body_bytes` answers actually handed to the server

    def accept_secret(self, secret: str) -> None:
        """Count a signature by `secret` as valid, besides the secrets accepted before."""
        self._secrets.append(secret)

    def clear_script(self) -> None:
        """Forget the responses still scripted: every request is answered 200 from now on."""
        self._script.clear()

    def script(
        self,
        responses: Iterable[ScriptedResponse | tuple[int, Mapping[str, str], bytes] | int],
        path: str | None = None,
    ) -> None:
        """Answer the next requests with `responses`, in order (after those still scripted); then 200.

        Each is a `ScriptedResponse`, a `(status, headers, body)` tuple or a bare status. With `path`
        (e.g. "/hooks/slow"), only requests to that path take these answers, and no others.
        """
        queue = self._script if path is None else self._path_scripts.setdefault(path, deque())
        for response in responses:
            if isinstance(response, int):
                response = ScriptedResponse(response)
            elif isinstance(response, tuple):
                response = ScriptedResponse(*response)
            queue.append(response)

    def requests_to(self, path: str) -> list[ReceivedRequest]:
        """The requests that arrived for `path` (e.g. "/hooks/slow"), in order."""
        return [request for request in self.requests if request.path == path]

    async def wait_for(self, count: int, timeout_s: float, path: str | None = None) -> list[ReceivedRequest]:
        """The first `count` requests (to `path`, when given), once that many arrived;
        `trio.TooSlowError` after `timeout_s`."""
        with trio.fail_after(timeout_s):
            while len(arrived := self.requests if path is None else self.requests_to(path)) < count:
                await self._arrived.wait()
        return arrived[:count]

    def _verify(self, body: bytes, headers: dict[str, str]) -> str | None:
        for secret in self._secrets:
            try:
                Webhook(secret).verify(body, headers, json_parse=False)
            except (WebhookVerificationError, ValueError):  # ValueError: malformed header or body
                continue
            return secret
        return None

    def _record(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        client: tuple[str, int] | None = None,
    ) -> ScriptedResponse:
        self.requests.append(
            ReceivedRequest(
                method=method,
                path=path,
                headers=headers,
                body=body,
                received_at=time.time(),
                received_at_trio=trio.current_time(),
                verified_with=self._verify(body, headers),
                client=client,
            )
        )
        self._arrived.set()
        self._arrived = trio.Event()
        queue = self._path_scripts.get(path, self._script)
        return queue.popleft() if queue else DEFAULT_RESPONSE

    async def stream_body(self, response: ScriptedResponse) -> AsyncGenerator[bytes, None]:
        """`response.body`, then `response.streamed_body_bytes` more bytes in 64 KiB chunks."""
        yield response.body
        chunk = b"x" * 65536
        left = response.streamed_body_bytes
        while left > 0:
            piece = chunk[:left]
            yield piece
            self.streamed_bytes += len(piece)
            left -= len(piece)


def _receiving_app(receiver: WebhookReceiver) -> QuartTrio:
    app = QuartTrio("webhook_receiver")

    @app.route("/", defaults={"path": ""}, methods=["POST"])
    @app.route("/<path:path>", methods=["POST"])
    async def receive(path: str) -> tuple[bytes | AsyncGenerator[bytes, None], int, dict[str, str]]:
        body = await request.get_data(as_text=False)
        headers = {name.lower(): value for name, value in request.headers.items()}
        client = request.scope.get("client")
        response = receiver._record(
            request.method, request.path, headers, body, None if client is None else (client[0], client[1])
        )
        if response.delay_s:
            await trio.sleep(response.delay_s)  # the behaviour scripted: a slow receiver
        if response.hold is not None:
            await response.hold.wait()  # a receiver that hangs until the test lets it answer
        if response.streamed_body_bytes:
            return receiver.stream_body(response), response.status, dict(response.headers)
        return response.body, response.status, dict(response.headers)

    return app


def _write_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A fresh CA and a server certificate for localhost: (CA PEM, certificate chain PEM, key PEM)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    ca_path, cert_path, key_path = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca.cert_pem.write_to_path(str(ca_path))
    for index, blob in enumerate(server.cert_chain_pems):
        blob.write_to_path(str(cert_path), append=index > 0)
    server.private_key_pem.write_to_path(str(key_path))
    return ca_path, cert_path, key_path


def _write_self_signed_certificate(directory: Path) -> tuple[Path, Path, Path]:
    """A certificate for localhost signed by its own key: (that certificate, itself again, its key)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .serial_number(x509.random_serial_number())
        .public_key(key.public_key())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=90))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "self-signed.pem", directory / "self-signed.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, cert_path, key_path


# The certificates of this test process's receivers, written once into a folder that lasts as long
# as the process: a CA made for each receiver cost its test about 20 ms, and a new CA file each time
# kept payorch from reusing the TLS settings it builds once per set of CA files (about 50 ms more).
_FOLDER = tempfile.TemporaryDirectory(prefix="payorch-test-receiver-")
_written: dict[bool, tuple[Path, Path, Path]] = {}


def _certificates(*, self_signed: bool) -> tuple[Path, Path, Path]:
    if self_signed not in _written:
        folder = Path(_FOLDER.name)
        write = _write_self_signed_certificate if self_signed else _write_certificates
        _written[self_signed] = write(folder / ("self-signed" if self_signed else "ca"))
    return _written[self_signed]


@asynccontextmanager
async def open_webhook_receiver(
    *, self_signed: bool = False, port: int = 0
) -> AsyncIterator[WebhookReceiver]:
    """A receiver listening on https://localhost:<port>/hooks (0: a free port) until the block
    exits, when it closes its connections (a receiver restarted: open another on the same port).

    The certificate is from the test process's throwaway CA (`ca_path`), or, `self_signed`, one
    signed by its own key (`ca_path` is then that certificate). Leaving the block cancels the
    server, and with it any request still being answered.
    """
    ca_path, cert_path, key_path = _certificates(self_signed=self_signed)
    receiver = WebhookReceiver(ca_path)
    app = _receiving_app(receiver)
    async with serving_on_loopback(
        app, "tests.webhook_receiver", certfile=cert_path, keyfile=key_path, port=port
    ) as bound:
        receiver.url = f"https://localhost:{bound}{HOOK_PATH}"
        yield receiver


@pytest.fixture
async def webhook_receiver() -> AsyncIterator[WebhookReceiver]:
    """A running HTTPS receiver for this test; its CA is at `webhook_receiver.ca_path`."""
    async with open_webhook_receiver() as receiver:
        yield receiver


def assert_signed_during_overlap(
    request: ReceivedRequest, old_secret: str, new_secret: str, fingerprint: str
) -> None:
    """`request` carries two signatures, each verified by one of the secrets as a merchant would,
    and names the new key (`fingerprint`): a delivery during a rotation's overlap."""
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for secret in (old_secret, new_secret):
        Webhook(secret).verify(request.body, request.headers)
    assert request.headers["webhook-key-fingerprint"] == fingerprint
