"""The routing rules form: the document in force read into rows of rules (conditions, route type,
providers, weights), the default route and the objective; rows added and removed by the form's
buttons; the document the form describes stored as the next version by the API's own operation, or
refused with every problem beside its input and nothing stored."""

from __future__ import annotations

import re
from decimal import Decimal
from html.parser import HTMLParser
from typing import Any

import pytest

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage.database import Database
from tests.console.helpers import page, signed_in_browser, submit
from tests.console.test_routing import DOCUMENT, SANDBOX_FIRST, api_document
from tests.helpers import Client, Shop, new_merchant, new_shop, put_routing

# Every kind of condition and route, the fees and recovery the form carries without inputs for them.
EVERY_KIND: dict[str, Any] = {
    **DOCUMENT,
    "rules": [
        *DOCUMENT["rules"],
        {
            "name": "eur-card",
            "when": {
                "paymentMethods": ["card"],
                "currencies": ["EUR", "PLN"],
                "amount": {"max": Decimal("12.50")},
            },
            "route": {"type": "dynamic", "providers": ["sandbox"]},
        },
    ],
    "default": {"type": "split", "weights": {"sandbox": 100}},
    "objective": "net",
    "recovery": {"maxAttempts": 2, "retryOn": ["CARD_DECLINED"], "neverRetry": []},
}


class FormFields(HTMLParser):
    """The fields a browser would send for the form at `action`, without any button: each input's
    value, each select's selected option."""

    def __init__(self, action: str) -> None:
        super().__init__()
        self.action = action
        self.inside = False
        self.select: str | None = None
        self.fields: dict[str, str] = {}
        self.buttons: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {key: value or "" for key, value in attrs}
        if tag == "form":
            self.inside = found.get("action", "").startswith(self.action)
        elif not self.inside:
            return
        elif tag == "input":
            self.fields[found["name"]] = found.get("value", "")
        elif tag == "select":
            self.select = found["name"]
        elif tag == "option" and self.select is not None and "selected" in found:
            self.fields[self.select] = found["value"]
        elif tag == "button":
            self.buttons.append((found.get("name", ""), found.get("value", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self.select = None


def rules_path(shop: Shop) -> str:
    return f"/console/applications/{shop.application_id}/routing/rules"


def form_fields(html: str, shop: Shop) -> FormFields:
    parsed = FormFields(rules_path(shop))
    parsed.feed(html)
    assert parsed.fields, html
    return parsed


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def press(console: Client, shop: Shop, fields: dict[str, str], button: str) -> tuple[Any, str]:
    return await submit(console, rules_path(shop), {**fields, "do": button})


async def a_second_rule_with_two_conditions(
    app: PayorchApp, client: Client, shop: Shop
) -> tuple[Client, dict[str, str]]:
    """Signed in, with the form of `SANDBOX_FIRST` after "add a rule" and twice "add a condition" to
    it (each shown again, nothing stored): the console and the form's fields."""
    await put_routing(client, shop, SANDBOX_FIRST)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    _, html = await page(console, rules_path(shop))
    for button in ("add-rule", "add-condition-1", "add-condition-1"):
        response, html = await press(console, shop, form_fields(html, shop).fields, button)
        assert response.status_code == 200
    assert (await api_document(client, shop))["version"] == 1
    return console, form_fields(html, shop).fields


async def test_a_document_read_into_the_form_and_stored_again_is_unchanged(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    stored = await put_routing(client, shop, EVERY_KIND)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await page(console, rules_path(shop))
    assert response.status_code == 200
    fields = form_fields(html, shop).fields
    assert fields["rule-2-condition-2-field"] == "amountMax" and fields["rule-2-condition-2-value"] == "12.50"
    assert fields["default-type"] == "split" and fields["default-weight-sandbox"] == "100"
    response, _ = await press(console, shop, fields, "store")
    assert response.status_code == 303
    after = await api_document(client, shop)
    assert after["version"] == stored["version"]  # the same document: nothing stored
    assert {key: after[key] for key in EVERY_KIND} == {key: stored[key] for key in EVERY_KIND}


async def test_a_rule_built_in_the_form_is_stored_as_the_next_version(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    console, fields = await a_second_rule_with_two_conditions(app, client, shop)
    fields |= {
        "rule-1-name": "pln-split",
        "rule-1-condition-0-field": "currencies",
        "rule-1-condition-0-value": "pln",
        "rule-1-condition-1-field": "amountMin",
        "rule-1-condition-1-value": "10.50",
        "rule-1-type": "split",
        "rule-1-weight-sandbox": "100",
        "objective": "net",
    }
    response, _ = await press(console, shop, fields, "store")
    assert response.status_code == 303
    assert response.headers["Location"] == f"/console/applications/{shop.application_id}/routing?done=saved"
    stored = await api_document(client, shop)
    assert stored["version"] == 2
    assert stored["rules"] == [
        *SANDBOX_FIRST["rules"],
        {
            "name": "pln-split",
            "when": {"currencies": ["PLN"], "amount": {"min": 10.5}},
            "route": {"type": "split", "weights": {"sandbox": 100}},
        },
    ]
    assert stored["objective"] == "net"


def error_of(html: str, input_id: str) -> str:
    found = re.search(rf'<p class="error" id="{re.escape(input_id)}-error">(.*?)</p>', html, re.DOTALL)
    assert found, f"no error beside {input_id}"
    return found.group(1)


async def test_a_rule_with_problems_shows_each_beside_its_input_and_stores_nothing(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    console, fields = await a_second_rule_with_two_conditions(app, client, shop)
    fields |= {
        "rule-1-name": "sandbox-first",  # another rule's name
        "rule-1-condition-0-field": "currencies",
        "rule-1-condition-0-value": "PLN, XYZ",
        "rule-1-condition-1-field": "currencies",  # twice
        "rule-1-condition-1-value": "EUR",
        "rule-1-type": "split",
        "rule-1-weight-sandbox": "90",
        "default-type": "priority",
    }
    response, html = await press(console, shop, fields, "store")
    assert response.status_code == 400
    assert "Nothing was stored: invalid routing document: 5 problems." in html
    assert "duplicate of rules.0.name" in error_of(html, "rule-1-name")
    assert "XYZ" in error_of(html, "rule-1-condition-0-value")
    assert "each condition once" in error_of(html, "rule-1-condition-1-value")
    assert "must sum to 100, not 90" in error_of(html, "rule-1-weights")
    assert "at least one provider" in error_of(html, "default-providers")
    assert 'id="rule-1-name" name="rule-1-name" value="sandbox-first"' in html  # the form as sent
    assert 'aria-invalid="true" aria-describedby="rule-1-name-error"' in html
    assert '<a href="#rule-1-weights">rule 2, weights</a>' in html  # the list above links each input
    assert (await api_document(client, shop))["version"] == 1


async def test_removing_a_rule_and_a_condition_changes_the_form_and_stores_nothing(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    await put_routing(client, shop, DOCUMENT)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    _, html = await page(console, rules_path(shop))
    response, html = await press(console, shop, form_fields(html, shop).fields, "remove-rule-0")
    assert response.status_code == 200
    fields = form_fields(html, shop).fields
    assert fields["rules"] == "1" and fields["rule-0-name"] == "eur-split"
    assert ("do", "remove-condition-0-0") in form_fields(html, shop).buttons
    response, html = await press(console, shop, fields, "remove-condition-0-0")
    assert form_fields(html, shop).fields["rule-0-conditions"] == "0"
    assert (await api_document(client, shop))["version"] == 1
    response, _ = await press(console, shop, form_fields(html, shop).fields, "store")
    assert response.status_code == 303
    stored = await api_document(client, shop)
    assert stored["rules"] == [{"name": "eur-split", "route": {"type": "split", "weights": {"sandbox": 100}}}]


async def test_a_version_stored_since_the_form_was_filled_is_412_and_nothing_stored(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    _, html = await page(console, rules_path(shop))
    fields = form_fields(html, shop).fields
    await put_routing(client, shop, DOCUMENT)  # a colleague's change
    response, html = await press(console, shop, fields | {"objective": "net"}, "store")
    assert response.status_code == 412
    assert "the routing document in force is version 2" in html
    stored = await api_document(client, shop)
    assert stored["version"] == 2 and stored["objective"] == "approval"


async def test_another_merchants_rules_are_the_404_page_and_nothing_changes(
    app: PayorchApp, client: Client, db: Database, settings: Settings, shop: Shop
) -> None:
    await put_routing(client, shop, SANDBOX_FIRST)
    stranger = await new_merchant(client, db, settings)
    console, csrf = await signed_in_browser(app, stranger.email)
    response, html = await page(console, rules_path(shop))
    assert response.status_code == 404 and "sandbox-first" not in html
    response, _ = await submit(
        console, rules_path(shop), {"csrf_token": csrf, "rules": "0", "kept": "{}", "do": "store"}
    )
    assert response.status_code == 404
    assert (await api_document(client, shop))["version"] == 1
