"""deploy/nginx.conf in front of `payorch serve`, behaving as docs/operations.md ("The proxy in front",
"Going to production") says: Debian's nginx runs the file as it is but for its addresses, its
certificate (trustme's), its paths and `client_body_timeout` (1 s for the test instead of 10);
payorch runs with `trusted_proxy_hops = 1`. Checked: TLS with HTTP/2 offered, HTTP redirected to
HTTPS, each client's own login budget (its address, not the proxy's, and not one it writes itself
in X-Forwarded-For), a body over 1 MiB refused by nginx, and a slow body timed out by nginx.

`.ci/run` installs nginx with the browser; where it is not installed, the test is skipped and says so.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
import trustme

from tests.helpers import eventually
from tests.processes import free_port, serving

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "nginx.conf"
pytestmark = pytest.mark.skipif(
    not Path(NGINX).exists(), reason="nginx is not installed (.ci/run installs Debian's nginx)"
)


def rendered(https_port: int, http_port: int, upstream_port: int, cert: Path, key: Path) -> str:
    """deploy/nginx.conf with the test's addresses, certificate and body timeout: each replaced line
    must be found, so the test follows the file."""
    text = CONFIG.read_text()
    for old, new in (
        ("server 127.0.0.1:8080 max_conns=64;", f"server 127.0.0.1:{upstream_port} max_conns=64;"),
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;"),
        ("    listen [::]:443 ssl http2;\n", ""),
        ("listen 80;", f"listen 127.0.0.1:{http_port};"),
        ("    listen [::]:80;\n", ""),
        ("server_name pay.example.com;", "server_name localhost;"),
        ("/etc/ssl/payorch/fullchain.pem", str(cert)),
        ("/etc/ssl/payorch/privkey.pem", str(key)),
        ("client_body_timeout 10s;", "client_body_timeout 1s;"),
    ):
        assert old in text, f"deploy/nginx.conf no longer holds {old!r}"
        text = text.replace(old, new)
    return text


def main_config(directory: Path, included: Path) -> str:
    """nginx's own configuration, around deploy/nginx.conf as conf.d would include it."""
    temp = " ".join(
        f"{name}_temp_path {directory / name};"
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;" if os.geteuid() == 0 else ""  # workers write the temporary files here
    return (
        f"{user} daemon off; pid {directory / 'nginx.pid'}; error_log {directory / 'error.log'} warn;\n"
        f"events {{}}\nhttp {{ access_log off; {temp} include {included}; }}\n"
    )


@asynccontextmanager
async def nginx_in_front(
    directory: Path, upstream_port: int, ca: trustme.CA
) -> AsyncIterator[tuple[int, int]]:
    """nginx running deploy/nginx.conf before payorch's `upstream_port`: its HTTPS and HTTP ports."""
    await trio.Path(directory).mkdir()
    server = ca.issue_cert("localhost", "127.0.0.1")
    cert, key = directory / "cert.pem", directory / "key.pem"
    server.private_key_and_cert_chain_pem.write_to_path(str(cert))
    server.private_key_pem.write_to_path(str(key))
    https_port, http_port = free_port(), free_port()
    (directory / "payorch.conf").write_text(rendered(https_port, http_port, upstream_port, cert, key))
    (directory / "nginx.conf").write_text(main_config(directory, directory / "payorch.conf"))
    process = await trio.lowlevel.open_process(
        [NGINX, "-p", str(directory), "-c", str(directory / "nginx.conf")]
    )
    try:

        async def listening() -> bool:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", https_port)
            except OSError:
                assert process.returncode is None, (directory / "error.log").read_text()
                return False
            await stream.aclose()
            return True

        await eventually(listening, timeout_s=15)
        yield https_port, http_port
    finally:
        process.terminate()
        with trio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


def _client(ca: trustme.CA, https_port: int, source: str) -> httpx.AsyncClient:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    transport = httpx.AsyncHTTPTransport(verify=context, local_address=source)
    return httpx.AsyncClient(base_url=f"https://localhost:{https_port}", transport=transport, timeout=15)


def _offered_protocol(https_port: int, ca: trustme.CA) -> str | None:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    context.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", https_port)) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return tls.selected_alpn_protocol()


async def _login(client: httpx.AsyncClient, headers: dict[str, str] | None = None) -> int:
    answer = await client.post(
        "/api/v1/auth/login",
        json={"email": "nobody@shop.example", "password": "not-the-password"},
        headers=headers,
    )
    return answer.status_code


async def test_nginx_in_front_gives_tls_and_each_client_its_own_address_and_bounds_bodies(
    database_dsn: str, tmp_path: Path
) -> None:
    ca = trustme.CA()
    env = {
        "PAYORCH_SERVER__TRUSTED_PROXY_HOPS": "1",
        "PAYORCH_LIMITS__LOGIN_PER_MINUTE": "2",
        "PAYORCH_LIMITS__LOGIN_REFUSAL_HOLD_S": "0",
    }
    async with serving(database_dsn, tmp_path / "payorch", env) as (_, base_url, _):
        upstream_port = int(base_url.rsplit(":", 1)[1])
        async with nginx_in_front(tmp_path / "nginx", upstream_port, ca) as (https_port, http_port):
            assert await trio.to_thread.run_sync(_offered_protocol, https_port, ca) == "h2"
            async with httpx.AsyncClient() as plain:
                redirected = await plain.get(f"http://127.0.0.1:{http_port}/healthz")
            assert redirected.status_code == 308
            assert redirected.headers["Location"].startswith("https://")

            async with (
                _client(ca, https_port, "127.0.0.2") as first,
                _client(ca, https_port, "127.0.0.3") as second,
            ):
                assert (await first.get("/healthz")).status_code == 200
                # The login budget is the client's: two each, whatever the first writes itself.
                assert [await _login(first) for _ in range(2)] == [401, 401]
                assert await _login(first) == 429
                assert await _login(first, {"X-Forwarded-For": "127.0.0.9"}) == 429
                assert await _login(second) == 401
                # A body over client_max_body_size (1 MiB, payorch's own bound) stops at nginx.
                too_large = await first.post("/api/v1/sessions", content=b"x" * (1024 * 1024 + 1))
                assert too_large.status_code == 413
            # A body that stops arriving: nginx ends the request after client_body_timeout (its log
            # says 408) and closes the connection; payorch, which sees a request only once its body
            # has arrived whole, never answers it.
            with trio.fail_after(8):
                answer = await trio.to_thread.run_sync(_slow_body_answer, https_port, ca)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer
            assert b"x-request-id" not in answer.lower()


def _slow_body_answer(https_port: int, ca: trustme.CA) -> bytes:
    """What nginx sends back to a request whose body stops arriving, until it closes the connection."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    answer = b""
    with (
        socket.create_connection(("127.0.0.1", https_port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(
            b"POST /api/v1/auth/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"email": '
        )
        while chunk := tls.recv(4096):
            answer += chunk
    return answer
