"""The routing page's backtest (the document form's second button): the API's backtest of the
document in the text area, shown per provider and per rule beside the window and the estimated
approval; nothing stored; a document refused with the problems the save names; a busy service
said in words on the page. The shop is linked to Stripe (its fake) and the sandbox, with sessions
brought to an outcome at each, as in the API's backtest tests (tests/http/test_routing_backtest.py)."""

from __future__ import annotations

import re
import uuid
from contextlib import ExitStack
from html import unescape

import pytest
from markupsafe import escape

from payorch.http.request_limits import BACKTEST_RETRY_AFTER_S, BACKTESTS_AT_ONCE
from payorch.http.services import PayorchApp
from payorch.jsonexact import dumps_exact
from payorch.storage.database import Database
from tests.console.helpers import signed_in_browser, submit
from tests.console.test_routing import BAD_DOCUMENTS, api_document, problems_shown, routing_path, textarea
from tests.helpers import Client, Shop
from tests.http import test_routing_backtest as api_backtest
from tests.http.test_routing_backtest import History

# Stripe at its fake beside the sandbox, a provider judged from its first outcome on, and sessions
# brought to an outcome at either: the API's backtest tests' fixtures.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
settings = api_backtest.settings
fake_stripe = api_backtest.fake_stripe
stripe_sender = api_backtest.stripe_sender
shop = api_backtest.shop
history = api_backtest.history

# Polish customers to Stripe, every other session to the sandbox.
CANDIDATE = {
    "rules": [
        {
            "name": "polish",
            "when": {"countries": ["PL"]},
            "route": {"type": "priority", "providers": ["stripe"]},
        }
    ],
    "default": {"type": "priority", "providers": ["sandbox"]},
}


def rows(html: str, table_class: str) -> list[list[str]]:
    """The text of each cell of each body row of the table `table_class`."""
    (table,) = re.findall(rf'<table class="{table_class}">.*?</table>', html, re.DOTALL)
    (body,) = re.findall(r"<tbody>(.*?)</tbody>", table, re.DOTALL)
    return [
        [
            unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)
    ]


def fact(html: str, name: str) -> str:
    """The text of the backtest's fact `name` (`backtest-<name>`)."""
    found = re.search(rf'<dd id="backtest-{name}">(.*?)</dd>', html, re.DOTALL)
    assert found, html
    return " ".join(unescape(re.sub(r"<[^>]+>", "", found.group(1))).split())


async def test_a_backtest_of_a_candidate_rule_shows_the_counts_per_provider_and_rule_and_stores_nothing(
    app: PayorchApp, client: Client, shop: Shop, history: History
) -> None:
    # Stripe: 2 paid, 1 declined. The sandbox: 1 paid, 1 declined, 1 open (a Polish customer's).
    # The document in force is then version 2 (each provider was preferred in turn).
    await api_backtest._mixed_history(client, shop, history)
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    text = dumps_exact(CANDIDATE, indent=2).replace("\n", "\r\n")  # as a browser sends a text area
    response, html = await submit(
        console, routing_path(shop, "backtest"), {"csrf_token": csrf, "document": text, "days": "30"}
    )
    assert response.status_code == 200, html
    # Per provider: the sessions that went there, those the candidate and the document in force
    # send there, outcomes, approval.
    assert rows(html, "backtest-providers") == [
        ["sandbox", "3", "5", "6", "2 (1 paid)", "50.0%"],
        ["stripe", "3", "1", "0", "3 (2 paid)", "66.7%"],
    ]
    assert rows(html, "backtest-rules") == [
        ["polish", "1", "1", "0"],
        ["default route", "5", "0", "0"],  # changed from the document in force: the sandbox first
    ]
    assert fact(html, "sessions") == "6"
    assert fact(html, "changed").startswith("1 ")
    assert fact(html, "unroutable").startswith("0 ")
    assert fact(html, "without-outcome").startswith("1 ")
    # 3 paid of the 5 with an outcome. The candidate moves only the open session from the document in
    # force: both send the 5 with an outcome to the sandbox, estimated alike, a change of nothing.
    assert fact(html, "approval") == (
        "this document 50.0%, the document in force 50.0%: 0.0 points (95%: 0.0 points to 0.0 points) "
        "both replayed the same way over the 5 sessions with an outcome (observed: 60.0%), resting on "
        "2 sessions' own outcomes"
    )
    assert fact(html, "recovery") == "nothing this document's recovery policy would change"
    assert "This document sends 1 of the 6 sessions replayed first to another provider" in html
    assert re.search(
        r'the sessions created from <time datetime="[0-9T:.-]+Z" title="[0-9T:.-]+Z">[^<]+ UTC</time> '
        r'to <time datetime="[0-9T:.-]+Z" title="[0-9T:.-]+Z">[^<]+ UTC</time></dd>',
        html,
    ), html
    assert "What a backtest cannot know" in html
    assert textarea(html) == str(escape(text))  # the text area keeps the document, to edit further
    assert (await api_document(client, shop))["version"] == 2  # stored nothing


@pytest.mark.parametrize("text", list(BAD_DOCUMENTS.values()), ids=list(BAD_DOCUMENTS))
async def test_a_bad_document_shows_the_problems_the_save_shows_and_nothing_is_stored(
    app: PayorchApp, client: Client, shop: Shop, text: str
) -> None:
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    saved, saved_html = await submit(console, routing_path(shop), {"csrf_token": csrf, "document": text})
    assert saved.status_code == 400
    response, html = await submit(
        console, routing_path(shop, "backtest"), {"csrf_token": csrf, "document": text, "days": "30"}
    )
    assert response.status_code == 400
    assert problems_shown(html) == problems_shown(saved_html)
    assert 'aria-invalid="true" aria-describedby="document-hint document-error"' in html
    assert "Not backtested: the document has problems" in html
    assert "backtest-providers" not in html
    assert textarea(html) == str(escape(text))
    assert (await api_document(client, shop))["version"] == 0


@pytest.mark.parametrize("days", ["0", "31", "a week"])
async def test_days_out_of_range_are_refused_at_the_field(
    app: PayorchApp, client: Client, shop: Shop, days: str
) -> None:
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    fields = {"csrf_token": csrf, "document": dumps_exact(CANDIDATE), "days": days}
    response, html = await submit(console, routing_path(shop, "backtest"), fields)
    assert response.status_code == 400
    assert re.search(r'<p class="error" id="backtest-days-error">[^<]+</p>', html), html
    assert 'aria-invalid="true" aria-describedby="backtest-days-hint backtest-days-error"' in html
    assert "backtest-providers" not in html
    assert '<option value="30" selected>' in html  # the choice back at its default


async def test_a_second_backtest_of_the_merchant_while_one_runs_is_429_said_on_the_page(
    app: PayorchApp, client: Client, db: Database, shop: Shop
) -> None:
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    text = dumps_exact(CANDIDATE)
    with app.services.limits.backtest(await api_backtest._merchant_of(db, shop)):
        response, html = await submit(
            console, routing_path(shop, "backtest"), {"csrf_token": csrf, "document": text}
        )
    assert response.status_code == 429
    assert response.headers["Retry-After"] == str(BACKTEST_RETRY_AFTER_S)
    assert (
        '<p class="error" role="alert" id="backtest-refused">Not backtested: a merchant runs 1 routing '
        f"backtest at a time: retry after {BACKTEST_RETRY_AFTER_S} s.</p>"
    ) in html
    assert textarea(html) == str(escape(text))
    response, html = await submit(
        console, routing_path(shop, "backtest"), {"csrf_token": csrf, "document": text}
    )
    assert response.status_code == 200, html  # once the other one ended


async def test_a_backtest_while_the_process_runs_its_most_is_503_said_on_the_page(
    app: PayorchApp, shop: Shop
) -> None:
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    fields = {"csrf_token": csrf, "document": dumps_exact(CANDIDATE)}
    with ExitStack() as others:
        for _ in range(BACKTESTS_AT_ONCE):
            others.enter_context(app.services.limits.backtest(uuid.uuid4()))
        response, html = await submit(console, routing_path(shop, "backtest"), fields)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == str(BACKTEST_RETRY_AFTER_S)
    assert f"Not backtested: {BACKTESTS_AT_ONCE} routing backtests are running: retry after" in html
    assert "Routing" in html and 'id="document"' in html  # the routing page, not an error page
