"""The console's webhooks: configurations created and rotated with their secret shown once, test
events with the receiver's answer, the delivery log with its attempts, retries; all through the API's
operations, to a real HTTPS receiver."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import pytest

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage.database import Connection, Database
from tests import webhook_receiver as receiving
from tests.console.helpers import page, signed_in_browser, submit
from tests.helpers import (
    Client,
    Merchant,
    Shop,
    create_session,
    eventually,
    new_application,
    new_merchant,
    new_shop,
)
from tests.webhook_receiver import WebhookReceiver

webhook_receiver = receiving.webhook_receiver

_SHOWN_SECRET = re.compile(r'<code class="key" id="new-secret"[^>]*>([^<]+)</code>')
ALL_EVENTS = ["session.completed", "session.expired", "refund.completed", "refund.failed"]


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    """The receiver's CA trusted, and a short retry schedule: 2 attempts 0.2 s apart."""
    return settings.model_copy(
        update={
            "webhooks": settings.webhooks.model_copy(
                update={"ca_bundle": webhook_receiver.ca_path, "retry_schedule_s": [0, 0.2], "timeout_s": 5}
            )
        }
    )


def shown_secret(html: str) -> str:
    found = _SHOWN_SECRET.search(html)
    assert found is not None, html
    return found.group(1)


def webhooks_path(application_id: str) -> str:
    return f"/api/v1/applications/{application_id}/webhooks"


def console_webhooks(application_id: str, *parts: str) -> str:
    """The console's page of the application's webhooks, or what `parts` name below it (a
    configuration, one of its forms)."""
    return "/".join([f"/console/applications/{application_id}/webhooks", *parts])


def forms_of(application_id: str, config: dict[str, Any], delivery: dict[str, Any]) -> list[str]:
    """Where the forms of the configuration's page post: its edit, delete, status, secret and test,
    the retry of `delivery`."""
    path = console_webhooks(application_id, config["id"])
    return [
        path,
        f"{path}/delete",
        f"{path}/status",
        f"{path}/secret",
        f"{path}/test",
        f"{path}/deliveries/{delivery['id']}/retry",
    ]


async def api_config(client: Client, merchant: Merchant, application_id: str, webhook_id: str) -> Any:
    """The configuration as the API reads it: (status code, body)."""
    response = await client.get(f"{webhooks_path(application_id)}/{webhook_id}", headers=merchant.headers)
    return response.status_code, await response.get_json()


async def configs_of(client: Client, merchant: Merchant, application_id: str) -> list[dict[str, Any]]:
    response = await client.get(webhooks_path(application_id), headers=merchant.headers)
    assert response.status_code == 200
    items: list[dict[str, Any]] = (await response.get_json())["items"]
    return items


async def api_create(client: Client, merchant: Merchant, application_id: str, url: str) -> dict[str, Any]:
    response = await client.post(webhooks_path(application_id), json={"url": url}, headers=merchant.headers)
    assert response.status_code == 201, await response.get_data(as_text=True)
    created: dict[str, Any] = await response.get_json()
    return created


async def deliveries_of(client: Client, merchant: Merchant, application_id: str, webhook_id: str) -> Any:
    response = await client.get(
        f"{webhooks_path(application_id)}/{webhook_id}/deliveries", headers=merchant.headers
    )
    return (await response.get_json())["items"]


async def only_delivery(
    client: Client, merchant: Merchant, application_id: str, webhook_id: str, status: str
) -> dict[str, Any] | None:
    items = await deliveries_of(client, merchant, application_id, webhook_id)
    return items[0] if len(items) == 1 and items[0]["status"] == status else None


async def pay(client: Client, shop: Shop) -> None:
    created = await (await create_session(client, shop, "k")).get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})


async def failed_delivery(
    client: Client, shop: Shop, receiver: WebhookReceiver
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shop subscribed to `receiver`, whose every attempt to deliver a paid session's event was
    answered 500: (the configuration, its FAILED delivery)."""
    config = await api_create(client, shop.merchant, shop.application_id, receiver.url)
    receiver.accept_secret(config["signingSecret"])
    receiver.script([500, 500])
    await pay(client, shop)
    delivery = await eventually(
        lambda: only_delivery(client, shop.merchant, shop.application_id, config["id"], "FAILED")
    )
    return config, delivery


async def test_a_new_configuration_shows_its_secret_once_and_its_pages_never_do(
    app: PayorchApp, client: Client, merchant: Merchant, webhook_receiver: WebhookReceiver
) -> None:
    application = await new_application(client, merchant)
    console, csrf = await signed_in_browser(app, merchant.email)
    response, html = await submit(
        console,
        console_webhooks(application["id"]),
        {
            "csrf_token": csrf,
            "url": webhook_receiver.url,
            "subscribedEvents": ["session.completed", "refund.failed"],
            "active": "true",
        },
    )
    assert response.status_code == 201, html
    assert response.headers["Cache-Control"] == "no-store"
    secret = shown_secret(html)
    assert secret.startswith("whsec_")
    assert 'data-copy="new-secret"' in html
    (config,) = await configs_of(client, merchant, application["id"])
    assert config["url"] == webhook_receiver.url
    assert config["subscribedEvents"] == ["session.completed", "refund.failed"]
    assert config["isActive"] is True
    assert config["keyFingerprint"] in html
    # The secret shown is the one that signs.
    webhook_receiver.accept_secret(secret)
    tested = await client.post(
        f"{webhooks_path(application['id'])}/{config['id']}/test", headers=merchant.headers
    )
    assert (await tested.get_json())["success"] is True
    (request,) = await webhook_receiver.wait_for(1, timeout_s=10)
    assert request.verified_with == secret
    # Neither the list nor the configuration's page shows it again.
    response, listed = await page(console, console_webhooks(application["id"]))
    assert response.status_code == 200
    assert webhook_receiver.url in listed and "Active" in listed and "Succeeded" in listed
    assert secret not in listed
    response, shown = await page(console, console_webhooks(application["id"], config["id"]))
    assert response.status_code == 200
    assert config["keyFingerprint"] in shown
    assert secret not in shown


async def test_a_configuration_created_without_active_receives_nothing_until_activated(
    app: PayorchApp, client: Client, merchant: Merchant, webhook_receiver: WebhookReceiver
) -> None:
    application = await new_application(client, merchant)
    console, csrf = await signed_in_browser(app, merchant.email)
    response, _ = await submit(
        console,
        console_webhooks(application["id"]),
        {"csrf_token": csrf, "url": webhook_receiver.url, "subscribedEvents": ALL_EVENTS},
    )
    assert response.status_code == 201
    (config,) = await configs_of(client, merchant, application["id"])
    assert config["isActive"] is False
    assert config["subscribedEvents"] == ALL_EVENTS
    path = console_webhooks(application["id"], config["id"])
    activated, _ = await submit(console, f"{path}/status", {"csrf_token": csrf, "active": "true"})
    assert activated.status_code == 303
    assert activated.headers["Location"] == path
    (config,) = await configs_of(client, merchant, application["id"])
    assert config["isActive"] is True


async def test_rotating_shows_the_new_secret_once_and_it_signs(
    app: PayorchApp, client: Client, merchant: Merchant, webhook_receiver: WebhookReceiver
) -> None:
    application = await new_application(client, merchant)
    created = await api_create(client, merchant, application["id"], webhook_receiver.url)
    console, csrf = await signed_in_browser(app, merchant.email)
    path = console_webhooks(application["id"], created["id"])
    response, html = await submit(console, f"{path}/secret", {"csrf_token": csrf})
    assert response.status_code == 200
    secret = shown_secret(html)
    assert secret.startswith("whsec_") and secret != created["signingSecret"]
    assert 'data-copy="new-secret"' in html
    assert "previous secret also signs" in html
    (config,) = await configs_of(client, merchant, application["id"])
    assert config["keyFingerprint"] != created["keyFingerprint"]
    assert config["keyFingerprint"] in html
    webhook_receiver.accept_secret(secret)  # only the new one
    await client.post(f"{webhooks_path(application['id'])}/{created['id']}/test", headers=merchant.headers)
    (request,) = await webhook_receiver.wait_for(1, timeout_s=10)
    assert request.verified_with == secret
    _, shown = await page(console, path)
    assert secret not in shown and created["signingSecret"] not in shown
    assert config["keyFingerprint"] in shown


async def test_a_test_event_shows_the_receivers_answer(
    app: PayorchApp, client: Client, merchant: Merchant, webhook_receiver: WebhookReceiver
) -> None:
    application = await new_application(client, merchant)
    created = await api_create(client, merchant, application["id"], webhook_receiver.url)
    webhook_receiver.accept_secret(created["signingSecret"])
    console, csrf = await signed_in_browser(app, merchant.email)
    path = console_webhooks(application["id"], created["id"], "test")

    webhook_receiver.script([(418, {"content-type": "text/plain"}, b"short and stout")])
    response, html = await submit(console, path, {"csrf_token": csrf})
    assert response.status_code == 200
    assert "Failed: your endpoint answered with HTTP 418." in html
    assert "short and stout" in html
    (request,) = await webhook_receiver.wait_for(1, timeout_s=10)
    assert request.verified and request.json()["type"] == "webhook.test"
    (config,) = await configs_of(client, merchant, application["id"])
    assert config["lastTestStatus"] == "FAILED"

    _, html = await submit(console, path, {"csrf_token": csrf})
    assert "Succeeded" in html
    assert "{&#34;received&#34;:true}" in html
    (config,) = await configs_of(client, merchant, application["id"])
    assert config["lastTestStatus"] == "SUCCEEDED"


async def test_a_test_event_nobody_answers_shows_no_status_and_why(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    created = await api_create(client, merchant, application["id"], "https://127.0.0.1:9/hooks")
    console, csrf = await signed_in_browser(app, merchant.email)
    response, html = await submit(
        console, console_webhooks(application["id"], created["id"], "test"), {"csrf_token": csrf}
    )
    assert response.status_code == 200
    assert "Failed: your endpoint gave no answer." in html
    assert "<dt>Error</dt>" in html


async def test_the_delivery_log_lists_each_delivery_with_its_attempts(
    app: PayorchApp, client: Client, db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    shop = await new_shop(client, db, settings)
    config = await api_create(client, shop.merchant, shop.application_id, webhook_receiver.url)
    webhook_receiver.accept_secret(config["signingSecret"])
    webhook_receiver.script([(500, {}, b"oops")])
    await pay(client, shop)
    delivery = await eventually(
        lambda: only_delivery(client, shop.merchant, shop.application_id, config["id"], "DELIVERED")
    )
    assert [item["httpStatusCode"] for item in delivery["attemptLog"]] == [500, 200]
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await page(console, console_webhooks(shop.application_id, config["id"]))
    assert response.status_code == 200
    assert "1 delivery, newest first" in html
    assert "session.completed" in html and delivery["eventId"] in html
    assert '<span class="delivery-delivered"><span title="DELIVERED">Delivered</span></span>' in html
    assert "Send again" in html and "Retry now" not in html
    attempts = re.findall(r'<li><time datetime="([^"]+)"[^>]*>[^<]+</time>: (HTTP \d+)', html)
    assert [status for _, status in attempts] == ["HTTP 500", "HTTP 200"]
    assert [at for at, _ in attempts] == [item["attemptedAt"] for item in delivery["attemptLog"]]


async def test_retrying_a_failed_delivery_sends_it_again_and_goes_back_to_the_log(
    app: PayorchApp, client: Client, db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    shop = await new_shop(client, db, settings)
    config, delivery = await failed_delivery(client, shop, webhook_receiver)
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    path = console_webhooks(shop.application_id, config["id"])
    _, html = await page(console, path)
    assert '<span class="delivery-failed"><span title="FAILED">Failed</span></span>' in html
    assert "Retry now" in html and "Send again" not in html
    retry = f"{path}/deliveries/{delivery['id']}/retry"
    assert f'action="{retry}"' in html

    response, _ = await submit(console, retry, {"csrf_token": csrf, "page": "1"})
    assert response.status_code == 303
    assert response.headers["Location"] == path
    # As the API's retry: PENDING and due now, so the supervisor sends it a third time (answered 200).
    await webhook_receiver.wait_for(3, timeout_s=10)
    delivered = await eventually(
        lambda: only_delivery(client, shop.merchant, shop.application_id, config["id"], "DELIVERED")
    )
    assert [item["httpStatusCode"] for item in delivered["attemptLog"]] == [500, 500, 200]
    _, html = await page(console, path)
    assert '<span class="delivery-delivered"><span title="DELIVERED">Delivered</span></span>' in html


async def test_a_private_address_is_refused_with_a_field_error_and_nothing_is_created(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    from payorch.runtime import open_runtime

    application = await new_application(client, merchant)
    strict = settings.model_copy(
        update={"webhooks": settings.webhooks.model_copy(update={"allow_private_networks": False})}
    )
    async with open_runtime(strict, db) as runtime:
        console, csrf = await signed_in_browser(runtime.app, merchant.email)
        for url in ("https://127.0.0.1/hooks", "https://10.1.2.3/hooks", "https://localhost/hooks"):
            response, html = await submit(
                console,
                console_webhooks(application["id"]),
                {"csrf_token": csrf, "url": url, "subscribedEvents": ALL_EVENTS, "active": "true"},
            )
            assert response.status_code == 400, url
            assert 'id="url-error"' in html, url
            assert 'aria-invalid="true" aria-describedby="url-hint url-error"' in html, url
            assert f'value="{url}"' in html  # the form is shown again as sent
            assert "whsec_" not in html
    assert await configs_of(client, merchant, application["id"]) == []


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"url": "http://example.com/hooks", "subscribedEvents": ALL_EVENTS}, "url"),
        ({"url": "not a url", "subscribedEvents": ALL_EVENTS}, "url"),
        ({"url": "", "subscribedEvents": ALL_EVENTS}, "url"),
        ({"url": "https://example.com/hooks"}, "subscribedEvents"),
        ({"url": "https://example.com/hooks", "subscribedEvents": ["session.created"]}, "subscribedEvents"),
    ],
)
async def test_an_invalid_configuration_is_400_with_its_field_error_and_nothing_is_created(
    app: PayorchApp, client: Client, merchant: Merchant, form: dict[str, Any], field: str
) -> None:
    application = await new_application(client, merchant)
    console, csrf = await signed_in_browser(app, merchant.email)
    response, html = await submit(console, console_webhooks(application["id"]), {"csrf_token": csrf, **form})
    assert response.status_code == 400
    assert f'id="{field}-error"' in html
    assert f"{field}-hint {field}-error" in html
    assert await configs_of(client, merchant, application["id"]) == []


async def test_the_list_is_paginated(app: PayorchApp, client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    for index in range(21):
        await api_create(client, merchant, application["id"], f"https://127.0.0.1/hooks/{index}")
    console, _ = await signed_in_browser(app, merchant.email)
    path = console_webhooks(application["id"])
    _, first = await page(console, path)
    assert "21 configurations, newest first" in first
    assert "https://127.0.0.1/hooks/20<" in first and "https://127.0.0.1/hooks/0<" not in first
    assert f'href="{path}?page=2"' in first
    _, second = await page(console, f"{path}?page=2")
    assert "https://127.0.0.1/hooks/0<" in second and "https://127.0.0.1/hooks/20<" not in second


async def _victim_state(client: Client, shop: Shop, config: dict[str, Any], db: Database) -> tuple[Any, ...]:
    (listed,) = await configs_of(client, shop.merchant, shop.application_id)

    async def secrets(conn: Connection) -> Any:
        return await conn.fetch("SELECT secret, previous_secret FROM webhook_configs ORDER BY id")

    deliveries = await deliveries_of(client, shop.merchant, shop.application_id, config["id"])
    return (
        listed,
        [(item["status"], len(item["attemptLog"])) for item in deliveries],
        await db.autocommit(secrets),
    )


async def test_another_merchants_webhook_is_404_on_every_page_and_form_and_nothing_changes(
    app: PayorchApp, client: Client, db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    victim = await new_shop(client, db, settings)
    config, delivery = await failed_delivery(client, victim, webhook_receiver)
    before = await _victim_state(client, victim, config, db)
    attacker = await new_merchant(client, db, settings)
    own = await new_application(client, attacker, "Attacker's shop")
    console, csrf = await signed_in_browser(app, attacker.email)
    form = {
        "csrf_token": csrf,
        "url": "https://example.com/x",
        "subscribedEvents": ALL_EVENTS,
        "active": "false",
        "confirm": "yes",
    }
    for application_id in (victim.application_id, own["id"]):  # the victim's, and the attacker's own
        base = console_webhooks(application_id)
        for method, path in [
            ("GET", console_webhooks(application_id, config["id"])),
            *[("POST", form_path) for form_path in forms_of(application_id, config, delivery)],
        ] + ([("GET", base), ("POST", base)] if application_id == victim.application_id else []):
            response, text = await (submit(console, path, form) if method == "POST" else page(console, path))
            assert response.status_code == 404, (method, path, response.status_code, text)
            assert webhook_receiver.url not in text and config["keyFingerprint"] not in text, (method, path)
    assert await _victim_state(client, victim, config, db) == before
    assert len(webhook_receiver.requests) == 2  # the two failed attempts; no test, no retry
    assert await configs_of(client, attacker, own["id"]) == []


async def test_forms_without_the_csrf_token_are_403_and_change_nothing(
    app: PayorchApp, client: Client, db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    shop = await new_shop(client, db, settings)
    config, delivery = await failed_delivery(client, shop, webhook_receiver)
    before = await _victim_state(client, shop, config, db)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    base = console_webhooks(shop.application_id)
    for path in (base, *forms_of(shop.application_id, config, delivery)):
        for token in ({}, {"csrf_token": "forged"}):
            form = {
                **token,
                "url": "https://example.com/x",
                "subscribedEvents": ["refund.failed"],
                "active": "false",
                "confirm": "yes",
            }
            response, html = await submit(console, path, form)
            assert response.status_code == 403, path
            assert "whsec_" not in html
        pages = (base, console_webhooks(shop.application_id, config["id"]))
        assert (await console.get(path)).status_code == (200 if path in pages else 405), path
    assert await _victim_state(client, shop, config, db) == before
    assert len(webhook_receiver.requests) == 2


async def test_editing_the_url_and_events_changes_them_and_says_so(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    created = await api_create(client, merchant, application["id"], "https://127.0.0.1/old-hooks")
    console, csrf = await signed_in_browser(app, merchant.email)
    path = console_webhooks(application["id"], created["id"])
    _, html = await page(console, path)
    assert f'action="{path}"' in html
    assert 'value="https://127.0.0.1/old-hooks"' in html
    assert '<label for="url">URL</label>' in html

    response, _ = await submit(
        console,
        path,
        {"csrf_token": csrf, "url": "https://127.0.0.1/new-hooks", "subscribedEvents": ["refund.failed"]},
    )
    assert response.status_code == 303
    assert response.headers["Location"] == f"{path}?done=updated"
    status, config = await api_config(client, merchant, application["id"], created["id"])
    assert status == 200
    assert config["url"] == "https://127.0.0.1/new-hooks"
    assert config["subscribedEvents"] == ["refund.failed"]
    assert (config["isActive"], config["keyFingerprint"]) == (True, created["keyFingerprint"])
    _, html = await page(console, response.headers["Location"])
    assert '<div class="notice notice-success" role="status"><p>Saved' in html
    assert 'value="https://127.0.0.1/new-hooks"' in html
    assert 'value="refund.failed" checked' in html and 'value="session.completed" checked' not in html


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"url": "http://example.com/hooks", "subscribedEvents": ALL_EVENTS}, "url"),
        ({"url": "", "subscribedEvents": ALL_EVENTS}, "url"),
        ({"url": "https://127.0.0.1/new-hooks"}, "subscribedEvents"),
        ({"url": "https://127.0.0.1/new-hooks", "subscribedEvents": ["session.created"]}, "subscribedEvents"),
    ],
)
async def test_an_invalid_edit_is_400_with_its_field_error_and_nothing_changes(
    app: PayorchApp, client: Client, merchant: Merchant, form: dict[str, Any], field: str
) -> None:
    application = await new_application(client, merchant)
    created = await api_create(client, merchant, application["id"], "https://127.0.0.1/old-hooks")
    _, before = await api_config(client, merchant, application["id"], created["id"])
    console, csrf = await signed_in_browser(app, merchant.email)
    path = console_webhooks(application["id"], created["id"])
    response, html = await submit(console, path, {"csrf_token": csrf, **form})
    assert response.status_code == 400
    assert f'id="{field}-error"' in html
    assert f"{field}-hint {field}-error" in html
    assert f'value="{form["url"]}"' in html  # the form is shown again as sent
    assert await api_config(client, merchant, application["id"], created["id"]) == (200, before)


async def test_a_private_address_is_refused_on_edit_with_a_field_error_and_nothing_changes(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    from payorch.runtime import open_runtime

    application = await new_application(client, merchant)
    # Created where private addresses are allowed (the tests' default), then edited where they are not.
    created = await api_create(client, merchant, application["id"], "https://127.0.0.1/old-hooks")
    _, before = await api_config(client, merchant, application["id"], created["id"])
    strict = settings.model_copy(
        update={"webhooks": settings.webhooks.model_copy(update={"allow_private_networks": False})}
    )
    async with open_runtime(strict, db) as runtime:
        console, csrf = await signed_in_browser(runtime.app, merchant.email)
        path = console_webhooks(application["id"], created["id"])
        for url in ("https://127.0.0.1/hooks", "https://10.1.2.3/hooks", "https://localhost/hooks"):
            response, html = await submit(
                console, path, {"csrf_token": csrf, "url": url, "subscribedEvents": ["refund.failed"]}
            )
            assert response.status_code == 400, url
            assert 'id="url-error"' in html, url
            assert 'aria-invalid="true" aria-describedby="url-hint url-error"' in html, url
            assert f'value="{url}"' in html
            assert "Nothing was changed" in html
    assert await api_config(client, merchant, application["id"], created["id"]) == (200, before)


async def test_deleting_asks_to_confirm_then_the_configuration_is_gone(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    created = await api_create(client, merchant, application["id"], "https://127.0.0.1/doomed-hooks")
    console, csrf = await signed_in_browser(app, merchant.email)
    path = console_webhooks(application["id"], created["id"])
    _, html = await page(console, path)
    assert f'action="{path}/delete"' in html

    # Without `confirm=yes`: the question, and nothing deleted.
    for form in ({"csrf_token": csrf}, {"csrf_token": csrf, "confirm": "no"}):
        response, html = await submit(console, f"{path}/delete", form)
        assert response.status_code == 200
        assert "https://127.0.0.1/doomed-hooks" in html
        assert "marked Failed" in html and "webhook configuration deleted" in html
        assert '<button type="submit" name="confirm" value="yes"' in html
        assert f'action="{path}/delete"' in html
        assert (await api_config(client, merchant, application["id"], created["id"]))[0] == 200

    response, _ = await submit(console, f"{path}/delete", {"csrf_token": csrf, "confirm": "yes"})
    assert response.status_code == 303
    listed = console_webhooks(application["id"])
    assert response.headers["Location"] == f"{listed}?done=deleted"
    assert (await api_config(client, merchant, application["id"], created["id"]))[0] == 404
    assert await configs_of(client, merchant, application["id"]) == []
    _, html = await page(console, response.headers["Location"])
    assert '<div class="notice notice-success" role="status"><p>The webhook configuration was deleted' in html
    assert "doomed-hooks" not in html and "No webhook configurations yet." in html
    response, _ = await page(console, path)
    assert response.status_code == 404
