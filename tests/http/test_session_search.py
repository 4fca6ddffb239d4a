"""The merchant's sessions across its applications (`GET /api/v1/sessions`): each filter narrows the
list to the sessions it names, keyset pages hold still while sessions are created, the CSV is the
JSON pages' rows, another merchant's sessions never appear, and the read record gives the customer."""

from __future__ import annotations

import csv
import io
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from quart.typing import TestClientProtocol as Client

from payorch.config import Settings
from payorch.storage.database import Connection, Database
from tests.helpers import (
    Merchant,
    Shop,
    create_session,
    link_sandbox,
    new_api_key,
    new_application,
    new_merchant,
    session_body,
)

START = datetime(2025, 3, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Stored:
    """A session stored straight in the database with the values a search looks at."""

    id: str
    application_id: str
    order_reference: str
    email: str
    amount_minor: int
    currency: str
    provider: str | None
    status: str
    created_at: datetime


async def insert_session(conn: Connection, item: Stored) -> None:
    await conn.execute(
        """INSERT INTO checkout_sessions
               (id, application_id, order_reference, amount_minor, currency, status, payment_method,
                provider_name, provider_reference, customer, created_at, updated_at)
           VALUES ($1, $2, $3, $4, $5, $6, 'card', $7, $8, $9, $10, $10)""",
        uuid.UUID(item.id),
        uuid.UUID(item.application_id),
        item.order_reference,
        item.amount_minor,
        item.currency,
        item.status,
        item.provider,
        None if item.provider is None else f"ref-{item.id}",
        {"email": item.email},
        item.created_at,
    )


@dataclass
class Catalogue:
    """Two applications of one merchant with a dozen sessions between them, in creation order."""

    merchant: Merchant
    applications: list[str]
    sessions: list[Stored]

    def newest_first(self, **equal: Any) -> list[str]:
        found = [s for s in self.sessions if all(getattr(s, k) == v for k, v in equal.items())]
        return [s.id for s in sorted(found, key=lambda s: (s.created_at, s.id), reverse=True)]


async def store(db: Database, items: list[Stored]) -> None:
    for item in items:
        await db.transaction(insert_session, item)


@pytest.fixture
async def catalogue(client: Client, db: Database, merchant: Merchant) -> Catalogue:
    shop = (await new_application(client, merchant, "Shop"))["id"]
    outlet = (await new_application(client, merchant, "Outlet"))["id"]
    statuses = ("PENDING", "SUCCEEDED", "FAILED")
    items = [
        Stored(
            id=str(uuid.uuid4()),
            application_id=(shop, outlet)[number % 2],
            order_reference=f"order-{number}",
            email=("ann@example.com", "Bob@Example.com", "cy@example.com")[number % 3],
            amount_minor=(1000, 2550, 99900)[number % 3],
            currency=("EUR", "EUR", "JPY")[number % 3] if number % 4 else "USD",
            provider=("sandbox", "stripe", None)[number % 3],
            status=statuses[number % 3],
            created_at=START + timedelta(days=number),
        )
        for number in range(12)
    ]
    await store(db, items)
    return Catalogue(merchant, [shop, outlet], items)


async def search(client: Client, merchant: Merchant, query: str = "") -> dict[str, Any]:
    response = await client.get(f"/api/v1/sessions?{query}", headers=merchant.headers)
    assert response.status_code == 200, await response.get_data(as_text=True)
    # Amounts read exactly, as a merchant's client reads them.
    body: dict[str, Any] = json.loads(await response.get_data(as_text=True), parse_float=Decimal)
    return body


async def every_id(client: Client, merchant: Merchant, query: str = "", limit: int = 5) -> list[str]:
    """The ids of every page of the search, read page by page through `nextCursor`."""
    found: list[str] = []
    cursor = ""
    while True:
        page = await search(client, merchant, f"{query}&limit={limit}&after={cursor}")
        found += [item["id"] for item in page["items"]]
        if not page["hasNextPage"]:
            assert page["nextCursor"] is None
            return found
        cursor = page["nextCursor"]


async def test_without_filters_every_session_of_every_application_newest_first(
    client: Client, catalogue: Catalogue
) -> None:
    page = await search(client, catalogue.merchant, "limit=100")
    assert set(page) == {"items", "limit", "hasNextPage", "nextCursor"}
    assert [item["id"] for item in page["items"]] == catalogue.newest_first()
    assert {item["applicationId"] for item in page["items"]} == set(catalogue.applications)


@pytest.mark.parametrize(
    ("query", "equal"),
    [
        ("orderReference=order-7", {"order_reference": "order-7"}),
        ("customerEmail=bob@example.COM", {"email": "Bob@Example.com"}),
        ("provider=stripe", {"provider": "stripe"}),
        ("status=SUCCEEDED", {"status": "SUCCEEDED"}),
        ("currency=EUR&amount=25.50", {"currency": "EUR", "amount_minor": 2550}),
        ("currency=JPY&amount=99900", {"currency": "JPY", "amount_minor": 99900}),
    ],
)
async def test_each_filter_narrows_the_list_to_the_sessions_it_names(
    client: Client, catalogue: Catalogue, query: str, equal: dict[str, Any]
) -> None:
    expected = catalogue.newest_first(**equal)
    assert expected
    assert await every_id(client, catalogue.merchant, query, limit=2) == expected


async def test_application_filter_lists_only_that_applications_sessions(
    client: Client, catalogue: Catalogue
) -> None:
    outlet = catalogue.applications[1]
    found = await every_id(client, catalogue.merchant, f"applicationId={outlet}")
    assert found == catalogue.newest_first(application_id=outlet)


async def test_amount_range_and_creation_days_narrow_together(client: Client, catalogue: Catalogue) -> None:
    query = "currency=EUR&amountMin=10&amountMax=25.5&createdFrom=2025-03-03&createdTo=2025-03-10"
    expected = [
        s.id
        for s in sorted(catalogue.sessions, key=lambda s: s.created_at, reverse=True)
        if s.currency == "EUR"
        and 1000 <= s.amount_minor <= 2550
        and START + timedelta(days=2) <= s.created_at < START + timedelta(days=10)
    ]
    assert expected
    assert await every_id(client, catalogue.merchant, query, limit=2) == expected


async def test_created_to_as_a_time_includes_that_moment(client: Client, catalogue: Catalogue) -> None:
    moment = (START + timedelta(days=4)).isoformat()
    found = await every_id(
        client, catalogue.merchant, f"createdFrom={moment}&createdTo={moment}".replace("+", "%2B")
    )
    assert found == catalogue.newest_first(created_at=START + timedelta(days=4))


async def test_filters_combine_each_one_holding(client: Client, catalogue: Catalogue) -> None:
    shop = catalogue.applications[0]
    found = await every_id(
        client, catalogue.merchant, f"status=PENDING&provider=sandbox&applicationId={shop}"
    )
    assert found == catalogue.newest_first(status="PENDING", provider="sandbox", application_id=shop)
    assert found


async def test_a_filter_no_session_holds_is_an_empty_last_page(client: Client, catalogue: Catalogue) -> None:
    page = await search(client, catalogue.merchant, "orderReference=no-such-order")
    assert page == {"items": [], "limit": 20, "hasNextPage": False, "nextCursor": None}


async def test_keyset_pages_hold_still_while_sessions_are_created(
    client: Client, db: Database, catalogue: Catalogue
) -> None:
    first = await search(client, catalogue.merchant, "limit=4")
    await store(
        db,
        [
            Stored(
                str(uuid.uuid4()),
                catalogue.applications[0],
                "new",
                "new@example.com",
                500,
                "EUR",
                "sandbox",
                "PENDING",
                START + timedelta(days=100 + number),
            )
            for number in range(3)
        ],
    )
    second = await search(client, catalogue.merchant, f"limit=4&after={first['nextCursor']}")
    assert [item["id"] for item in first["items"] + second["items"]] == catalogue.newest_first()[:8]


async def test_csv_export_holds_the_same_rows_as_the_json_pages(client: Client, catalogue: Catalogue) -> None:
    query = "currency=EUR"
    pages: list[dict[str, Any]] = []
    cursor = ""
    while True:
        page = await search(client, catalogue.merchant, f"{query}&limit=2&after={cursor}")
        pages += page["items"]
        if not page["hasNextPage"]:
            break
        cursor = page["nextCursor"]
    response = await client.get(
        f"/api/v1/sessions?{query}", headers={**catalogue.merchant.headers, "Accept": "text/csv"}
    )
    assert response.status_code == 200
    assert response.content_type.startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(await response.get_data(as_text=True))))
    assert rows == [
        {
            "id": item["id"],
            "applicationId": item["applicationId"],
            "orderReference": item["orderReference"],
            "customerEmail": item["customer"]["email"],
            "amount": str(item["amount"]),
            "currency": item["currency"],
            "status": item["status"],
            "failureReason": item["failureReason"] or "",
            "providerName": item["providerName"] or "",
            "paymentMethod": item["paymentMethod"],
            "createdAt": item["createdAt"],
            "updatedAt": item["updatedAt"],
        }
        for item in pages
    ]
    assert len(rows) == len(catalogue.newest_first(currency="EUR"))


async def test_csv_export_of_more_than_one_batch_holds_every_session_once(
    client: Client, db: Database, merchant: Merchant
) -> None:
    application = (await new_application(client, merchant))["id"]
    count = 2500  # more than two batches of the export
    await db.transaction(_insert_many, uuid.UUID(application), count)
    response = await client.get("/api/v1/sessions", headers={**merchant.headers, "Accept": "text/csv"})
    rows = list(csv.DictReader(io.StringIO(await response.get_data(as_text=True))))
    assert len({row["id"] for row in rows}) == len(rows) == count
    assert [row["createdAt"] for row in rows] == sorted((row["createdAt"] for row in rows), reverse=True)


async def _insert_many(conn: Connection, application_id: uuid.UUID, count: int) -> None:
    await conn.execute(
        """INSERT INTO checkout_sessions
               (id, application_id, order_reference, amount_minor, currency, status, payment_method,
                customer, created_at, updated_at)
           SELECT gen_random_uuid(), $1, 'bulk-' || n, 100, 'EUR', 'PENDING', 'card',
                  '{"email": "bulk@example.com"}'::jsonb, $2::timestamptz + n * interval '1 second', $2
           FROM generate_series(1, $3) AS n""",
        application_id,
        START,
        count,
    )


async def test_another_merchants_sessions_never_appear(
    client: Client, db: Database, settings: Settings, catalogue: Catalogue
) -> None:
    other = await new_merchant(client, db, settings)
    assert (await search(client, other, "limit=100"))["items"] == []
    # Naming the first merchant's application lists nothing either.
    query = f"applicationId={catalogue.applications[0]}"
    assert (await search(client, other, query))["items"] == []
    response = await client.get(f"/api/v1/sessions?{query}", headers={**other.headers, "Accept": "text/csv"})
    assert (await response.get_data(as_text=True)).splitlines()[1:] == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=PAID", "status"),
        ("amount=10", "currency"),
        ("currency=EUR&amount=1.005", "amount"),
        ("currency=EUR&amount=-1", "amount"),
        ("currency=EUR&amount=abc", "amount"),
        ("currency=EURO", "currency"),
        ("currency=EUR&amount=5&amountMin=1", "amount"),
        ("currency=EUR&amountMin=5&amountMax=1", "amountMax"),
        ("currency=KWD&amount=1000000000000000000", "amount"),
        ("createdFrom=yesterday", "createdFrom"),
        ("createdFrom=0001-01-01T00:00:00%2B01:00", "createdFrom"),
        ("createdFrom=2025-03-01T00:00:00", "createdFrom"),
        ("createdFrom=2025-03-05&createdTo=2025-03-01", "createdTo"),
        ("applicationId=not-a-uuid", "applicationId"),
        ("provider=Not%20A%20Name", "provider"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("after=not-a-cursor", "after"),
    ],
)
async def test_a_filter_value_that_is_not_valid_is_400_naming_it(
    client: Client, merchant: Merchant, query: str, field: str
) -> None:
    response = await client.get(f"/api/v1/sessions?{query}", headers=merchant.headers)
    assert response.status_code == 400, await response.get_data(as_text=True)
    body = await response.get_json()
    assert body["code"] == 400 and body["error"]
    assert field in {detail["field"] for detail in body["details"]}


async def test_created_to_the_last_day_there_is_holds_every_later_session(
    client: Client, catalogue: Catalogue
) -> None:
    found = await every_id(client, catalogue.merchant, "createdFrom=2025-03-06&createdTo=9999-12-31")
    assert found == [s for s in catalogue.newest_first() if s in {x.id for x in catalogue.sessions[5:]}]


async def test_an_unknown_query_parameter_is_400(client: Client, merchant: Merchant) -> None:
    response = await client.get("/api/v1/sessions?orderRef=x", headers=merchant.headers)
    assert response.status_code == 400


async def test_an_api_key_cannot_search_across_applications(client: Client, merchant: Merchant) -> None:
    application = (await new_application(client, merchant))["id"]
    key = await new_api_key(client, merchant, application)
    response = await client.get("/api/v1/sessions", headers={"X-API-Key": key["key"]})
    assert response.status_code == 401


async def test_read_record_gives_the_customer_as_given_at_create(client: Client, merchant: Merchant) -> None:
    application = (await new_application(client, merchant))["id"]
    await link_sandbox(client, merchant, application)
    key = await new_api_key(client, merchant, application)
    shop = Shop(merchant, application, key["key"])
    customer = {
        "email": "jan@example.com",
        "firstName": "Jan",
        "phone": "+48 600 700 800",
        "billingAddress": {"line1": "Prosta 1", "city": "Warszawa", "postalCode": "00-001", "country": "PL"},
    }
    created = await create_session(client, shop, "customer-1", session_body(customer=customer))
    assert created.status_code == 201, await created.get_data(as_text=True)
    session_id = (await created.get_json())["sessionId"]
    response = await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
    record = await response.get_json()
    assert record["customer"] == customer
    listed = await search(client, merchant, "customerEmail=JAN@example.com")
    assert [(item["id"], item["customer"]) for item in listed["items"]] == [(session_id, customer)]
    assert listed["items"][0]["amount"] == Decimal("100.00")
