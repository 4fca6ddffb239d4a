"""PayU in the console's provider form: a field for each of the POS's credentials with its form, a
refusal shown next to the field PayU's answer names, and only the fingerprint shown afterwards."""

from __future__ import annotations

import re

import pytest

from payorch.config import Settings
from payorch.runtime import Runtime
from payorch.storage.database import Database
from tests import fake_payu as payu_fake
from tests.console.helpers import page, signed_in_browser, submit
from tests.fake_payu import FakePayu
from tests.helpers import Client, new_application, new_merchant
from tests.providers.payu_support import CLIENT_SECRET, CREDENTIALS, POS_ID, SECOND_KEY, payu_settings

fake_payu = payu_fake.fake_payu


@pytest.fixture
def settings(settings: Settings, fake_payu: FakePayu) -> Settings:
    fake_payu.accept_pos(POS_ID, POS_ID, CLIENT_SECRET, SECOND_KEY)
    return payu_settings(settings, fake_payu)


def _hint(html: str, form: str, field: str) -> str:
    found = re.search(rf'<p class="hint" id="{form}-{field}-hint">([^<]*)</p>', html)
    assert found, html
    return found.group(1)


async def test_the_payu_form_asks_for_each_credential_with_its_form_and_links_the_pos(
    client: Client, db: Database, settings: Settings, runtime: Runtime, fake_payu: FakePayu
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    path = f"/console/applications/{application['id']}/providers"
    console, csrf = await signed_in_browser(runtime.app, merchant.email)
    _, html = await page(console, path)
    assert _hint(html, "link-payu", "posId").startswith("The POS id (pos_id)")
    assert _hint(html, "link-payu", "clientSecret").startswith("OAuth client_secret of the same POS: 32 hex")
    assert _hint(html, "link-payu", "secondKey").startswith("Second key (MD5) of the same POS")
    assert 'id="link-payu-environment" name="environment"' in html
    assert 'id="link-payu-apiKey"' not in html
    form = {"csrf_token": csrf, "provider": "payu", "paymentMethods": ["blik"], **CREDENTIALS}
    response, html = await submit(console, path, {**form, "clientSecret": "1" * 32})
    assert response.status_code == 400
    assert re.search(r'id="link-payu-clientSecret-error">PayU refused the client id and secret ', html)
    assert "1" * 32 not in html
    response, _ = await submit(console, path, form)
    assert response.status_code == 303
    _, html = await page(console, response.headers["Location"])
    assert f"pos {POS_ID}...{CLIENT_SECRET[-4:]}" in html
    for secret in (CLIENT_SECRET, SECOND_KEY):
        assert secret not in html
    assert 'id="key-payu-clientSecret"' in html
