"""The console's routing page of an application: the document in force with its version, replaced
through the API's own operation (refused with the API's messages, nothing stored), the success
rates learned per provider and segment with their counts, and a session's route tried out."""

from __future__ import annotations

import re
import uuid
from html import unescape
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from markupsafe import escape

from payorch.config import Settings
from payorch.engine.routing.document import MAX_DOCUMENT_BYTES
from payorch.http import representations as bodies
from payorch.http.console.routing import fee_text
from payorch.http.operations.applications import APPLICATION_MAX_BODY_BYTES
from payorch.http.services import PayorchApp
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage.database import Connection, Database
from payorch.values.countries import known_countries
from payorch.values.statuses import Outcome
from tests.console.helpers import page, signed_in_browser, submit
from tests.helpers import (
    Client,
    Shop,
    create_session,
    eventually,
    expire_now,
    new_merchant,
    new_shop,
    put_routing,
)

DOCUMENT: dict[str, Any] = {
    "rules": [
        {
            "name": "blik-pln",
            "when": {
                "paymentMethods": ["blik"],
                "currencies": ["PLN"],
                "amount": {"min": 0, "max": 5000},
                "countries": ["PL"],
            },
            "route": {"type": "priority", "providers": ["sandbox"]},
        },
        {
            "name": "eur-split",
            "when": {"currencies": ["EUR"]},
            "route": {"type": "split", "weights": {"sandbox": 100}},
        },
    ],
    "default": {"type": "dynamic"},
    "fees": {"sandbox": {"percent": "1.4", "fixed": {"PLN": "1.00"}}},
    "objective": "approval",
}
SANDBOX_FIRST = {
    "rules": [{"name": "sandbox-first", "route": {"type": "priority", "providers": ["sandbox"]}}]
}
BAD_DOCUMENTS = {
    "five problems": dumps_exact(
        {
            "rules": [
                {"name": "eur-split", "route": {"type": "split", "weights": {"sandbox": 60, "stripe": 30}}},
                {"name": "eur-split", "route": {"type": "random"}},
                {
                    "name": "x",
                    "when": {"weekday": "monday"},
                    "route": {"type": "priority", "providers": ["paypal"]},
                },
            ]
        }
    ),
    "not json": '{"rules": [',
    "not an object": "[]",
}
PAID_CARD, DECLINED_CARD = "4242424242424242", "4000000000000002"  # the sandbox's (API.md)


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def routing_path(shop: Shop, action: str = "") -> str:
    path = f"/console/applications/{shop.application_id}/routing"
    return f"{path}/{action}" if action else path


async def api_document(client: Client, shop: Shop) -> dict[str, Any]:
    response = await client.get(
        f"/api/v1/applications/{shop.application_id}/routing", headers=shop.merchant.headers
    )
    assert response.status_code == 200
    body: dict[str, Any] = await response.get_json()
    return body


def textarea(html: str) -> str:
    found = re.search(r'<textarea id="document"[^>]*>(.*?)</textarea>', html, re.DOTALL)
    assert found, html
    return found.group(1)


async def test_the_page_shows_the_default_until_a_document_is_stored(app: PayorchApp, shop: Shop) -> None:
    console, _ = await signed_in_browser(app, shop.merchant.email)
    _, overview = await page(console, f"/console/applications/{shop.application_id}")
    assert f'href="{routing_path(shop)}"' in overview  # the application's navigation leads here
    response, html = await page(console, routing_path(shop))
    assert response.status_code == 200
    assert "0: the default, no document stored yet" in html
    assert "dynamic: by learned success rate, over every eligible provider" in html
    assert "No outcomes yet" in html


async def test_the_page_shows_the_rules_in_force_with_the_version(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    stored = await put_routing(client, shop, DOCUMENT)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await page(console, routing_path(shop))
    assert response.status_code == 200
    assert '<dd id="routing-version">2</dd>' in html
    assert stored["updatedAt"] in html
    rows = re.findall(
        r"<tr><th scope=\"row\"><code>([^<]+)</code></th><td>([^<]+)</td><td>([^<]+)</td></tr>", html
    )
    assert rows == [
        (
            "blik-pln",
            "payment method blik; currency PLN; amount from 0 to 5000; billing country PL",
            "priority: sandbox, in this order",
        ),
        ("eur-split", "currency EUR", "split: sandbox 100%"),
    ]
    assert "dynamic: by learned success rate, over every eligible provider" in html  # the default
    assert "sandbox: 1.4% + 1.00 PLN" in html
    # The text area holds the document as the API answers it, without its version: ready to edit.
    assert loads_exact(unescape(textarea(html))) == {key: stored[key] for key in DOCUMENT}


def problems_shown(html: str) -> list[str]:
    """The items of the list of a refused document's problems, as the page writes them."""
    found = re.search(r'<ul class="problems">(.*?)</ul>', html, re.DOTALL)
    assert found, html
    return [item.strip() for item in re.findall(r"<li>(.*?)</li>", found.group(1), re.DOTALL)]


@pytest.mark.parametrize("text", list(BAD_DOCUMENTS.values()), ids=list(BAD_DOCUMENTS))
async def test_a_bad_document_shows_the_apis_messages_and_stores_nothing(
    app: PayorchApp, client: Client, shop: Shop, text: str
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    api = await client.put(
        f"/api/v1/applications/{shop.application_id}/routing",
        data=text,
        headers={**shop.merchant.headers, "Content-Type": "application/json"},
    )
    assert api.status_code == 400
    refused = await api.get_json()
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    response, html = await submit(console, routing_path(shop), {"csrf_token": csrf, "document": text})
    assert response.status_code == 400
    assert f"Nothing was stored: {escape(refused['message'])}." in html
    assert problems_shown(html) == [
        (f"<code>{escape(problem['field'])}</code>: " if problem["field"] != "body" else "")
        + str(escape(problem["message"]))
        for problem in refused["details"]
    ]
    assert 'aria-invalid="true" aria-describedby="document-hint document-error"' in html
    assert textarea(html) == str(escape(text))  # the text sent, to correct
    assert (await api_document(client, shop))["version"] == 1


async def test_a_good_document_is_stored_as_the_next_version_and_the_page_says_so(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    text = dumps_exact(DOCUMENT).replace(", ", ",\r\n  ")  # as a browser sends a text area's lines
    response, _ = await submit(console, routing_path(shop), {"csrf_token": csrf, "document": text})
    assert response.status_code == 303
    assert response.headers["Location"] == f"{routing_path(shop)}?done=saved"
    stored = await api_document(client, shop)
    assert stored["version"] == 2
    assert {key: stored[key] for key in DOCUMENT} == DOCUMENT
    _, html = await page(console, response.headers["Location"])
    assert "Saved: the document below is in force" in html
    assert '<dd id="routing-version">2</dd>' in html
    assert "<code>eur-split</code>" in html


RECOVERING = {
    **SANDBOX_FIRST,
    "recovery": {"maxAttempts": 3, "retryOn": ["INSUFFICIENT_FUNDS"], "neverRetry": ["51"]},
}


async def test_a_document_with_a_recovery_policy_round_trips_through_the_page(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    _, html = await page(console, routing_path(shop))
    assert "one attempt per session: a declined payment is not retried" in html
    example = re.search(r"For example <code>(.*?)</code>", html)
    assert example, html
    assert (
        loads_exact("{" + unescape(example.group(1)) + "}")["recovery"]["maxAttempts"] == 2
    )  # JSON as it is

    response, _ = await submit(
        console, routing_path(shop), {"csrf_token": csrf, "document": dumps_exact(RECOVERING)}
    )
    assert response.status_code == 303
    assert (await api_document(client, shop))["recovery"] == RECOVERING["recovery"]
    _, html = await page(console, routing_path(shop))
    assert (
        '<dd id="routing-recovery">up to 3 attempts per session: a decline for insufficient funds goes on '
        "to the next provider, except the provider codes 51; hard declines never</dd>"
    ) in html
    # The text area holds the policy: storing it unchanged is the document in force, nothing new.
    shown = unescape(textarea(html))
    assert loads_exact(shown)["recovery"] == RECOVERING["recovery"]
    response, _ = await submit(console, routing_path(shop), {"csrf_token": csrf, "document": shown})
    assert response.status_code == 303
    stored = await api_document(client, shop)
    assert (stored["version"], stored["recovery"]) == (1, RECOVERING["recovery"])


async def test_a_bad_recovery_policy_names_its_field_and_stores_nothing(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    bad = {**SANDBOX_FIRST, "recovery": {"maxAttempts": 6, "retryOn": ["LOST_OR_STOLEN_CARD"]}}
    response, html = await submit(
        console, routing_path(shop), {"csrf_token": csrf, "document": dumps_exact(bad)}
    )
    assert response.status_code == 400
    assert problems_shown(html) == [
        "<code>recovery.maxAttempts</code>: must be a whole number from 1 to 5",
        "<code>recovery.retryOn.0</code>: LOST_OR_STOLEN_CARD is a hard decline: "
        "never retried at another provider",
    ]
    stored = await api_document(client, shop)
    assert stored["version"] == 1 and "recovery" not in stored


def large_document(countries_per_rule: int) -> str:
    """100 rules, each matching `countries_per_rule` countries: compact JSON, mostly quotes and
    commas, which a form's URL encoding writes in three characters each."""
    codes = sorted(known_countries())  # ISO codes, two letters each: a document names no other
    rules = [
        {"name": f"r{n}", "when": {"countries": codes[:countries_per_rule]}, "route": {"type": "dynamic"}}
        for n in range(100)
    ]
    return dumps_exact({"rules": rules}).replace(", ", ",")


async def test_a_document_as_large_as_the_api_takes_is_stored_and_a_larger_one_refused_as_the_api_does(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    largest, larger = large_document(115), large_document(125)
    assert len(largest.encode()) <= MAX_DOCUMENT_BYTES < len(larger.encode())
    assert len(urlencode({"document": largest})) > APPLICATION_MAX_BODY_BYTES  # more than other forms take
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    response, _ = await submit(console, routing_path(shop), {"csrf_token": csrf, "document": largest})
    assert response.status_code == 303
    assert (await api_document(client, shop))["version"] == 1
    response, html = await submit(console, routing_path(shop), {"csrf_token": csrf, "document": larger})
    assert response.status_code == 400
    assert "Nothing was stored: routing document too large." in html
    assert problems_shown(html) == [f"a routing document takes at most {MAX_DOCUMENT_BYTES} bytes"]
    assert (await api_document(client, shop))["version"] == 1


@pytest.mark.parametrize("action", ["", "backtest"], ids=["store", "backtest"])
async def test_a_form_without_the_sessions_csrf_token_is_403_and_stores_nothing(
    app: PayorchApp, client: Client, shop: Shop, action: str
) -> None:
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await submit(console, routing_path(shop, action), {"document": dumps_exact(DOCUMENT)})
    assert response.status_code == 403
    assert "Form refused" in html and "backtest-providers" not in html
    assert (await api_document(client, shop))["version"] == 0


async def _checkout(client: Client, shop: Shop, card: str | None) -> str:
    """A session of 100.00 PLN by card, paid with `card` (None: left unpaid); its id."""
    response = await create_session(client, shop, f"rates-{uuid.uuid4()}")
    assert response.status_code == 201, await response.get_data(as_text=True)
    created: dict[str, Any] = await response.get_json()
    if card is not None:
        paid = await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": card})
        assert paid.status_code == (402 if card == DECLINED_CARD else 200)
    return str(created["sessionId"])


async def _outcomes(db: Database, application_id: str) -> int:
    async def count(conn: Connection) -> int:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM routing_outcomes WHERE application_id = $1", uuid.UUID(application_id)
            )
        )

    return await db.autocommit(count)


async def test_the_learned_rates_show_each_segment_with_its_count_as_routing_works_them_out(
    app: PayorchApp, client: Client, db: Database, shop: Shop
) -> None:
    for card in (PAID_CARD, PAID_CARD, DECLINED_CARD):
        await _checkout(client, shop, card)
    await expire_now(db, await _checkout(client, shop, None))

    async def all_four_recorded() -> bool:
        return await _outcomes(db, shop.application_id) == 4

    await eventually(all_four_recorded)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await page(console, routing_path(shop))
    assert response.status_code == 200
    (table,) = re.findall(r'<table class="routing-rates">.*?</table>', html, re.DOTALL)
    (row,) = re.findall(r"<tbody>(.*?)</tbody>", table, re.DOTALL)
    cells = [
        re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
    ]
    # 2 successes in 2 + 1 + 0.5 attempts (an abandonment weighs half a failure), with the prior:
    # (2 + 1) / (3.5 + 2) = 54.5%; fewer than 20 outcomes anywhere, so the provider's few are used.
    assert cells == [
        "sandbox",
        "Card",
        "PLN",
        "4 (2 paid, 1 declined, 1 abandoned)",
        "54.5%",
        "its few outcomes (4), from 50%",
        "0.7408",
    ]


async def test_evaluate_shows_the_provider_a_session_would_go_to_first_and_creates_nothing(
    app: PayorchApp, client: Client, db: Database, shop: Shop
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    fields = {"paymentMethod": "card", "amount": "100.00", "currency": "pln", "billingCountry": "PL"}
    response, html = await submit(console, routing_path(shop, "evaluate"), {"csrf_token": csrf, **fields})
    assert response.status_code == 200, html
    assert (
        '<p role="status" id="evaluation-selected">It would go first to <strong>sandbox</strong>.</p>' in html
    )
    assert "<dt>Rule</dt><dd><code>sandbox-first</code></dd>" in html
    assert "<dt>Route</dt><dd>priority</dd>" in html
    assert "<dt>Document version</dt><dd>1</dd>" in html
    assert re.search(
        r"<tr><td>sandbox</td><td class=\"number\">[0-9.]+</td><td>yes</td><td>rule</td>"
        r"<td class=\"ranked-fee\">none</td></tr>",
        html,
    )
    assert 'value="100.00"' in html  # the form keeps what was typed

    async def sessions(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM checkout_sessions"))

    assert await db.autocommit(sessions) == 0


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"amount": ""}, "amount", "enter the amount"),
        ({"amount": "1,5"}, "amount", "must be digits, with a point before any decimals"),
        ({"amount": "0"}, "amount", "greater than 0"),
        ({"amount": "1.001"}, "amount", "decimal"),
        ({"currency": "XXQ"}, "currency", "XXQ"),
        ({"billingCountry": "AA"}, "billingCountry", "country"),
        ({"paymentMethod": "cheque"}, "paymentMethod", "must be one of"),
    ],
    ids=["no amount", "comma", "zero", "too many decimals", "unknown currency", "unknown country", "method"],
)
async def test_evaluate_refuses_a_session_the_api_refuses_with_the_reason_at_its_field(
    app: PayorchApp, shop: Shop, fields: dict[str, str], field: str, message: str
) -> None:
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    sent = {"paymentMethod": "card", "amount": "10.00", "currency": "PLN", "billingCountry": "", **fields}
    response, html = await submit(console, routing_path(shop, "evaluate"), {"csrf_token": csrf, **sent})
    assert response.status_code == 400, html
    found = re.search(rf'<p class="error" id="evaluate-{field}-error">([^<]*)</p>', html)
    assert found, html
    assert message in unescape(found.group(1))
    assert "evaluation-selected" not in html


async def test_another_merchants_application_is_the_404_page_for_the_page_and_each_form_and_nothing_changes(
    app: PayorchApp, client: Client, db: Database, settings: Settings, shop: Shop
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    stranger = await new_merchant(client, db, settings)
    console, csrf = await signed_in_browser(app, stranger.email)
    response, html = await page(console, routing_path(shop))
    assert response.status_code == 404
    assert "No such application" in html and "sandbox-first" not in html
    response, html = await submit(
        console, routing_path(shop), {"csrf_token": csrf, "document": dumps_exact(DOCUMENT)}
    )
    assert response.status_code == 404
    response, html = await submit(
        console, routing_path(shop, "backtest"), {"csrf_token": csrf, "document": dumps_exact(DOCUMENT)}
    )
    assert response.status_code == 404
    assert "sandbox-first" not in html and "backtest-providers" not in html
    response, html = await submit(
        console,
        routing_path(shop, "evaluate"),
        {"csrf_token": csrf, "paymentMethod": "card", "amount": "10", "currency": "PLN"},
    )
    assert response.status_code == 404
    assert "sandbox-first" not in html
    assert (await api_document(client, shop))["version"] == 1


def test_a_providers_fee_reads_with_each_payment_methods_own() -> None:
    fee: bodies.RoutingFee = {
        "percent": "1.4",
        "fixed": {"EUR": "0.25", "PLN": "1"},
        "methods": {
            "blik": {"percent": "0.9", "fixed": {}},
            "apple_pay": {"percent": "1.2", "fixed": {"EUR": "0.1"}},
        },
    }
    assert fee_text(fee) == "1.4% + 0.25 EUR or 1 PLN; BLIK 0.9%, Apple Pay 1.2% + 0.1 EUR"
    assert fee_text({"percent": "2", "fixed": {}}) == "2%"


async def test_a_payment_declined_then_paid_at_its_checkout_counts_once_as_paid_and_the_page_says_so(
    app: PayorchApp, client: Client, db: Database, shop: Shop
) -> None:
    response = await create_session(client, shop, f"rates-{uuid.uuid4()}")
    created: dict[str, Any] = await response.get_json()
    checkout = urlsplit(created["checkoutUrl"]).path
    assert (await client.post(checkout, form={"card_number": DECLINED_CARD})).status_code == 402
    assert (await client.post(checkout, form={"card_number": PAID_CARD})).status_code == 200

    async def outcomes(conn: Connection) -> list[str]:
        rows = await conn.fetch(
            "SELECT outcome::text FROM routing_outcomes WHERE application_id = $1",
            uuid.UUID(shop.application_id),
        )
        return [row[0] for row in rows]

    async def paid() -> bool:
        return await db.autocommit(outcomes) == [Outcome.SUCCESS]

    await eventually(paid)  # one row: the decline was recorded, then the payment took its place
    console, _ = await signed_in_browser(app, shop.merchant.email)
    _, html = await page(console, routing_path(shop))
    assert "1 (1 paid, 0 declined, 0 abandoned)" in re.sub(r"<[^>]+>", "", html)
    (counted,) = re.findall(r'<p class="hint" id="rates-counted">(.*?)</p>', html, re.DOTALL)
    assert "a decline before it at the same checkout" in counted
    assert "declined at one provider and then paid at the next counts one decline" in counted
