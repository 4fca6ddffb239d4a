"""schemathesis against our own OpenAPI document: every operation, a bounded number of generated
requests each, and no answer may be a 5xx, an undocumented status, a body or content type that does
not match the document, or a success for data the document calls invalid.

The service runs for real (payorch.service.run, on 127.0.0.1:0) in a thread of its own with its own
trio loop: schemathesis sends its requests synchronously, with `requests`. Before the run a merchant,
an application linked to the sandbox, API keys, a webhook configuration and a paid session are made,
so that generated requests reach real resources as well as missing ones: each operation draws its
path parameters either from those resources or from schemathesis, and its credentials from the
merchant's access token or (where accepted) the application's API key.

Operations that destroy or disable what the others use (DELETE, PATCH .../status) run last.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import httpx
import hypothesis
import pytest
import requests
import schemathesis
import trio
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from payorch.config import LimitSettings, Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.service import run
from payorch.storage.database import open_database
from tests.helpers import PASSWORD, SANDBOX_KEY, eventually_blocking, signup_body

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

# Examples per operation, credential and kind of request (see strategies_for); about 20 s in all.
# PAYORCH_SCHEMATHESIS_EXAMPLES=100 for a deeper run by hand (a few minutes).
MAX_EXAMPLES = int(os.environ.get("PAYORCH_SCHEMATHESIS_EXAMPLES", "5"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
ADMIN_EMAIL = "admin@schemathesis.example"
CREDENTIAL_HEADERS = {"Authorization", "X-API-Key"}  # schemathesis lists them as header parameters


@dataclass(frozen=True)
class World:
    """What the generated requests may point at."""

    base_url: str
    jwt: str
    api_key: str
    path_values: dict[str, str]

    def valid_parts(self, label: str) -> dict[str, Any]:
        """A body or query string that passes validation, for operations whose generated ones
        (random currencies, payment methods, URLs) would otherwise never get past a 400."""
        application_id = self.path_values["application_id"]
        return {
            "POST /api/v1/sessions": {
                "body": {
                    "applicationId": application_id,
                    "orderReference": "order-st",
                    "paymentMethod": "card",
                    "currency": "PLN",
                    "amount": {"total": 12.5, "shipping": 0, "tax": 0},
                    "customer": {"email": "buyer@example.com"},
                }
            },
            "POST /api/v1/sessions/{session_id}/refunds": {"body": {"amount": 1, "reason": "DUPLICATE"}},
            "PUT /api/v1/applications/{application_id}/routing": {
                "body": {
                    "rules": [{"name": "cards", "route": {"type": "priority", "providers": ["sandbox"]}}],
                    "objective": "approval",
                }
            },
            "POST /api/v1/applications/{application_id}/routing/evaluate": {
                "body": {
                    "orderReference": "order-st",
                    "paymentMethod": "card",
                    "currency": "PLN",
                    "amount": {"total": 12.5},
                    "customer": {"email": "buyer@example.com"},
                    "routing": {"default": {"type": "dynamic"}},
                }
            },
            "POST /api/v1/applications/{application_id}/routing/backtest": {
                "body": {"routing": {"default": {"type": "priority", "providers": ["sandbox"]}}, "days": 7}
            },
            "GET /api/v1/payment-methods": {
                "query": {"currency": "PLN", "amount": "12.50", "applicationId": application_id}
            },
            "POST /api/v1/applications/{application_id}/webhooks": {
                "body": {"url": "https://127.0.0.1:9/more-hooks"}
            },
            "PATCH /api/v1/applications/{application_id}/webhooks/{webhook_id}": {
                "body": {"isActive": True, "subscribedEvents": ["refund.completed"]}
            },
            "POST /api/v1/applications/{application_id}/providers": {
                "body": {
                    "name": "sandbox",
                    "paymentMethods": ["card"],
                    "credentials": {"apiKey": SANDBOX_KEY},
                }
            },
            "PATCH /api/v1/applications/{application_id}/providers/{provider_name}/api-key": {
                "body": {"apiKey": SANDBOX_KEY}
            },
            "PATCH /api/v1/applications/{application_id}/providers/{provider_name}/payment-methods": {
                "body": {"paymentMethods": ["card", "blik"]}
            },
        }.get(label, {})


@contextmanager
def service_in_thread(settings: Settings) -> Iterator[str]:
    """payorch.service.run in a thread with its own trio loop; its base URL while the block runs."""
    started: queue.Queue[tuple[str, trio.Event, trio.lowlevel.TrioToken] | BaseException] = queue.Queue()

    async def serve() -> None:
        shutdown = trio.Event()
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(run, settings, shutdown=shutdown))
            started.put((running.addresses[0], shutdown, trio.lowlevel.current_trio_token()))

    def main() -> None:
        try:
            trio.run(serve)
        except BaseException as error:
            started.put(error)
            raise

    thread = threading.Thread(target=main, name="payorch-service", daemon=True)
    thread.start()
    item = started.get(timeout=60)
    if isinstance(item, BaseException):
        raise item
    base_url, shutdown, token = item
    try:
        yield base_url
    finally:
        trio.from_thread.run_sync(shutdown.set, trio_token=token)
        thread.join(timeout=30)
        assert not thread.is_alive(), "the service did not stop"


def invite_token(settings: Settings) -> str:
    async def issue() -> str:
        async with open_database(settings.database.url, min_size=1, max_size=1) as db:
            return (await issue_invite(db, settings, ADMIN_EMAIL)).token

    return trio.run(issue)


def build_world(base_url: str, token: str) -> World:
    """A merchant and everything the generated requests may refer to, made through the API."""
    with httpx.Client(base_url=base_url, timeout=30) as http:

        def ok(response: httpx.Response, status: int) -> Any:
            assert response.status_code == status, (response.request.url, response.text)
            return response.json()

        ok(http.post(f"/api/v1/merchants/signup?token={token}", json=signup_body(ADMIN_EMAIL, "REG-ST")), 201)
        login = ok(http.post("/api/v1/auth/login", json={"email": ADMIN_EMAIL, "password": PASSWORD}), 200)
        jwt = {"Authorization": f"Bearer {login['accessToken']}"}
        app_id = ok(http.post("/api/v1/applications", json={"name": "Shop"}, headers=jwt), 201)["id"]
        apps = f"/api/v1/applications/{app_id}"
        link = {"name": "sandbox", "paymentMethods": ["card", "blik"], "credentials": {"apiKey": SANDBOX_KEY}}
        ok(http.post(f"{apps}/providers", json=link, headers=jwt), 201)
        api_key = ok(http.post(f"{apps}/api-keys", json={"description": "server"}, headers=jwt), 201)["key"]
        # The key schemathesis may revoke: not the one it authenticates with.
        spare_key = ok(http.post(f"{apps}/api-keys", json={"description": "spare"}, headers=jwt), 201)["id"]
        webhook = {"url": "https://127.0.0.1:9/hooks", "subscribedEvents": ["session.completed"]}
        webhook_id = ok(http.post(f"{apps}/webhooks", json=webhook, headers=jwt), 201)["id"]
        session_body = {
            "orderReference": "order-1",
            "paymentMethod": "card",
            "currency": "PLN",
            "amount": {"total": 100},
            "customer": {"email": "buyer@example.com"},
        }
        headers = {"X-API-Key": api_key, "Idempotency-Key": "schemathesis-setup"}
        created = ok(http.post("/api/v1/sessions", json=session_body, headers=headers), 201)
        checkout = urlsplit(created["checkoutUrl"]).path
        assert http.post(checkout, data={"card_number": "4242424242424242"}).status_code in (200, 303)
        session = f"/api/v1/sessions/{created['sessionId']}"
        eventually_blocking(lambda: ok(http.get(session, headers=jwt), 200)["status"] == "SUCCEEDED", 15)
        deliveries = f"{apps}/webhooks/{webhook_id}/deliveries"
        delivery_id = eventually_blocking(
            lambda: [item["id"] for item in ok(http.get(deliveries, headers=jwt), 200)["items"]] or None, 15
        )[0]
    return World(
        base_url=base_url,
        jwt=login["accessToken"],
        api_key=api_key,
        path_values={
            "application_id": app_id,
            "session_id": created["sessionId"],
            "webhook_id": webhook_id,
            "key_id": spare_key,
            "delivery_id": delivery_id,
            "provider_name": "sandbox",
        },
    )


def run_order(operation: Any) -> tuple[int, str]:
    """Destructive operations last, so that the others meet live resources; logout last of all, since
    it ends the merchant's access token (every later JWT call would be 401)."""
    if operation.path.endswith("/auth/logout"):
        return (2, operation.label)
    destructive = operation.method.upper() == "DELETE" or operation.path.endswith("/status")
    return (1 if destructive else 0, operation.label)


def credentials(operation: Any, world: World) -> list[dict[str, str]]:
    schemes = [name for requirement in operation.definition.raw.get("security", []) for name in requirement]
    found = []
    if "bearerAuth" in schemes:
        found.append({"Authorization": f"Bearer {world.jwt}"})
    if "apiKeyAuth" in schemes:
        found.append({"X-API-Key": world.api_key})
    return found or [{}]


def strategies_for(operation: Any, world: World) -> list[st.SearchStrategy[Any]]:
    """For each credential the operation accepts: generated requests to known resources, to
    generated (mostly missing) ones, with a valid body or query where generated ones never pass,
    and negative ones (data the document says is invalid)."""
    names = [parameter.name for parameter in operation.path_parameters]
    known = {name: world.path_values[name] for name in names if name in world.path_values}
    valid = world.valid_parts(operation.label)
    variants = []
    for headers in credentials(operation, world):
        variants.append(operation.as_strategy(path_parameters=known, headers=headers))
        if valid:
            variants.append(operation.as_strategy(path_parameters=known, headers=headers, **valid))
        if names:
            variants.append(operation.as_strategy(headers=headers))
        free_headers = [header for header in operation.headers if header.name not in CREDENTIAL_HEADERS]
        if len(operation.body) or len(operation.query) or free_headers:  # something left to break
            variants.append(
                operation.as_strategy(
                    generation_mode=schemathesis.GenerationMode.NEGATIVE,
                    path_parameters=known,
                    headers=headers,
                )
            )
    return variants


def exercise(operation: Any, world: World, session: requests.Session) -> None:
    for strategy in strategies_for(operation, world):

        @hypothesis.settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            report_multiple_bugs=False,
        )
        @hypothesis.given(case=strategy)
        def check(case: Any) -> None:
            case.call_and_validate(base_url=world.base_url, session=session, checks=CHECKS, timeout=30)

        check()


@pytest.fixture
def fuzz_settings(settings: Settings) -> Settings:
    # Generous limits: schemathesis is one client with one token, signs in again and again, and
    # changes and evaluates routing documents as fast as it sends.
    limits = LimitSettings(
        requests_per_second=10_000,
        burst=10_000,
        login_per_minute=100_000,
        routing_changes_per_hour=10_000_000,
        routing_changes_burst=10_000,
        routing_evaluations_per_second=10_000,
        routing_evaluations_burst=10_000,
    )
    return settings.model_copy(update={"limits": limits})


def test_schemathesis_against_our_openapi_document(fuzz_settings: Settings) -> None:
    token = invite_token(fuzz_settings)
    with service_in_thread(fuzz_settings) as base_url:
        world = build_world(base_url, token)
        schema = schemathesis.openapi.from_url(f"{base_url}/api/v1/openapi.json")
        operations = sorted((result.ok() for result in schema.get_all_operations()), key=run_order)
        assert len(operations) >= 30
        failures = []
        with requests.Session() as session:
            for operation in operations:
                try:
                    exercise(operation, world, session)
                except (Exception, BaseExceptionGroup) as error:  # schemathesis's FailureGroup
                    failures.append(f"{operation.label}:\n{error}")
    assert not failures, "\n\n".join(failures)
