"""The routing versions pages: every version with when it was stored and by whom, the line
difference of two versions' documents, and an earlier version restored as the next one (through
the API's own operation: the new version's document is the old one's)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage.database import Connection, Database
from tests.console.helpers import page, signed_in_browser, submit
from tests.console.test_routing import DOCUMENT, SANDBOX_FIRST, api_document
from tests.helpers import Client, Shop, new_merchant, new_shop, put_routing


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def versions_path(shop: Shop, tail: str = "") -> str:
    return f"/console/applications/{shop.application_id}/routing/versions{tail}"


async def api_version(client: Client, shop: Shop, version: int) -> dict[str, Any]:
    response = await client.get(
        f"/api/v1/applications/{shop.application_id}/routing/versions/{version}",
        headers=shop.merchant.headers,
    )
    assert response.status_code == 200
    body: dict[str, Any] = await response.get_json()
    return body


def version_rows(html: str) -> list[list[str]]:
    """The versions table's rows: each cell's text."""
    (body,) = re.findall(r'<table class="routing-versions">.*?<tbody>(.*?)</tbody>', html, re.DOTALL)
    return [
        [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.DOTALL)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)
    ]


async def forget_authors(db: Database, shop: Shop, version: int, *, keep_id: bool) -> None:
    """Make `version` look stored before payorch kept its author (or, `keep_id`, its author's e-mail)."""

    async def update(conn: Connection) -> None:
        await conn.execute(
            """UPDATE routing_documents
                   SET stored_by_email = NULL, stored_by = CASE WHEN $3 THEN stored_by END
                WHERE application_id = $1 AND version = $2""",
            uuid.UUID(shop.application_id),
            version,
            keep_id,
        )

    await db.autocommit(update)


async def test_the_versions_list_says_when_and_by_whom_each_was_stored(
    app: PayorchApp, client: Client, db: Database, shop: Shop
) -> None:
    first = await put_routing(client, shop, SANDBOX_FIRST)
    await put_routing(client, shop, DOCUMENT)
    third = await put_routing(client, shop, {**DOCUMENT, "objective": "net"})
    await forget_authors(db, shop, 1, keep_id=False)
    await forget_authors(db, shop, 2, keep_id=True)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await page(console, versions_path(shop))
    assert response.status_code == 200
    rows = version_rows(html)
    assert [row[0] for row in rows] == ["3 (in force)", "2", "1"]
    assert third["updatedAt"] in html and first["updatedAt"] in html  # each row's time, machine-readable
    assert rows[0][2] == shop.merchant.email
    assert rows[1][2].startswith("a user since removed (")
    assert rows[2][2] == "before this was recorded"
    assert "Restore version 3" not in html and "Restore version 1 as the next version" in html
    _, routing = await page(console, f"/console/applications/{shop.application_id}/routing")
    assert f'href="{versions_path(shop)}"' in routing  # the routing page leads here


async def test_the_difference_of_two_versions_marks_added_and_removed_lines_in_words(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    await put_routing(client, shop, DOCUMENT)
    await put_routing(client, shop, {**DOCUMENT, "objective": "net"})
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await page(console, versions_path(shop, "/diff?from=1&to=2"))
    assert response.status_code == 200
    assert "1 line added, 1 removed." in html
    assert (
        "<td>- removed</td><td><del><code>  &#34;objective&#34;: &#34;approval&#34;</code></del></td>" in html
    )
    assert "<td>+ added</td><td><ins><code>  &#34;objective&#34;: &#34;net&#34;</code></ins></td>" in html
    assert "blik-pln" not in html  # unchanged lines far from the change are left out
    _, same = await page(console, versions_path(shop, "/diff?from=2&to=2"))
    assert "The two versions hold the same document." in same


async def test_comparing_a_version_the_application_does_not_keep_names_the_field(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    await put_routing(client, shop, DOCUMENT)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, html = await page(console, versions_path(shop, "/diff?from=7&to=1"))
    assert response.status_code == 400
    assert '<p class="error" id="compare-from-error">the application keeps no version 7</p>' in html
    assert 'id="compare-to-error"' not in html


async def test_restoring_a_version_stores_its_document_as_the_next_version(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    await put_routing(client, shop, DOCUMENT)
    await put_routing(client, shop, SANDBOX_FIRST)
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    response, _ = await submit(console, versions_path(shop, "/1/restore"), {"csrf_token": csrf})
    assert response.status_code == 303
    assert response.headers["Location"] == versions_path(shop, "?done=restored")
    restored, old = await api_document(client, shop), await api_version(client, shop, 1)
    assert restored["version"] == 3
    assert {key: restored[key] for key in DOCUMENT} == {key: old[key] for key in DOCUMENT}
    _, html = await page(console, response.headers["Location"])
    assert "Restored: the version&#39;s document is stored as the newest version" in html
    assert version_rows(html)[0][0] == "3 (in force)"


async def test_restoring_the_document_in_force_stores_nothing(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    await put_routing(client, shop, DOCUMENT)
    await put_routing(client, shop, SANDBOX_FIRST)
    await put_routing(client, shop, DOCUMENT)
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    response, _ = await submit(console, versions_path(shop, "/1/restore"), {"csrf_token": csrf})
    assert response.headers["Location"] == versions_path(shop, "?done=unchanged")
    assert (await api_document(client, shop))["version"] == 3


async def test_a_restore_without_the_sessions_csrf_token_is_403_and_stores_nothing(
    app: PayorchApp, client: Client, shop: Shop
) -> None:
    await put_routing(client, shop, DOCUMENT)
    await put_routing(client, shop, SANDBOX_FIRST)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    response, _ = await submit(console, versions_path(shop, "/1/restore"), {})
    assert response.status_code == 403
    assert (await api_document(client, shop))["version"] == 2


async def test_another_merchants_versions_are_never_shown_nor_restored(
    app: PayorchApp, client: Client, db: Database, settings: Settings, shop: Shop
) -> None:
    await put_routing(client, shop, DOCUMENT)
    await put_routing(client, shop, SANDBOX_FIRST)
    stranger = await new_merchant(client, db, settings)
    console, csrf = await signed_in_browser(app, stranger.email)
    for path in (versions_path(shop), versions_path(shop, "/diff?from=1&to=2")):
        response, html = await page(console, path)
        assert response.status_code == 404
        assert "blik-pln" not in html and "sandbox-first" not in html and shop.merchant.email not in html
    response, _ = await submit(console, versions_path(shop, "/1/restore"), {"csrf_token": csrf})
    assert response.status_code == 404
    assert (await api_document(client, shop))["version"] == 2
