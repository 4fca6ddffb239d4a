"""The console's API keys: created and shown once, listed by prefix, revoked."""

from __future__ import annotations

import re

from payorch.http.services import PayorchApp
from tests.console.helpers import page, signed_in
from tests.helpers import Client, Merchant, new_api_key, new_application

_SHOWN_KEY = re.compile(r'<code class="key" id="new-key"[^>]*>([^<]+)</code>')


async def key_works(client: Client, key: str) -> bool:
    """Whether the API accepts `key` (an unknown session: 404 once the key is accepted, 401 if not)."""
    response = await client.get(
        "/api/v1/sessions/00000000-0000-4000-8000-000000000000", headers={"X-API-Key": key}
    )
    assert response.status_code in (401, 404), await response.get_data(as_text=True)
    return response.status_code == 404


async def keys_of(client: Client, merchant: Merchant, application_id: str) -> list[dict[str, object]]:
    response = await client.get(f"/api/v1/applications/{application_id}/api-keys", headers=merchant.headers)
    items: list[dict[str, object]] = (await response.get_json())["items"]
    return items


async def test_a_new_key_is_shown_once_with_a_copy_button_and_then_only_by_prefix(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    console = app.test_client()
    csrf = await signed_in(console, merchant.email)
    response = await console.post(
        f"/console/applications/{application['id']}/api-keys",
        form={"csrf_token": csrf, "description": "web shop server"},
    )
    assert response.status_code == 201
    assert response.headers["Cache-Control"] == "no-store"
    html = await response.get_data(as_text=True)
    found = _SHOWN_KEY.search(html)
    assert found is not None, html
    key = found.group(1)
    assert 'data-copy="new-key"' in html
    # A warning, not a success: announced at once (an alert), styled apart.
    assert '<div class="notice notice-warning" role="alert"><p>This is the only time the key is shown' in html
    # The key works on the API.
    assert await key_works(client, key)
    (listed,) = await keys_of(client, merchant, application["id"])
    assert listed["description"] == "web shop server"
    # The application's page lists it by prefix, never in full.
    _, html = await page(console, f"/console/applications/{application['id']}")
    assert key not in html
    assert str(listed["keyPrefix"]) in html
    assert key[: len(str(listed["keyPrefix"]))] == listed["keyPrefix"]
    _, html = await page(console, "/console/applications")
    assert key not in html


async def test_a_key_description_over_255_characters_is_400_and_creates_nothing(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    console = app.test_client()
    csrf = await signed_in(console, merchant.email)
    response = await console.post(
        f"/console/applications/{application['id']}/api-keys",
        form={"csrf_token": csrf, "description": "d" * 256},
    )
    assert response.status_code == 400
    assert 'id="description-error"' in await response.get_data(as_text=True)
    assert await keys_of(client, merchant, application["id"]) == []


async def test_creating_a_key_without_the_csrf_token_is_403_and_creates_nothing(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    console = app.test_client()
    await signed_in(console, merchant.email)
    response = await console.post(
        f"/console/applications/{application['id']}/api-keys", form={"description": "x"}
    )
    assert response.status_code == 403
    assert await keys_of(client, merchant, application["id"]) == []


async def test_revoke_a_key(app: PayorchApp, client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    kept = await new_api_key(client, merchant, application["id"])
    console = app.test_client()
    csrf = await signed_in(console, merchant.email)
    response = await console.post(
        f"/console/applications/{application['id']}/api-keys/{key['id']}/revoke", form={"csrf_token": csrf}
    )
    assert response.status_code == 303
    assert response.headers["Location"] == f"/console/applications/{application['id']}"
    assert not await key_works(client, key["key"])
    assert await key_works(client, kept["key"])
    _, html = await page(console, response.headers["Location"])
    assert "Revoked" in html


async def test_revoking_without_the_csrf_token_is_403_and_the_key_keeps_working(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    console = app.test_client()
    await signed_in(console, merchant.email)
    response = await console.post(
        f"/console/applications/{application['id']}/api-keys/{key['id']}/revoke", form={"csrf_token": "nope"}
    )
    assert response.status_code == 403
    assert await key_works(client, key["key"])


async def test_revoking_a_key_of_another_application_is_404(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    first = await new_application(client, merchant, "first")
    second = await new_application(client, merchant, "second")
    key = await new_api_key(client, merchant, first["id"])
    console = app.test_client()
    csrf = await signed_in(console, merchant.email)
    response = await console.post(
        f"/console/applications/{second['id']}/api-keys/{key['id']}/revoke", form={"csrf_token": csrf}
    )
    assert response.status_code == 404
    assert await key_works(client, key["key"])


async def test_state_changes_are_never_gets(app: PayorchApp, client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    console = app.test_client()
    await signed_in(console, merchant.email)
    for path in (
        "/console/sign-out",
        f"/console/applications/{application['id']}/status",
        f"/console/applications/{application['id']}/api-keys",
        f"/console/applications/{application['id']}/api-keys/{key['id']}/revoke",
    ):
        assert (await console.get(path)).status_code == 405, path
    assert await key_works(client, key["key"])
