"""An attacker's view: every route walked with another merchant's JWT and API key gets 401, 403 or
404 and never the victim's data, and changes nothing."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.jsonexact import dumps_exact
from payorch.storage.database import Connection, Database
from tests.helpers import Client, Shop, create_session, new_shop, session_body

# Routes about the caller's own merchant account rather than one application: checked for leaks only.
OWN_SCOPE = {
    ("GET", "/api/v1/applications"),
    ("POST", "/api/v1/applications"),
    ("GET", "/api/v1/providers"),
    ("POST", "/api/v1/auth/logout"),  # ends the caller's own tokens (tests/http/test_logout.py)
    # The caller's own merchant's users and invites (tests/http/test_users.py).
    ("GET", "/api/v1/merchants/me/users"),
    ("GET", "/api/v1/merchants/me/invites"),
    ("POST", "/api/v1/merchants/me/invites"),
    ("GET", "/api/v1/sessions"),  # the caller's merchant's sessions (tests/http/test_session_search.py)
}
# A valid body for each route that needs one: only authorization may refuse the request.
VALID_BODIES: dict[tuple[str, str], Any] = {
    ("PATCH", "/api/v1/applications/<application_id>/status"): {"isEnabled": False},
    ("PATCH", "/api/v1/merchants/me/users/<user_id>"): {"role": "read_only"},
    ("POST", "/api/v1/applications/<application_id>/providers"): {
        "name": "sandbox",
        "paymentMethods": ["card"],
        "credentials": {"apiKey": "sk_sandbox_attacker_01"},
    },
    ("PATCH", "/api/v1/applications/<application_id>/providers/<provider_name>/api-key"): {
        "apiKey": "sk_sandbox_attacker_01"
    },
    ("PATCH", "/api/v1/applications/<application_id>/providers/<provider_name>/payment-methods"): {
        "paymentMethods": ["card"]
    },
    ("POST", "/api/v1/applications/<application_id>/webhooks"): {"url": "https://127.0.0.1/attacker"},
    ("PATCH", "/api/v1/applications/<application_id>/webhooks/<webhook_id>"): {"isActive": False},
    ("POST", "/api/v1/applications/<application_id>/routing/evaluate"): session_body(),
    ("POST", "/api/v1/applications/<application_id>/routing/backtest"): {"routing": {}},
    ("POST", "/api/v1/applications/<application_id>/reconciliations"): {
        "provider": "sandbox",
        "from": "2026-11-01",
        "to": "2026-11-02",
    },
}
# Routes that take no merchant credential by design: their own checks are tested elsewhere (the
# customer pages, sandbox/ and checkout/, show the customer their own payment by its unguessable id;
# the console takes its session cookie, not a JWT or API key, and tests/console/test_attacker.py walks
# it with another merchant's session; `/` leads a browser to the console).
PUBLIC = re.compile(
    r"^/(|healthz|readyz|metrics|docs.*|sandbox/.*|checkout/.*|console.*|"
    r"api/v1/(openapi\.json|merchants/signup|users/signup|auth/login|provider-events/.*))$"
)


@pytest.fixture
async def victim(client: Client, db: Database, settings: Settings) -> dict[str, Any]:
    shop = await new_shop(client, db, settings)
    session = await (await create_session(client, shop, "victim")).get_json()
    webhook = await (
        await client.post(
            f"/api/v1/applications/{shop.application_id}/webhooks",
            json={"url": "https://127.0.0.1/hooks"},
            headers=shop.merchant.headers,
        )
    ).get_json()
    keys = await (
        await client.get(
            f"/api/v1/applications/{shop.application_id}/api-keys", headers=shop.merchant.headers
        )
    ).get_json()
    routing = await (
        await client.put(
            f"/api/v1/applications/{shop.application_id}/routing",
            json={"rules": [], "default": {"type": "priority", "providers": ["sandbox"]}},
            headers=shop.merchant.headers,
        )
    ).get_json()
    run = await (
        await client.post(
            f"/api/v1/applications/{shop.application_id}/reconciliations",
            json={"provider": "sandbox", "from": "2026-11-01", "to": "2026-11-02"},
            headers=shop.merchant.headers,
        )
    ).get_json()
    users = await (await client.get("/api/v1/merchants/me/users", headers=shop.merchant.headers)).get_json()
    invite = await (
        await client.post(
            "/api/v1/merchants/me/invites",
            json={"email": "colleague@victim.example", "role": "read_only"},
            headers=shop.merchant.headers,
        )
    ).get_json()
    return {
        "shop": shop,
        "application_id": shop.application_id,
        "session_id": session["sessionId"],
        "webhook_id": webhook["id"],
        "key_id": keys["items"][0]["id"],
        "provider_name": "sandbox",
        "delivery_id": str(uuid.uuid4()),
        "id": shop.application_id,
        "version": routing["version"],
        "run_id": run["id"],
        "user_id": users["items"][0]["id"],
        "invite_id": invite["id"],
    }


def _routes(app: PayorchApp) -> list[tuple[str, str]]:
    found = []
    for rule in app.url_map.iter_rules():
        if PUBLIC.match(rule.rule) or rule.rule.startswith("/static"):
            continue
        for method in sorted(rule.methods or ()):
            if method not in ("HEAD", "OPTIONS"):
                found.append((method, rule.rule))
    return found


def _fill(rule: str, victim: dict[str, Any]) -> str:
    return re.sub(r"<(?:\w+:)?(\w+)>", lambda match: str(victim[match.group(1)]), rule)


async def _snapshot(db: Database) -> list[Any]:
    async def rows(conn: Connection) -> list[Any]:
        counts = []
        for table in (
            "applications",
            "api_keys",
            "provider_configs",
            "webhook_configs",
            "checkout_sessions",
            "refunds",
            "users",
            "user_invites",
        ):
            counts.append(await conn.fetchval(f"SELECT count(*) FROM {table}"))  # noqa: S608
        counts.append(await conn.fetchval("SELECT max(updated_at) FROM applications"))
        counts.append(await conn.fetchval("SELECT count(*) FROM api_keys WHERE revoked_at IS NOT NULL"))
        counts.append(await conn.fetchval("SELECT max(updated_at) FROM webhook_configs"))
        counts.append(await conn.fetchval("SELECT max(updated_at) FROM provider_configs"))
        return counts

    return await db.autocommit(rows)


async def test_every_route_refuses_another_merchants_jwt_and_api_key(
    app: PayorchApp, client: Client, db: Database, settings: Settings, victim: dict[str, Any]
) -> None:
    attacker: Shop = await new_shop(client, db, settings)
    routes = _routes(app)
    assert len(routes) >= 20  # the walk covers the API, not an empty map
    before = await _snapshot(db)
    secret_bits = {
        victim["application_id"],
        victim["session_id"],
        victim["webhook_id"],
        victim["key_id"],
        victim["user_id"],
        victim["invite_id"],
    }
    for credential in (attacker.merchant.headers, attacker.headers):
        for method, rule in routes:
            if (method, rule) in OWN_SCOPE:
                continue
            path = _fill(rule, victim)
            if rule == "/api/v1/payment-methods":
                path += f"?currency=PLN&amount=1.00&applicationId={victim['application_id']}"
            body = VALID_BODIES.get((method, rule), {})
            if rule == "/api/v1/sessions":
                body = session_body(applicationId=victim["application_id"])
            response = await client.open(
                path,
                method=method,
                data=dumps_exact(body),
                headers={
                    **credential,
                    "Idempotency-Key": str(uuid.uuid4()),
                    "Content-Type": "application/json",
                },
            )
            text = await response.get_data(as_text=True)
            assert response.status_code in (401, 403, 404), (method, rule, response.status_code, text)
            assert all(bit not in text for bit in secret_bits), (method, rule, text)
        for method, rule in OWN_SCOPE:
            if method == "GET":
                text = await (await client.get(rule, headers=credential)).get_data(as_text=True)
                assert all(bit not in text for bit in secret_bits), (method, rule, text)
    assert await _snapshot(db) == before
