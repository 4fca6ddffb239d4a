"""The console's way through an application's first hour: each creation says what comes next, the
overview shows the steps while one remains, and a test payment is taken from the overview."""

from __future__ import annotations

import re
from typing import Any

from payorch.http.services import PayorchApp
from tests.console.helpers import page, signed_in_browser, submit
from tests.helpers import SANDBOX_KEY, Client, Merchant, link_sandbox, new_api_key, new_application

_TEST_KEY = re.compile(r'<input type="hidden" name="idempotency_key" value="([^"]+)">')


def next_step(html: str) -> str | None:
    """The step a page says comes next (`Next: <a>...</a>`), if any."""
    found = re.search(r'<span class="next-label">Next:</span> <a href="[^"]+">([^<]+)</a>', html)
    return found.group(1) if found else None


def steps(html: str) -> list[str]:
    """The overview's steps as they read: `Done: ...`, `Next: ...`, `Then: ...`."""
    (section,) = re.findall(r'<ol class="steps">(.*?)</ol>', html, re.DOTALL)
    items = re.findall(r"<li[^>]*>(.*?)</li>", section, re.DOTALL)
    return [
        re.sub(
            r"\s+", " ", re.sub(r"<[^>]+>", "", re.sub(r'<span class="hint">.*?</span>', "", item))
        ).strip()
        for item in items
    ]


async def sessions_of(client: Client, merchant: Merchant, application_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/v1/applications/{application_id}/sessions", headers=merchant.headers)
    items: list[dict[str, Any]] = (await response.get_json())["items"]
    return items


# --- What comes next ---------------------------------------------------------------------------


async def test_each_creation_says_what_comes_next_until_a_test_payment(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    console, csrf = await signed_in_browser(app, merchant.email)
    response, _ = await submit(console, "/console/applications", {"csrf_token": csrf, "name": "Web shop"})
    assert response.status_code == 303
    overview = response.headers["Location"].split("?")[0]
    application_id = overview.rsplit("/", 1)[1]

    # The application: its page says so, and that a key comes next.
    _, html = await page(console, response.headers["Location"])
    assert '<div class="notice notice-success" role="status"><p>The application is created.</p></div>' in html
    assert steps(html)[:2] == ["Done: Create an application", "Next: Create an API key"]
    assert f'<a href="{overview}#create-key">Create an API key</a>' in html

    # The key: the page showing it says a provider comes next.
    response, html = await submit(
        console, f"{overview}/api-keys", {"csrf_token": csrf, "description": "web shop server"}
    )
    assert response.status_code == 201
    assert next_step(html) == "Link a provider"
    assert f'<a href="{overview}/providers#link">Link a provider</a>' in html

    # The sandbox: the providers page says it is linked, and that a webhook endpoint comes next.
    fields = {"provider": "sandbox", "apiKey": SANDBOX_KEY, "paymentMethods": ["card"]}
    response, _ = await submit(console, f"{overview}/providers", {"csrf_token": csrf, **fields})
    assert response.status_code == 303
    _, html = await page(console, response.headers["Location"])
    assert "Sandbox (test mode) is linked." in html
    assert next_step(html) == "Add a webhook endpoint"

    # A webhook endpoint: the page with its secret says a test payment comes next.
    hook = {"url": "https://127.0.0.1/hooks", "subscribedEvents": ["session.completed"], "active": "true"}
    response, html = await submit(console, f"{overview}/webhooks", {"csrf_token": csrf, **hook})
    assert response.status_code == 201, html
    assert next_step(html) == "Try a test payment"
    assert f'<a href="{overview}#try">Try a test payment</a>' in html

    # The overview shows the way so far, the test payment next.
    _, html = await page(console, overview)
    assert steps(html) == [
        "Done: Create an application",
        "Done: Create an API key",
        "Done: Link a provider",
        "Done: Add a webhook endpoint",
        "Next: Try a test payment",
    ]

    # A test payment: every step is done, and the overview shows them no more.
    (key,) = _TEST_KEY.findall(html)
    response, _ = await submit(
        console, f"{overview}/test-payment", {"csrf_token": csrf, "idempotency_key": key}
    )
    assert response.status_code == 303
    _, html = await page(console, overview)
    assert "Getting started" not in html
    assert len(await sessions_of(client, merchant, application_id)) == 1


async def test_the_overview_shows_the_steps_in_order_whatever_was_done_first(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"])  # a provider before any key
    console, _ = await signed_in_browser(app, merchant.email)
    _, html = await page(console, f"/console/applications/{application['id']}")
    assert steps(html) == [
        "Done: Create an application",
        "Next: Create an API key",
        "Done: Link a provider",
        "Then: Add a webhook endpoint",
        "Then: Try a test payment",
    ]
    assert '<li class="step-next" aria-current="step">' in html
    assert "notice-success" not in html  # nothing was just done: no notice


async def test_a_revoked_key_is_not_a_step_done(app: PayorchApp, client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    revoked = await client.delete(
        f"/api/v1/applications/{application['id']}/api-keys/{key['id']}", headers=merchant.headers
    )
    assert revoked.status_code == 200
    console, _ = await signed_in_browser(app, merchant.email)
    _, html = await page(console, f"/console/applications/{application['id']}")
    assert steps(html)[1] == "Next: Create an API key"


# --- A test payment ----------------------------------------------------------------------------


async def test_a_test_payment_creates_one_session_and_opens_its_checkout_page(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"], methods=("blik", "card"))
    console, csrf = await signed_in_browser(app, merchant.email)
    overview = f"/console/applications/{application['id']}"
    _, html = await page(console, overview)
    assert "Creates a checkout session of 10.00 PLN by Card for this application" in html
    (key,) = _TEST_KEY.findall(html)
    response, _ = await submit(
        console, f"{overview}/test-payment", {"csrf_token": csrf, "idempotency_key": key}
    )
    assert response.status_code == 303
    (session,) = await sessions_of(client, merchant, application["id"])
    assert (session["amount"], session["currency"], session["paymentMethod"], session["status"]) == (
        10,
        "PLN",
        "card",
        "PENDING",
    )
    assert session["orderReference"] == f"console-test-{key[:12]}"
    # The sandbox's checkout page, in payorch itself: a path, on the host the console is on.
    location = response.headers["Location"]
    assert re.fullmatch(r"/sandbox/checkout/[^/?#]+", location), location
    checkout, checkout_html = await page(console, location)
    assert checkout.status_code == 200
    assert "10.00 PLN" in checkout_html
    assert f"console-test-{key[:12]}" in checkout_html


async def test_sending_the_same_test_payment_form_twice_opens_the_same_session(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"])
    console, csrf = await signed_in_browser(app, merchant.email)
    overview = f"/console/applications/{application['id']}"
    _, html = await page(console, overview)
    (key,) = _TEST_KEY.findall(html)
    form = {"csrf_token": csrf, "idempotency_key": key}
    first, _ = await submit(console, f"{overview}/test-payment", form)
    again, _ = await submit(console, f"{overview}/test-payment", form)
    assert first.status_code == again.status_code == 303
    assert first.headers["Location"] == again.headers["Location"]
    assert len(await sessions_of(client, merchant, application["id"])) == 1
    # The page rendered again is a new form: another session.
    _, html = await page(console, overview)
    (other,) = _TEST_KEY.findall(html)
    assert other != key
    response, _ = await submit(
        console, f"{overview}/test-payment", {"csrf_token": csrf, "idempotency_key": other}
    )
    assert response.status_code == 303
    assert len(await sessions_of(client, merchant, application["id"])) == 2


async def test_without_the_sandbox_there_is_no_test_payment_button_and_a_post_creates_nothing(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    console, csrf = await signed_in_browser(app, merchant.email)
    overview = f"/console/applications/{application['id']}"
    _, html = await page(console, overview)
    assert "/test-payment" not in html
    assert "Link the sandbox, with at least one payment method, to take a test payment from here" in html
    response, html = await submit(
        console, f"{overview}/test-payment", {"csrf_token": csrf, "idempotency_key": "k1"}
    )
    assert response.status_code == 409
    assert (
        '<p class="error" role="alert" id="test-payment-refused">No test payment: link the sandbox, with a '
        "payment method, to try a test payment.</p>"
    ) in html
    assert await sessions_of(client, merchant, application["id"]) == []


async def test_a_disabled_application_takes_no_test_payment(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"])
    await client.patch(
        f"/api/v1/applications/{application['id']}/status",
        json={"isEnabled": False},
        headers=merchant.headers,
    )
    console, csrf = await signed_in_browser(app, merchant.email)
    overview = f"/console/applications/{application['id']}"
    _, html = await page(console, overview)
    assert "A disabled application takes no payments: enable it to try one." in html
    assert "/test-payment" not in html
    response, html = await submit(
        console, f"{overview}/test-payment", {"csrf_token": csrf, "idempotency_key": "k1"}
    )
    assert response.status_code == 403
    assert "No test payment: the application is disabled" in html
    assert await sessions_of(client, merchant, application["id"]) == []


async def test_a_test_payment_form_without_its_key_or_csrf_token_creates_nothing(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"])
    console, csrf = await signed_in_browser(app, merchant.email)
    path = f"/console/applications/{application['id']}/test-payment"
    response, _ = await submit(console, path, {"csrf_token": csrf})
    assert response.status_code == 400
    response, _ = await submit(console, path, {"csrf_token": csrf, "idempotency_key": "k" * 256})
    assert response.status_code == 400
    response, _ = await submit(console, path, {"idempotency_key": "k1"})
    assert response.status_code == 403
    assert await sessions_of(client, merchant, application["id"]) == []
