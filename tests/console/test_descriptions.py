"""An application's description in the console: written as text, kept as the JSON object the API
takes, shown back as it was written."""

from __future__ import annotations

from typing import Any

import pytest

from payorch.http.console.descriptions import Shown, description_of, shown
from payorch.http.services import PayorchApp
from payorch.values import errors as domain
from tests.console.helpers import page, signed_in_browser, submit
from tests.helpers import Client, Merchant


@pytest.mark.parametrize(
    ("typed", "kept"),
    [
        ("", None),
        ("  \n ", None),
        ("Our web shop's checkout", {"text": "Our web shop's checkout"}),
        ("  Two lines:\nthe first, then the second  ", {"text": "Two lines:\nthe first, then the second"}),
        ("channel: web\n\nteam:  payments ", {"channel": "web", "team": "payments"}),
        ("owner.email: ops@shop.example", {"owner.email": "ops@shop.example"}),
        ("opens: 10:30", {"opens": "10:30"}),
        ("empty:", {"empty": ""}),
        ("https://shop.example", {"text": "https://shop.example"}),  # no space after the colon
        ("Web shop: main", {"text": "Web shop: main"}),  # a key has no spaces
        ("channel: web\nchannel: app", {"text": "channel: web\nchannel: app"}),  # each key once
        ("channel: web\nand a sentence", {"text": "channel: web\nand a sentence"}),
        ('{"channel": "web", "weight": 1.50}', {"channel": "web", "weight": 1.50}),
        ("[1, 2]", {"text": "[1, 2]"}),
    ],
)
def test_text_becomes_the_object_it_stands_for(typed: str, kept: dict[str, Any] | None) -> None:
    assert description_of(typed) == kept


@pytest.mark.parametrize(
    ("typed", "problem"),
    [
        ("{not json", "starts with { so it is read as a JSON object, but it is not valid JSON ("),
        ('{"a": 1} and more', "starts with { so it is read as a JSON object, but it is not valid JSON ("),
        ('{"a": NaN}', "starts with { so it is read as a JSON object"),
    ],
)
def test_text_that_starts_with_a_brace_must_be_a_json_object(typed: str, problem: str) -> None:
    with pytest.raises(domain.InvalidInput) as refused:
        description_of(typed)
    (detail,) = refused.value.details
    assert detail.field == "description"
    assert detail.message.startswith(problem), detail.message
    assert "Write plain text without a leading {, or correct the JSON." in detail.message


@pytest.mark.parametrize(
    ("description", "read"),
    [
        (None, None),
        ({}, None),
        ({"text": "Our shop"}, Shown(text="Our shop")),
        ({"channel": "web", "team": "payments"}, Shown(pairs=[("channel", "web"), ("team", "payments")])),
        ({"text": "Our shop", "team": "payments"}, Shown(pairs=[("team", "payments"), ("text", "Our shop")])),
        ({"b": "2", "a": "1"}, Shown(pairs=[("a", "1"), ("b", "2")])),
        ({"weight": 1}, Shown(json='{\n  "weight": 1\n}')),
    ],
)
def test_a_description_is_shown_as_it_was_written(
    description: dict[str, Any] | None, read: Shown | None
) -> None:
    assert shown(description) == read


async def created(app: PayorchApp, merchant: Merchant, description: str) -> tuple[Client, str]:
    console, csrf = await signed_in_browser(app, merchant.email)
    form = {"csrf_token": csrf, "name": "Web shop", "description": description}
    response, html = await submit(console, "/console/applications", form)
    assert response.status_code == 303, html
    return console, response.headers["Location"].split("?")[0]


async def description_in_api(client: Client, merchant: Merchant, overview: str) -> Any:
    application_id = overview.rsplit("/", 1)[1]
    response = await client.get(f"/api/v1/applications/{application_id}", headers=merchant.headers)
    return (await response.get_json())["description"]


async def test_a_sentence_is_kept_as_text_and_shown_as_written(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    console, overview = await created(app, merchant, "The shop's <b>main</b> checkout")
    assert await description_in_api(client, merchant, overview) == {"text": "The shop's <b>main</b> checkout"}
    _, html = await page(console, overview)
    text = "The shop&#39;s &lt;b&gt;main&lt;/b&gt; checkout"
    assert f'<dd class="description"><p class="description-text">{text}</p>' in html


async def test_lines_of_keys_and_values_are_kept_as_an_object_and_shown_as_a_list(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    console, overview = await created(app, merchant, "channel: web\r\nteam: payments\r\n")
    assert await description_in_api(client, merchant, overview) == {"channel": "web", "team": "payments"}
    _, html = await page(console, overview)
    assert (
        '<dl class="description-pairs"><dt>channel</dt><dd>web</dd><dt>team</dt><dd>payments</dd></dl>'
        in html
    )


async def test_a_description_that_is_not_the_json_it_starts_as_is_refused_next_to_its_field(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    console, csrf = await signed_in_browser(app, merchant.email)
    form = {"csrf_token": csrf, "name": "Web shop", "description": '{"channel": web}'}
    response, html = await submit(console, "/console/applications", form)
    assert response.status_code == 400
    assert '<p class="error" id="description-error">starts with { so it is read as a JSON object' in html
    assert "{&#34;channel&#34;: web}</textarea>" in html  # the text kept, to correct
    assert (await (await client.get("/api/v1/applications", headers=merchant.headers)).get_json())[
        "items"
    ] == []
