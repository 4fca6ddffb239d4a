"""An attacker's view of the console: every page and form about one application, walked with another
merchant's signed-in session (and a valid CSRF token of it), is 404, shows nothing of the victim's
and changes nothing."""

from __future__ import annotations

import re

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.jsonexact import dumps_exact
from payorch.storage.database import Database
from tests.console.helpers import page, signed_in
from tests.helpers import (
    Client,
    Merchant,
    Shop,
    link_sandbox,
    new_api_key,
    new_application,
    new_merchant,
)
from tests.http.test_refunds import paid_session


async def test_every_console_route_of_an_application_refuses_another_merchants_session(
    app: PayorchApp, client: Client, db: Database, settings: Settings
) -> None:
    victim = await new_merchant(client, db, settings)
    application = await new_application(client, victim, "Victim's shop")
    key = await new_api_key(client, victim, application["id"])
    hooks = f"/api/v1/applications/{application['id']}/webhooks"
    hook = await client.post(hooks, json={"url": "https://127.0.0.1/victim-hooks"}, headers=victim.headers)
    webhook = await hook.get_json()
    await link_sandbox(client, victim, application["id"])
    shop = Shop(merchant=victim, application_id=application["id"], api_key=key["key"])
    session_id = await paid_session(client, shop)
    runs = f"/api/v1/applications/{application['id']}/reconciliations"
    period = {"provider": "sandbox", "from": "2026-11-01", "to": "2026-11-01"}
    run = await (await client.post(runs, json=period, headers=victim.headers)).get_json()
    attacker = await new_merchant(client, db, settings)
    console = app.test_client()
    csrf = await signed_in(console, attacker.email)
    routes = [
        (method, rule.rule)
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/console/")
        and ("<application_id>" in rule.rule or "<session_id>" in rule.rule)
        for method in sorted(rule.methods or ())
        if method not in ("HEAD", "OPTIONS")
    ]
    assert len(routes) >= 4
    values = {
        "application_id": application["id"],
        "key_id": key["id"],
        "webhook_id": webhook["id"],
        "delivery_id": "00000000-0000-4000-8000-000000000000",
        "session_id": session_id,
        "version": "1",
        "run_id": run["id"],
    }
    form = {
        "csrf_token": csrf,
        "enabled": "false",
        "confirm": "yes",
        "description": "attacker",
        "active": "false",
        "idempotency_key": "attacker-1",
        "confirmed": "yes",  # a refund's confirmation, not only its review
        "reason": "requested_by_customer",
        # A routing document (to store or to backtest) and a session to evaluate, each one the
        # routing page would take.
        "document": dumps_exact({"default": {"type": "priority", "providers": ["sandbox"]}}),
        "days": "30",
        "paymentMethod": "card",
        "amount": "10.00",
        "currency": "PLN",
        # A reconciliation run to start.
        **period,
    }
    for method, rule in routes:
        path = re.sub(r"<(?:\w+:)?(\w+)>", lambda match: str(values[match.group(1)]), rule)
        response = await console.open(path, method=method, form=form if method == "POST" else None)
        text = await response.get_data(as_text=True)
        assert response.status_code == 404, (method, rule, response.status_code, text)
        assert "Victim" not in text and key["keyPrefix"] not in text, (method, rule, text)
        assert "victim-hooks" not in text and webhook["keyFingerprint"] not in text, (method, rule, text)
        assert "sandbox" not in text, (method, rule, text)  # the victim's provider, rates, evaluation
    after = await client.get(f"/api/v1/applications/{application['id']}", headers=victim.headers)
    assert (await after.get_json())["isEnabled"] is True
    keys = await client.get(f"/api/v1/applications/{application['id']}/api-keys", headers=victim.headers)
    assert [item["status"] for item in (await keys.get_json())["items"]] == ["active"]
    routing = await client.get(f"/api/v1/applications/{application['id']}/routing", headers=victim.headers)
    assert (await routing.get_json())["version"] == 0
    assert (await (await client.get(runs, headers=victim.headers)).get_json())["totalItems"] == 1
    paid = await client.get(f"/api/v1/sessions/{session_id}", headers=victim.headers)
    assert (await paid.get_json())["refunds"] == []
    listed = await client.get(f"/api/v1/applications/{application['id']}/sessions", headers=victim.headers)
    assert (await listed.get_json())["totalItems"] == 1  # no test payment
    (hook_after,) = (await (await client.get(hooks, headers=victim.headers)).get_json())["items"]
    assert (hook_after["isActive"], hook_after["keyFingerprint"], hook_after["lastTestAt"]) == (
        True,
        webhook["keyFingerprint"],
        None,
    )


async def test_the_404_page_names_what_is_missing(app: PayorchApp, merchant: Merchant) -> None:
    console = app.test_client()
    await signed_in(console, merchant.email)
    missing = "00000000-0000-4000-8000-000000000000"
    response, html = await page(console, f"/console/sessions/{missing}")
    assert response.status_code == 404
    assert "No such session" in html
    response, html = await page(console, f"/console/applications/{missing}")
    assert response.status_code == 404
    assert "No such application" in html
