"""The console's providers of an application: linking one the catalogue offers, changing its payment
methods and replacing its key, through the API's own operations; only the key's fingerprint is shown."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from payorch.config import ProviderSettings, Settings, StripeSettings
from payorch.http.services import PayorchApp
from payorch.providers.base import Credentials, CredentialsRejected
from payorch.providers.mollie.adapter import MollieProvider
from payorch.providers.sandbox.adapter import SandboxProvider, sandbox_account
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from tests.console.helpers import page, signed_in_browser, submit
from tests.fake_stripe import FakeStripe, ScriptedFailure, open_fake_stripe
from tests.helpers import Client, Merchant, link_sandbox, new_application, new_merchant

# The SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

KEY = "sk_sandbox_console_SECRETMIDDLE_4321"
FINGERPRINT = "sk_sandb...4321"
NEW_KEY = "sk_sandbox_renewed_OTHERMIDDLE_8765"
NEW_FINGERPRINT = "sk_sandb...8765"
STRIPE_KEY = "sk_test_51ConsoleShopKey0123456789"


async def configs(client: Client, merchant: Merchant, application_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/v1/applications/{application_id}/providers", headers=merchant.headers)
    assert response.status_code == 200
    items: list[dict[str, Any]] = (await response.get_json())["items"]
    return items


Fields = dict[str, str | list[str]]


def providers_path(application: dict[str, Any], form: str = "") -> str:
    """The address of the application's providers page (where the link form posts), or of its `form`
    (`payment-methods`, `api-key`)."""
    path = f"/console/applications/{application['id']}/providers"
    return f"{path}/{form}" if form else path


def link_form(csrf: str | None, provider: str, api_key: str, *methods: str) -> Fields:
    form: Fields = {"provider": provider, "apiKey": api_key, "paymentMethods": list(methods)}
    return {**form, "csrf_token": csrf} if csrf is not None else form


def assert_key_hidden(html: str, *keys: str) -> None:
    for key in keys:
        assert key not in html
        assert key[8:-4] not in html  # not even the part the fingerprint leaves out


def checked(html: str, where: str) -> set[str]:
    """The payment methods ticked in the form `where` (`link-sandbox`, `methods-sandbox`)."""
    found = re.findall(rf'<input type="checkbox" id="{where}-method-(\w+)"([^>]*)>', html)
    return {method for method, rest in found if " checked" in rest}


async def test_linking_the_sandbox_shows_its_fingerprint_and_never_the_key(
    app: PayorchApp, client: Client, merchant: Merchant, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    application = await new_application(client, merchant)
    path = providers_path(application)
    console, csrf = await signed_in_browser(app, merchant.email)
    _, overview = await page(console, f"/console/applications/{application['id']}")
    assert f'href="{path}"' in overview  # the application's navigation leads here
    response, html = await page(console, path)
    assert response.status_code == 200
    assert "No provider is linked yet" in html
    # The sandbox is offered with the methods the catalogue gives it, its key in a password field.
    assert re.search(
        r'<input type="password" id="link-sandbox-apiKey" name="apiKey" value="" autocomplete="off"', html
    )
    assert '<label for="link-sandbox-apiKey">' in html
    assert re.findall(r'id="link-sandbox-method-(\w+)"', html) == ["apple_pay", "blik", "card"]

    response, html = await submit(console, path, link_form(csrf, "sandbox", KEY, "card", "blik"))
    assert response.status_code == 303, html
    assert response.headers["Location"] == f"{path}?done=linked&provider=sandbox"
    (linked,) = await configs(client, merchant, application["id"])
    assert (linked["provider"], linked["paymentMethods"], linked["keyFingerprint"]) == (
        "sandbox",
        ["card", "blik"],
        FINGERPRINT,
    )
    response, html = await page(console, response.headers["Location"])
    assert response.status_code == 200
    assert "Sandbox (test mode) is linked." in html
    assert f'<code class="fingerprint">{FINGERPRINT}</code>' in html
    assert '<span title="card">Card</span>, <span title="blik">BLIK</span>' in html
    assert_key_hidden(html, KEY)
    assert checked(html, "methods-sandbox") == {"card", "blik"}
    assert 'id="link-sandbox-apiKey"' not in html  # linked: no form to link it again
    assert "Every provider this deployment offers is linked" in html
    assert caplog.records  # the requests were logged, and the key nowhere in the log
    assert_key_hidden("\n".join(f"{record.getMessage()} {record.__dict__}" for record in caplog.records), KEY)


async def test_change_the_payment_methods(app: PayorchApp, client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"], ("card", "blik"))
    path = providers_path(application)
    console, csrf = await signed_in_browser(app, merchant.email)
    response, _ = await submit(
        console,
        f"{path}/payment-methods",
        {"csrf_token": csrf, "provider": "sandbox", "paymentMethods": ["apple_pay", "card"]},
    )
    assert response.status_code == 303
    assert response.headers["Location"] == f"{path}?done=methods&provider=sandbox"
    (linked,) = await configs(client, merchant, application["id"])
    assert linked["paymentMethods"] == ["apple_pay", "card"]
    _, html = await page(console, response.headers["Location"])
    assert "The payment methods of Sandbox (test mode) are saved." in html
    assert checked(html, "methods-sandbox") == {"apple_pay", "card"}


async def test_unticking_every_method_is_400_with_the_message_next_to_the_methods(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"], ("card", "blik"))
    console, csrf = await signed_in_browser(app, merchant.email)
    response, html = await submit(
        console, providers_path(application, "payment-methods"), {"csrf_token": csrf, "provider": "sandbox"}
    )
    assert response.status_code == 400
    assert 'id="methods-sandbox-paymentMethods-error"' in html
    assert 'aria-invalid="true" aria-describedby="methods-sandbox-paymentMethods-error"' in html
    assert checked(html, "methods-sandbox") == set()  # the form as it was sent
    assert (await configs(client, merchant, application["id"]))[0]["paymentMethods"] == ["card", "blik"]


async def test_a_method_the_provider_does_not_offer_is_refused_as_the_api_refuses_it_and_keeps_the_list(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    await link_sandbox(client, merchant, application["id"], ("card",))
    console, csrf = await signed_in_browser(app, merchant.email)
    response, html = await submit(
        console,
        providers_path(application, "payment-methods"),
        {"csrf_token": csrf, "provider": "sandbox", "paymentMethods": ["card", "paypal"]},
    )
    assert response.status_code == 422
    assert re.search(r'id="methods-sandbox-paymentMethods-error">sandbox does not offer paypal', html)
    assert (await configs(client, merchant, application["id"]))[0]["paymentMethods"] == ["card"]


async def test_linking_a_method_the_provider_does_not_offer_shows_the_form_again_and_links_nothing(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    console, csrf = await signed_in_browser(app, merchant.email)
    response, html = await submit(
        console, providers_path(application), link_form(csrf, "sandbox", KEY, "card", "paypal")
    )
    # The API's answer to the same request: 422, the methods the provider offers named.
    assert response.status_code == 422
    assert re.search(r'id="link-sandbox-paymentMethods-error">sandbox does not offer paypal; it offers', html)
    assert 'aria-invalid="true" aria-describedby="link-sandbox-paymentMethods-error"' in html
    assert checked(html, "link-sandbox") == {"card"}  # what was ticked among the sandbox's methods
    assert 'id="link-sandbox-apiKey" name="apiKey" value=""' in html
    assert_key_hidden(html, KEY)
    assert await configs(client, merchant, application["id"]) == []


@pytest.mark.parametrize(
    ("methods", "api_key", "field"),
    [((), KEY, "paymentMethods"), (("card",), "", "apiKey"), (("card",), "k" * 501, "apiKey")],
)
async def test_an_invalid_link_form_is_400_with_the_message_next_to_the_field_and_links_nothing(
    app: PayorchApp,
    client: Client,
    merchant: Merchant,
    methods: tuple[str, ...],
    api_key: str,
    field: str,
) -> None:
    application = await new_application(client, merchant)
    console, csrf = await signed_in_browser(app, merchant.email)
    response, html = await submit(
        console, providers_path(application), link_form(csrf, "sandbox", api_key, *methods)
    )
    assert response.status_code == 400
    assert f'id="link-sandbox-{field}-error"' in html
    assert 'aria-invalid="true"' in html
    assert await configs(client, merchant, application["id"]) == []


async def test_a_key_the_provider_refuses_is_422_with_its_message_and_an_empty_key_field(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    console, csrf = await signed_in_browser(app, merchant.email)
    refused = "pk_not_a_sandbox_key_REFUSEDPART_0000"
    response, html = await submit(
        console, providers_path(application), link_form(csrf, "sandbox", refused, "card", "blik")
    )
    assert response.status_code == 422
    assert re.search(r'id="link-sandbox-apiKey-error">sandbox rejected the API key: ', html)
    assert (
        'value="" autocomplete="off" spellcheck="false" maxlength="500" required aria-invalid="true"' in html
    )
    assert_key_hidden(html, refused)
    assert checked(html, "link-sandbox") == {"card", "blik"}
    assert await configs(client, merchant, application["id"]) == []


async def test_linking_a_provider_already_linked_is_409_and_changes_nothing(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    before = await link_sandbox(client, merchant, application["id"], ("card",))
    console, csrf = await signed_in_browser(app, merchant.email)
    response, html = await submit(
        console, providers_path(application), link_form(csrf, "sandbox", KEY, "blik")
    )
    assert response.status_code == 409
    assert re.search(r'role="alert">provider \S+sandbox\S+ is already linked to this application', html)
    assert_key_hidden(html, KEY)
    assert await configs(client, merchant, application["id"]) == [before]


async def test_replacing_the_key_shows_the_new_fingerprint_only(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    console, csrf = await signed_in_browser(app, merchant.email)
    path = providers_path(application)
    response, _ = await submit(console, path, link_form(csrf, "sandbox", KEY, "card"))
    assert response.status_code == 303
    response, _ = await submit(
        console, f"{path}/api-key", {"csrf_token": csrf, "provider": "sandbox", "apiKey": NEW_KEY}
    )
    assert response.status_code == 303
    assert response.headers["Location"] == f"{path}?done=key&provider=sandbox"
    (linked,) = await configs(client, merchant, application["id"])
    assert linked["keyFingerprint"] == NEW_FINGERPRINT
    _, html = await page(console, response.headers["Location"])
    assert (
        f"The API key of Sandbox (test mode) is replaced: its fingerprint is now {NEW_FINGERPRINT}." in html
    )
    assert f'<code class="fingerprint">{NEW_FINGERPRINT}</code>' in html
    assert FINGERPRINT not in html
    assert_key_hidden(html, KEY, NEW_KEY)
    assert re.search(
        r'<input type="password" id="key-sandbox-apiKey" name="apiKey" value="" autocomplete="off"', html
    )


async def test_a_refused_replacement_key_is_422_and_the_old_key_stays(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    before = await link_sandbox(client, merchant, application["id"])
    console, csrf = await signed_in_browser(app, merchant.email)
    refused = "pk_refused_replacement_MIDDLEPART_1111"
    response, html = await submit(
        console,
        providers_path(application, "api-key"),
        {"csrf_token": csrf, "provider": "sandbox", "apiKey": refused},
    )
    assert response.status_code == 422
    assert 'id="key-sandbox-apiKey-error"' in html
    assert_key_hidden(html, refused)
    assert await configs(client, merchant, application["id"]) == [before]


async def test_changing_a_provider_not_linked_is_404_and_changes_nothing(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    console, csrf = await signed_in_browser(app, merchant.email)
    for action, field in (("payment-methods", {"paymentMethods": "card"}), ("api-key", {"apiKey": KEY})):
        response, html = await submit(
            console, providers_path(application, action), {"csrf_token": csrf, "provider": "sandbox", **field}
        )
        assert response.status_code == 404
        assert "provider &#39;sandbox&#39; is not linked to this application" in html
    assert await configs(client, merchant, application["id"]) == []


async def test_another_merchants_application_is_404_and_nothing_is_linked_or_changed(
    app: PayorchApp, client: Client, db: Database, settings: Settings
) -> None:
    victim = await new_merchant(client, db, settings)
    unlinked = await new_application(client, victim, "Victim's new shop")
    linked_app = await new_application(client, victim, "Victim's shop")
    linked = await link_sandbox(client, victim, linked_app["id"], ("card",))
    attacker = await new_merchant(client, db, settings)
    console, csrf = await signed_in_browser(app, attacker.email)
    attempts: list[tuple[str, Fields | None]] = [
        (providers_path(linked_app), None),
        (providers_path(unlinked), link_form(csrf, "sandbox", KEY, "card")),
        (
            providers_path(linked_app, "payment-methods"),
            {"csrf_token": csrf, "provider": "sandbox", "paymentMethods": ["blik"]},
        ),
        (providers_path(linked_app, "api-key"), {"csrf_token": csrf, "provider": "sandbox", "apiKey": KEY}),
    ]
    for path, form in attempts:
        response, text = await (page(console, path) if form is None else submit(console, path, form))
        assert response.status_code == 404, (path, text)
        assert "Victim" not in text and linked["keyFingerprint"] not in text
    assert await configs(client, victim, unlinked["id"]) == []
    assert await configs(client, victim, linked_app["id"]) == [linked]


async def test_forms_without_the_csrf_token_are_403_and_change_nothing(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    unlinked = await new_application(client, merchant, "New shop")
    linked_app = await new_application(client, merchant, "Shop")
    linked = await link_sandbox(client, merchant, linked_app["id"], ("card",))
    console, _ = await signed_in_browser(app, merchant.email)
    attempts = [
        (providers_path(unlinked), link_form(None, "sandbox", KEY, "card")),
        (providers_path(linked_app, "payment-methods"), {"provider": "sandbox", "paymentMethods": ["blik"]}),
        (
            providers_path(linked_app, "api-key"),
            {"provider": "sandbox", "apiKey": KEY, "csrf_token": "forged"},
        ),
    ]
    for path, form in attempts:
        response, _ = await submit(console, path, form)
        assert response.status_code == 403, path
    assert await configs(client, merchant, unlinked["id"]) == []
    assert await configs(client, merchant, linked_app["id"]) == [linked]


async def test_provider_forms_are_never_gets(app: PayorchApp, client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    console, _ = await signed_in_browser(app, merchant.email)
    for action in ("payment-methods", "api-key"):
        path = providers_path(application, action)
        assert (await console.get(path)).status_code == 405, path


# --- With Stripe in the catalogue (a fake Stripe on loopback) ---------------------------------------


@asynccontextmanager
async def stripe_console(
    db: Database, settings: Settings
) -> AsyncIterator[tuple[FakeStripe, PayorchApp, Merchant]]:
    """payorch with Stripe enabled (its API at a fake that accepts STRIPE_KEY), and a merchant."""
    async with open_fake_stripe() as fake:
        fake.accept_key(STRIPE_KEY)
        with_stripe = settings.model_copy(
            update={"providers": ProviderSettings(stripe=StripeSettings(enabled=True, api_base=fake.url))}
        )
        async with open_runtime(with_stripe, db) as runtime:
            client = runtime.app.test_client()
            yield fake, runtime.app, await new_merchant(client, db, with_stripe)


async def test_the_link_forms_are_the_catalogues_and_stripe_refusing_a_key_is_shown_as_the_api_answers(
    db: Database, settings: Settings
) -> None:
    async with stripe_console(db, settings) as (fake, app, merchant):
        client = app.test_client()
        application = await new_application(client, merchant)
        path = providers_path(application)
        catalogue = (await (await client.get("/api/v1/providers", headers=merchant.headers)).get_json())[
            "items"
        ]
        console, csrf = await signed_in_browser(app, merchant.email)
        _, html = await page(console, path)
        for entry in catalogue:
            assert f'<h3 id="link-{entry["name"]}-title">{entry["displayName"]}</h3>' in html
            assert re.findall(rf'id="link-{entry["name"]}-method-(\w+)"', html) == entry["paymentMethods"]
        refused = "sk_test_51RefusedByStripe_MIDDLE_9999"
        response, html = await submit(console, path, link_form(csrf, "stripe", refused, "card"))
        assert response.status_code == 422
        assert re.search(r'id="link-stripe-apiKey-error">stripe rejected the API key: ', html)
        assert_key_hidden(html, refused)
        assert await configs(client, merchant, application["id"]) == []
        response, _ = await submit(console, path, link_form(csrf, "stripe", STRIPE_KEY, "card", "blik"))
        assert response.status_code == 303
        _, html = await page(console, response.headers["Location"])
        assert "sk_test_...6789" in html
        assert_key_hidden(html, STRIPE_KEY)
        assert fake.requests_to("GET", "/v1/balance")


def key_hint(html: str, form: str) -> str:
    """The hint under the key field of the form `form` (`link-sandbox`, `key-stripe`)."""
    found = re.search(rf'<p class="hint" id="{form}-apiKey-hint">([^<]*)</p>', html)
    assert found, html
    return found.group(1)


async def test_each_key_field_says_what_the_providers_keys_look_like(
    db: Database, settings: Settings
) -> None:
    async with stripe_console(db, settings) as (_, app, merchant):
        client = app.test_client()
        application = await new_application(client, merchant)
        console, _ = await signed_in_browser(app, merchant.email)
        _, html = await page(console, providers_path(application))
        assert key_hint(html, "link-sandbox").startswith(
            "sk_sandbox_ followed by 8 or more letters, digits or _, such as sk_sandbox_webshop1. "
            "Any such key works, there is nothing to sign up for"
        )
        assert key_hint(html, "link-stripe").startswith(
            "A secret key from Stripe&#39;s dashboard: sk_test_... in test mode "
            "(sk_live_... takes real payments"
        )
        await link_sandbox(client, merchant, application["id"])
        _, html = await page(console, providers_path(application))
        assert key_hint(html, "key-sandbox").startswith("sk_sandbox_ followed by 8 or more letters")


def test_the_sandbox_takes_the_key_its_hint_gives_as_an_example() -> None:
    hint = SandboxProvider.key_format
    (example,) = re.findall(r"such as (sk_sandbox_\w+)", hint)
    sandbox_account(Credentials(api_key=example))  # does not raise
    with pytest.raises(CredentialsRejected):
        sandbox_account(Credentials(api_key="sk_sandbox_short"))  # 5 after the prefix: fewer than 8


def test_mollies_hint_names_its_test_keys() -> None:
    assert MollieProvider.key_format.startswith("An API key from Mollie's dashboard: test_... in test mode")


async def test_a_provider_that_cannot_be_reached_is_502_with_the_form_again_and_nothing_linked(
    db: Database, settings: Settings
) -> None:
    async with stripe_console(db, settings) as (fake, app, merchant):
        client = app.test_client()
        application = await new_application(client, merchant)
        console, csrf = await signed_in_browser(app, merchant.email)
        fake.fail_next("GET", "/v1/balance", *[ScriptedFailure(500)] * 5)
        response, html = await submit(
            console, providers_path(application), link_form(csrf, "stripe", STRIPE_KEY, "card")
        )
        assert response.status_code == 502
        assert re.search(r'id="link-stripe-form-error">stripe could not be reached: ', html)
        assert 'id="link-stripe-apiKey" name="apiKey" value=""' in html
        assert_key_hidden(html, STRIPE_KEY)
        assert await configs(client, merchant, application["id"]) == []
