"""The console's applications: list, create, enable and disable, through the API's own operations."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from payorch.config import LimitSettings, Settings
from payorch.http.services import PayorchApp
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from tests.console.helpers import page, signed_in
from tests.helpers import Client, Merchant, new_application, new_merchant

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


async def applications(client: Client, merchant: Merchant) -> list[dict[str, object]]:
    response = await client.get("/api/v1/applications", headers=merchant.headers)
    items: list[dict[str, object]] = (await response.get_json())["items"]
    return items


async def test_the_list_shows_the_merchants_applications_only(
    app: PayorchApp, client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    await new_application(client, merchant, "Web shop")
    other = await new_merchant(client, db, settings)
    await new_application(client, other, "Not yours")
    console = app.test_client()
    await signed_in(console, merchant.email)
    response, html = await page(console, "/console/applications")
    assert response.status_code == 200
    assert "Web shop" in html
    assert "Not yours" not in html


async def test_create_an_application(app: PayorchApp, client: Client, merchant: Merchant) -> None:
    console = app.test_client()
    csrf = await signed_in(console, merchant.email)
    response = await console.post(
        "/console/applications",
        form={"csrf_token": csrf, "name": "  Web shop ", "description": '{"channel": "web", "weight": 1.50}'},
    )
    assert response.status_code == 303
    (created,) = await applications(client, merchant)
    assert created["name"] == "Web shop"
    assert created["description"] == {"channel": "web", "weight": 1.50}
    assert created["isEnabled"] is True
    assert response.headers["Location"] == f"/console/applications/{created['id']}?done=created"
    detail, html = await page(console, response.headers["Location"])
    assert detail.status_code == 200
    assert "Web shop" in html
    assert "<dt>channel</dt><dd>web</dd>" not in html  # not all texts: shown as its JSON
    assert "&#34;weight&#34;: 1.50" in html


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"name": "  "}, "name"),
        ({"name": "n" * 101}, "name"),
        ({"name": "ok", "description": "{not json"}, "description"),
        ({"name": "ok", "description": '{"a": 1} and more'}, "description"),
        ({"name": "bad\x00name"}, "name"),
    ],
)
async def test_an_invalid_application_shows_the_form_again_with_the_message_next_to_the_field(
    app: PayorchApp, client: Client, merchant: Merchant, form: dict[str, str], field: str
) -> None:
    console = app.test_client()
    csrf = await signed_in(console, merchant.email)
    response = await console.post("/console/applications", form={"csrf_token": csrf, **form})
    assert response.status_code == 400
    html = await response.get_data(as_text=True)
    assert f'id="{field}-error"' in html
    assert 'aria-invalid="true"' in html
    assert await applications(client, merchant) == []


@pytest.mark.parametrize("token", [None, "", "0" * 64])
async def test_a_form_without_the_sessions_csrf_token_is_403_and_changes_nothing(
    app: PayorchApp, client: Client, merchant: Merchant, token: str | None
) -> None:
    console = app.test_client()
    await signed_in(console, merchant.email)
    form = {"name": "Forged"} if token is None else {"csrf_token": token, "name": "Forged"}
    response = await console.post("/console/applications", form=form)
    assert response.status_code == 403
    assert await applications(client, merchant) == []


async def test_another_sessions_csrf_token_is_refused(
    app: PayorchApp, client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    other = await new_merchant(client, db, settings)
    their_csrf = await signed_in(app.test_client(), other.email)
    console = app.test_client()
    await signed_in(console, merchant.email)
    response = await console.post("/console/applications", form={"csrf_token": their_csrf, "name": "Forged"})
    assert response.status_code == 403
    assert await applications(client, merchant) == []


async def test_disable_and_enable_an_application(app: PayorchApp, client: Client, merchant: Merchant) -> None:
    created = await new_application(client, merchant)
    console = app.test_client()
    csrf = await signed_in(console, merchant.email)
    path = f"/console/applications/{created['id']}/status"
    response = await console.post(path, form={"csrf_token": csrf, "enabled": "false", "confirm": "yes"})
    assert response.status_code == 303
    assert response.headers["Location"] == "/console/applications?done=disabled"
    assert (await applications(client, merchant))[0]["isEnabled"] is False
    _, html = await page(console, response.headers["Location"])
    assert "Disabled" in html
    assert "The application is disabled: its API keys are refused" in html
    response = await console.post(path, form={"csrf_token": csrf, "enabled": "true", "back": "application"})
    assert response.status_code == 303
    assert response.headers["Location"] == f"/console/applications/{created['id']}?done=enabled"
    assert (await applications(client, merchant))[0]["isEnabled"] is True


async def test_disabling_asks_first_and_changes_nothing_until_confirmed(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    created = await new_application(client, merchant, "Web shop")
    console = app.test_client()
    csrf = await signed_in(console, merchant.email)
    path = f"/console/applications/{created['id']}/status"
    response = await console.post(path, form={"csrf_token": csrf, "enabled": "false", "back": "application"})
    assert response.status_code == 200
    html = await response.get_data(as_text=True)
    assert "<h1>Disable Web shop?</h1>" in html
    assert "Every request made with its API keys is refused (403)" in html
    assert '<button type="submit" name="confirm" value="yes" class="danger">Disable it</button>' in html
    assert '<input type="hidden" name="back" value="application">' in html
    assert f'<a href="/console/applications/{created["id"]}">Cancel: keep it enabled</a>' in html
    assert (await applications(client, merchant))[0]["isEnabled"] is True
    confirmed = {"csrf_token": csrf, "enabled": "false", "back": "application", "confirm": "yes"}
    response = await console.post(path, form=confirmed)
    assert response.status_code == 303
    assert response.headers["Location"] == f"/console/applications/{created['id']}?done=disabled"
    assert (await applications(client, merchant))[0]["isEnabled"] is False


async def test_the_disable_buttons_say_that_a_confirmation_follows(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    created = await new_application(client, merchant, "Web shop")
    console = app.test_client()
    await signed_in(console, merchant.email)
    _, html = await page(console, "/console/applications")
    assert 'Disable…<span class="hint"> Web shop</span>' in html
    _, html = await page(console, f"/console/applications/{created['id']}")
    assert "Disable this application…</button>" in html


async def test_setting_the_status_it_already_has_is_409_as_in_the_api(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    created = await new_application(client, merchant)
    console = app.test_client()
    csrf = await signed_in(console, merchant.email)
    response = await console.post(
        f"/console/applications/{created['id']}/status", form={"csrf_token": csrf, "enabled": "true"}
    )
    assert response.status_code == 409


async def test_disable_without_the_csrf_token_is_403_and_changes_nothing(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    created = await new_application(client, merchant)
    console = app.test_client()
    await signed_in(console, merchant.email)
    response = await console.post(f"/console/applications/{created['id']}/status", form={"enabled": "false"})
    assert response.status_code == 403
    assert (await applications(client, merchant))[0]["isEnabled"] is True


async def test_another_merchants_application_is_404_and_cannot_be_changed(
    app: PayorchApp, client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    other = await new_merchant(client, db, settings)
    theirs = await new_application(client, other, "Theirs")
    console = app.test_client()
    csrf = await signed_in(console, merchant.email)
    response, html = await page(console, f"/console/applications/{theirs['id']}")
    assert response.status_code == 404
    assert "Theirs" not in html
    response = await console.post(
        f"/console/applications/{theirs['id']}/status", form={"csrf_token": csrf, "enabled": "false"}
    )
    assert response.status_code == 404
    response = await console.post(
        f"/console/applications/{theirs['id']}/api-keys", form={"csrf_token": csrf, "description": "x"}
    )
    assert response.status_code == 404
    assert (await applications(client, other))[0]["isEnabled"] is True
    keys = await client.get(f"/api/v1/applications/{theirs['id']}/api-keys", headers=other.headers)
    assert (await keys.get_json())["totalItems"] == 0


async def test_an_unknown_application_is_404(app: PayorchApp, merchant: Merchant) -> None:
    console = app.test_client()
    await signed_in(console, merchant.email)
    for path in (
        "/console/applications/not-a-uuid",
        "/console/applications/00000000-0000-4000-8000-000000000000",
    ):
        assert (await console.get(path)).status_code == 404


async def test_console_pages_carry_a_strict_content_security_policy(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    created = await new_application(client, merchant)
    console = app.test_client()
    for path in ("/console/sign-in",):
        response = await console.get(path)
        assert response.headers["Content-Security-Policy"] == CSP
    await signed_in(console, merchant.email)
    for path in (
        "/console/applications",
        f"/console/applications/{created['id']}",
        "/console/applications/x",
    ):
        response, html = await page(console, path)
        assert response.headers["Content-Security-Policy"] == CSP
        assert response.headers["Cache-Control"] == "no-store"
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert "<style" not in html
        assert "style=" not in html
        assert "<script>" not in html  # the one script is payorch's own file
        assert "http://" not in html and "https://" not in html  # no outside asset


async def test_the_console_serves_its_own_style_sheet_and_script(app: PayorchApp) -> None:
    console = app.test_client()
    _, html = await page(console, "/console/sign-in")
    assert '<link rel="stylesheet" href="/console/static/console.css">' in html
    assert '<script src="/console/static/console.js" defer></script>' in html
    css = await console.get("/console/static/console.css")
    assert css.status_code == 200
    assert css.mimetype == "text/css"
    script = await console.get("/console/static/console.js")
    assert script.status_code == 200
    assert "javascript" in script.mimetype
    assert script.headers["X-Content-Type-Options"] == "nosniff"


async def test_every_form_field_has_a_label(app: PayorchApp, client: Client, merchant: Merchant) -> None:
    created = await new_application(client, merchant)
    console = app.test_client()
    await signed_in(console, merchant.email)
    for path in ("/console/sign-in", "/console/applications", f"/console/applications/{created['id']}"):
        _, html = await page(console, path)
        for field in re.findall(r"<(?:input|textarea)\b[^>]*>", html):
            if 'type="hidden"' in field:
                continue
            (field_id,) = re.findall(r'id="([^"]+)"', field)
            assert f'<label for="{field_id}">' in html, (path, field)


@pytest.fixture
async def limited_app(settings: Settings, db: Database) -> AsyncIterator[PayorchApp]:
    """An app whose credential buckets hold 3 requests."""
    limits = LimitSettings(requests_per_second=0.1, burst=3)
    async with open_runtime(settings.model_copy(update={"limits": limits}), db) as runtime:
        yield runtime.app


async def test_console_requests_spend_the_merchants_bucket_shared_with_the_api(
    limited_app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    console = limited_app.test_client()
    await signed_in(console, merchant.email)  # signing in spends the login buckets; then one page
    assert (await console.get("/console/applications")).status_code == 200
    api = await console.get("/api/v1/applications", headers=merchant.headers)
    assert api.status_code == 200
    refused = await console.get("/console/applications")
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.headers["Content-Security-Policy"] == CSP
    assert (await console.get("/api/v1/applications", headers=merchant.headers)).status_code == 429
