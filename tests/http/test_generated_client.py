"""A Python client generated from the served OpenAPI document, as a merchant would make one
(`openapi-python-client generate`, offline, into the test's folder), runs the README's walkthrough
against payorch over HTTP: signup with an invite, login, an application, an API key, the sandbox
linked, the payment methods, a session created with an `Idempotency-Key` and replayed, paid on its
checkout page, read SUCCEEDED, refunded in part, listed, and the key revoked. Errors arrive as the
shapes the document names for them. If the generator cannot make a client of the document, or the
client cannot read an answer, the document is wrong.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import trio

from payorch.config import Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.storage.database import Database
from tests.browser.plugin import LiveService
from tests.helpers import PASSWORD, eventually, signup_body

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

GENERATOR = "openapi-python-client"
PACKAGE = "payorch_client"
EMAIL = "owner@acme.example"
# The generator's own settings: no formatting hooks afterwards (they would look for ruff on PATH).
GENERATOR_CONFIG = f"post_hooks: []\npackage_name_override: {PACKAGE}\n"
TIMEOUT = httpx.Timeout(30.0)  # a loaded test machine, not the client's 5 s default


def generator() -> str:
    """The generator's command: beside this Python (the project's .venv), else on PATH."""
    beside = Path(sys.executable).with_name(GENERATOR)
    found = str(beside) if beside.exists() else shutil.which(GENERATOR)
    assert found, f"{GENERATOR} is a test dependency (pyproject.toml, [dev]): `make test` installs it"
    return found


@pytest.fixture
def generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The folder the client is generated into, importable while the test runs and forgotten after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [name for name in sys.modules if name == PACKAGE or name.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]


async def generate_client(live_service: LiveService, folder: Path) -> ModuleType:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        served = await http.get(live_service.url("/api/v1/openapi.json"))
    assert served.status_code == 200
    (folder / "openapi.json").write_bytes(served.content)
    (folder / "generator.yaml").write_text(GENERATOR_CONFIG)
    command = [
        generator(), "generate", "--path", str(folder / "openapi.json"),
        "--output-path", str(folder / PACKAGE), "--meta", "none",
        "--config", str(folder / "generator.yaml"), "--fail-on-warning",
    ]  # fmt: skip
    done = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()
    return importlib.import_module(PACKAGE)


def module(package: ModuleType, name: str) -> Any:
    return importlib.import_module(f"{package.__name__}.{name}")


async def test_a_generated_client_runs_the_readme_walkthrough(
    live_service: LiveService, generated: Path, db: Database, settings: Settings
) -> None:
    client = await generate_client(live_service, generated)
    models = module(client, "models")
    sign_up, log_in = (module(client, f"api.accounts.{name}") for name in ("sign_up", "log_in"))
    create_application, list_applications, create_api_key, list_api_keys, revoke_api_key = (
        module(client, f"api.applications_and_api_keys.{name}")
        for name in (
            "create_application",
            "list_applications",
            "create_api_key",
            "list_api_keys",
            "revoke_api_key",
        )
    )
    link_provider = module(client, "api.providers.link_provider")
    payment_methods = module(client, "api.payment_methods.payment_methods")
    create_session, get_session, list_sessions = (
        module(client, f"api.sessions.{name}") for name in ("create_session", "get_session", "list_sessions")
    )
    create_refund = module(client, "api.refunds.create_refund")
    base_url = live_service.base_url

    # 1-2. An operator invites the merchant; the merchant signs up with the token.
    invite = await issue_invite(db, settings, EMAIL)
    anonymous = client.Client(base_url=base_url, timeout=TIMEOUT)
    signup = models.SignupRequest.from_dict(signup_body(EMAIL, "PL-0001234"))
    answer = await sign_up.asyncio_detailed(client=anonymous, body=signup, token=invite.token)
    assert answer.status_code == 201, answer.content
    assert answer.parsed.admin.email == EMAIL

    # 3. The admin logs in.
    login = models.LoginRequest(email=EMAIL, password=PASSWORD)
    token = (await log_in.asyncio(client=anonymous, body=login)).access_token
    admin = client.AuthenticatedClient(base_url=base_url, token=token, timeout=TIMEOUT)

    # 4. An application, listed.
    created = await create_application.asyncio_detailed(
        client=admin,
        body=models.ApplicationCreateRequest(
            name="Web shop",
            description=models.ApplicationCreateRequestDescriptionType0.from_dict({"channel": "web"}),
        ),
    )
    assert created.status_code == 201, created.content
    app_id = str(created.parsed.id)
    listed = await list_applications.asyncio(client=admin)
    assert [str(item.id) for item in listed.items] == [app_id]

    # 5. An API key for the merchant's server, and a client that sends it.
    key = await create_api_key.asyncio_detailed(
        app_id, client=admin, body=models.ApiKeyCreateRequest(description="checkout server")
    )
    assert key.status_code == 201, key.content
    server = client.AuthenticatedClient(
        base_url=base_url, token=key.parsed.key, prefix="", auth_header_name="X-API-Key", timeout=TIMEOUT
    )
    unnamed = await create_api_key.asyncio_detailed(app_id, client=admin)  # no body at all
    assert unnamed.status_code == 201 and unnamed.parsed.description == ""

    # 6. The sandbox linked; what the application can offer for 100.00 PLN.
    link = models.ProviderLinkRequest(
        name="sandbox",
        payment_methods=["card", "blik"],
        credentials=models.ProviderCredentials(api_key="sk_sandbox_my_test_key"),
    )
    linked = await link_provider.asyncio_detailed(app_id, client=admin, body=link)
    assert linked.status_code == 201, linked.content
    methods = await payment_methods.asyncio(
        client=server, currency=models.PaymentMethodsCurrency.PLN, amount="100.00"
    )
    assert methods.payment_methods == ["blik", "card"]

    # 7. A checkout session, created with an Idempotency-Key; the same request again is the same session.
    order = models.SessionCreateRequest(
        order_reference="order-1001",
        payment_method="card",
        currency=models.SessionCreateRequestCurrency.PLN,
        amount=models.SessionAmount(total=100.00, shipping=0, tax=0),
        customer=models.Customer(email="buyer@example.com", first_name="Jan", last_name="Kowalski"),
    )
    first = await create_session.asyncio_detailed(
        client=server, body=order, idempotency_key="order-1001-attempt-1"
    )
    assert first.status_code == 201, first.content
    again = await create_session.asyncio_detailed(
        client=server, body=order, idempotency_key="order-1001-attempt-1"
    )
    assert (again.status_code, again.headers["Idempotent-Replayed"]) == (201, "true")
    assert again.parsed.session_id == first.parsed.session_id
    session_id = first.parsed.session_id
    missing_key = await create_session.asyncio_detailed(client=server, body=order, idempotency_key="")
    assert missing_key.status_code == 400 and isinstance(missing_key.parsed, models.ErrorA)
    assert [problem.field for problem in missing_key.parsed.details] == ["Idempotency-Key"]

    # 8. The customer pays on the checkout page (the form posted as a browser would); SUCCEEDED.
    async with httpx.AsyncClient(timeout=TIMEOUT) as browser:
        paid = await browser.post(
            live_service.url(first.parsed.checkout_url), data={"card_number": "4242424242424242"}
        )
    assert paid.status_code == 200, paid.text

    async def status_of(wanted: str) -> Any:
        record = await get_session.asyncio(session_id, client=server)
        return record if record.status == wanted else None

    record = await eventually(lambda: status_of("SUCCEEDED"))
    assert (record.amount, record.currency, record.refunds) == (100.0, "PLN", [])

    # Part of it refunded: 30.10 sent as the float 30.1 is refunded exactly.
    refund = await create_refund.asyncio_detailed(
        session_id,
        client=server,
        idempotency_key="refund-1",
        body=models.RefundCreateRequest(
            amount=30.1, reason=models.RefundCreateRequestReasonType0.REQUESTED_BY_CUSTOMER
        ),
    )
    assert refund.status_code in (201, 202), refund.content
    assert refund.parsed.amount == 30.1 and b'"amount": 30.10' in refund.content
    too_much = await create_refund.asyncio_detailed(
        session_id, client=server, idempotency_key="refund-2", body=models.RefundCreateRequest(amount=70)
    )
    assert too_much.status_code == 422 and isinstance(too_much.parsed, models.ErrorB)
    assert too_much.parsed.code == models.ErrorBCode.REFUND_EXCEEDS_BALANCE
    record = await get_session.asyncio(session_id, client=server)
    assert record.status == models.SessionRecordStatus.PARTIALLY_REFUNDED
    assert [item.amount for item in record.refunds] == [30.1]

    # The application's sessions, listed with the JWT.
    page = await list_sessions.asyncio(app_id, client=admin)
    assert ([item.id for item in page.items], page.total_items) == ([session_id], 1)

    # 9. The key revoked: its very next request is 401.
    keys = await list_api_keys.asyncio(app_id, client=admin)
    (server_key,) = [item for item in keys.items if item.description == "checkout server"]
    revoked = await revoke_api_key.asyncio_detailed(app_id, str(server_key.id), client=admin)
    assert revoked.status_code == 200
    refused = await get_session.asyncio_detailed(session_id, client=server)
    assert refused.status_code == 401 and isinstance(refused.parsed, models.ErrorA)
