"""The way back in a real browser: a customer declined at the sandbox's checkout page comes back
through payorch, which sends them on to the next attempt's checkout at Stripe (its fake, serving a
hosted page as Stripe Checkout does: tests/fake_stripe_checkout.py); they pay there and land on the
shop's success page, the session paid in two attempts. Where the application's policy allows no
second attempt, the declined customer lands on the shop's failure page, or on payorch's result page
when the shop gave no failure URL.

payorch's links (the sandbox's way back, the return route Stripe is given) must reach the browser,
so payorch's `public_base_url` is the address the browser reaches it at: a socket bound before the
runtime starts, served by `live_service`."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urldefrag

import httpx
import pytest
from quart_trio import QuartTrio
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.keys import Keys

from payorch.config import ProviderSettings, ServerSettings, Settings, StripeSettings
from payorch.storage.database import Database
from tests import fake_stripe as stripe_fake
from tests.browser.driver import Browser, page_summary
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.fake_stripe import FakeStripe
from tests.helpers import Client, Shop, eventually, put_routing
from tests.loopback import serving_on_loopback
from tests.providers.api_support import created, events, record
from tests.providers.test_merchant_routing import STRIPE_KEY, _shop

# The Stripe SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
fake_stripe = stripe_fake.fake_stripe

SANDBOX_FIRST = {"type": "priority", "providers": ["sandbox", "stripe"]}
SANDBOX_CARD_FIELD = "#card_number"
DECLINED_AT_THE_SANDBOX = "4000000000000002"
STRIPE_CARD_FIELD = "#cardNumber"
PAYING_AT_STRIPE = "4242 4242 4242 4242"


@dataclass(frozen=True)
class Listener:
    """A loopback socket bound before the runtime starts, so payorch's links can name its address."""

    bound: socket.socket
    address: str  # host:port


@pytest.fixture
def listener() -> Iterator[Listener]:
    bound = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    bound.bind(("127.0.0.1", 0))
    yield Listener(bound, f"127.0.0.1:{bound.getsockname()[1]}")
    bound.close()  # nothing, once `live_service` took it over


@pytest.fixture
def live_service_bind(listener: Listener) -> str:
    return f"fd://{listener.bound.detach()}"  # hypercorn closes it when it stops


@pytest.fixture
def settings(settings: Settings, listener: Listener, fake_stripe: FakeStripe) -> Settings:
    """payorch at the listener's address, Stripe enabled at its fake, whose Checkout Sessions are
    pages of the fake's own address."""
    fake_stripe.accept_key(STRIPE_KEY)
    fake_stripe.checkout_host = fake_stripe.url
    return settings.model_copy(
        update={
            "server": ServerSettings(
                bind=listener.address,
                public_base_url=f"http://{listener.address}",
                state_dir=settings.server.state_dir,
            ),
            "providers": ProviderSettings(stripe=StripeSettings(enabled=True, api_base=fake_stripe.url)),
        }
    )


@pytest.fixture
async def shop_site() -> AsyncIterator[str]:
    """The shop's own pages, where payorch sends its customers back: `/ok` and `/ko`."""
    app = QuartTrio("shop_site")
    page = '<!doctype html><html lang="en"><head><title>{0}</title><link rel="icon" href="data:,"></head>'
    page += "<body><main><h1>{0}</h1></main></body></html>"

    @app.get("/ok")
    async def thanks() -> str:
        return page.format("Thank you for your order")

    @app.get("/ko")
    async def not_paid() -> str:
        return page.format("Your order is not paid")

    async with serving_on_loopback(app, "tests.shop_site") as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings, fake_stripe: FakeStripe) -> Shop:
    return await _shop(client, db, settings, stripe_methods=("card",))


async def _session(client: Client, shop: Shop, document: dict[str, Any], **urls: str) -> dict[str, Any]:
    await put_routing(client, shop, document)
    return await created(client, shop, "browser-way-back", redirectUrls=urls)


async def _declined_at_the_sandbox(
    browser: Browser, live_service: LiveService, session: dict[str, Any]
) -> None:
    await browser.open(live_service.url(session["checkoutUrl"]))
    assert await browser.heading() == "Sandbox checkout"
    await check_page(browser, "sandbox-checkout")
    await browser.fill_with_keyboard(SANDBOX_CARD_FIELD, DECLINED_AT_THE_SANDBOX)


async def _lands_on(browser: Browser, url: str) -> None:
    try:
        # A fragment of the page before (Stripe Checkout's) stays through redirects without one.
        await browser.wait_for(lambda driver: urldefrag(driver.current_url).url == url)
    except TimeoutException:
        raise AssertionError(f"never at {url}: {await browser.run(page_summary)}") from None


async def _still_one_attempt(client: Client, shop: Shop, fake: FakeStripe, session_id: str) -> None:
    """The session is still PENDING in its one attempt, and Stripe was asked for nothing."""
    found = await record(client, shop, session_id)
    assert (found["status"], len(found["attempts"])) == ("PENDING", 1)
    assert fake.requests_to("POST", "/v1/checkout/sessions") == []


def _at_stripe(fake: FakeStripe) -> Any:
    return lambda driver: driver.current_url.startswith(f"{fake.url}/c/pay/") and driver.title == "Checkout"


async def test_a_customer_declined_at_the_sandbox_pays_at_the_next_providers_checkout_and_lands_on_the_shop(
    client: Client,
    shop: Shop,
    shop_site: str,
    db: Database,
    browser: Browser,
    live_service: LiveService,
    fake_stripe: FakeStripe,
) -> None:
    session = await _session(
        client,
        shop,
        {"default": SANDBOX_FIRST, "recovery": {"maxAttempts": 2}},
        success=f"{shop_site}/ok",
        failure=f"{shop_site}/ko",
    )
    await _declined_at_the_sandbox(browser, live_service, session)

    await browser.wait_for(_at_stripe(fake_stripe))
    assert "Pay 100.00 PLN" in await browser.text()
    await browser.tab_to(STRIPE_CARD_FIELD)
    await browser.keys(PAYING_AT_STRIPE, Keys.TAB, "12 / 34", Keys.TAB, "123", Keys.ENTER)
    await _lands_on(browser, f"{shop_site}/ok")
    assert await browser.heading() == "Thank you for your order"
    assert await browser.console_errors() == []

    # Stripe tells payorch too, as it does after every payment: the session is paid, once.
    (paid,) = [event for event in fake_stripe.events if event["type"] == "checkout.session.completed"]
    async with httpx.AsyncClient() as stripe_sending:
        (answer,) = await fake_stripe.deliver(paid, via=stripe_sending)
    assert answer.status_code == 200, answer.text

    async def succeeded() -> dict[str, Any] | None:
        found = await record(client, shop, session["sessionId"])
        return found if found["status"] == "SUCCEEDED" else None

    done = await eventually(succeeded)
    attempts = [(attempt["provider"], attempt["status"]) for attempt in done["attempts"]]
    assert attempts == [("sandbox", "DECLINED"), ("stripe", "SUCCEEDED")]
    assert [event["type"] for event in await events(db, session["sessionId"])] == ["session.completed"]


async def test_without_a_second_attempt_a_declined_customer_lands_on_the_shops_failure_page(
    client: Client,
    shop: Shop,
    shop_site: str,
    browser: Browser,
    live_service: LiveService,
    fake_stripe: FakeStripe,
) -> None:
    session = await _session(
        client, shop, {"default": SANDBOX_FIRST}, success=f"{shop_site}/ok", failure=f"{shop_site}/ko"
    )
    await _declined_at_the_sandbox(browser, live_service, session)

    await _lands_on(browser, f"{shop_site}/ko")
    assert await browser.heading() == "Your order is not paid"
    assert await browser.console_errors() == []
    await _still_one_attempt(client, shop, fake_stripe, session["sessionId"])


async def test_a_decline_the_policy_never_retries_lands_on_payorchs_result_page_without_a_failure_url(
    client: Client,
    shop: Shop,
    shop_site: str,
    browser: Browser,
    live_service: LiveService,
    fake_stripe: FakeStripe,
) -> None:
    document = {"default": SANDBOX_FIRST, "recovery": {"maxAttempts": 2, "neverRetry": ["card_declined"]}}
    session = await _session(client, shop, document, success=f"{shop_site}/ok")
    await _declined_at_the_sandbox(browser, live_service, session)

    await _lands_on(browser, live_service.url(f"/checkout/{session['sessionId']}/result?checkout=cancelled"))
    assert await browser.heading() == "Payment cancelled"
    await check_page(browser, "result-after-a-decline")
    await _still_one_attempt(client, shop, fake_stripe, session["sessionId"])
