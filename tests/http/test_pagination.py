"""The pagination envelope (section 2.2) on every paginated list, and its query parameters."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from quart import Response

from payorch.config import Settings
from payorch.engine.accounts.access_tokens import AccessClaims, issue_access_token
from payorch.engine.accounts.invites import issue_invite
from payorch.storage import accounts
from payorch.storage.database import Connection, Database
from payorch.values.pagination import MAX_PAGE
from payorch.values.secrets import token_hash
from tests.helpers import Client, Merchant, new_api_key, new_application, signup_body

LISTS = ["applications", "api-keys", "sessions"]
ENVELOPE_FIELDS = {"items", "page", "limit", "totalItems", "totalPages", "hasPreviousPage", "hasNextPage"}


class PaginatedList:
    """One paginated list of a merchant, and a way to add items to it."""

    def __init__(self, kind: str, client: Client, merchant: Merchant, db: Database) -> None:
        self.kind = kind
        self.client = client
        self.merchant = merchant
        self.db = db
        self.application_id = ""
        self._added = 0

    async def prepare(self) -> None:
        if self.kind != "applications":
            self.application_id = (await new_application(self.client, self.merchant, "Owner"))["id"]

    @property
    def path(self) -> str:
        if self.kind == "applications":
            return "/api/v1/applications"
        return f"/api/v1/applications/{self.application_id}/{self.kind}"

    async def add(self, count: int) -> list[str]:
        """Add `count` items, one after another; their ids in the order they were made."""
        ids = []
        for _ in range(count):
            self._added += 1
            if self.kind == "applications":
                made = await new_application(self.client, self.merchant, f"Shop {self._added}")
            elif self.kind == "api-keys":
                made = await new_api_key(self.client, self.merchant, self.application_id)
            else:
                made = {"id": await self._insert_session(self._added)}
            ids.append(made["id"])
        return ids

    async def _insert_session(self, number: int) -> str:
        session_id = uuid.uuid4()
        created_at = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=number)
        await self.db.transaction(
            insert_session, session_id, uuid.UUID(self.application_id), f"order-{number}", created_at
        )
        return str(session_id)

    async def get(self, query: str = "") -> Response:
        return await self.client.get(f"{self.path}?{query}", headers=self.merchant.headers)

    async def page(self, query: str = "") -> dict[str, Any]:
        response = await self.get(query)
        assert response.status_code == 200, await response.get_data(as_text=True)
        body: dict[str, Any] = await response.get_json()
        assert set(body) == ENVELOPE_FIELDS
        return body


async def insert_session(
    conn: Connection, session_id: uuid.UUID, application_id: uuid.UUID, reference: str, created_at: datetime
) -> None:
    # Straight SQL, with the creation time chosen: no call makes sessions yet, and listing is all
    # that is pinned here. Only the columns without a default are given.
    await conn.execute(
        """INSERT INTO checkout_sessions
               (id, application_id, order_reference, amount_minor, currency, status, payment_method,
                customer, created_at, updated_at)
           VALUES ($1, $2, $3, 1050, 'USD', 'PENDING', 'card', '{}'::jsonb, $4, $4)""",
        session_id,
        application_id,
        reference,
        created_at,
    )


async def same_creation_time(conn: Connection, table: str) -> None:
    # `table` is one of this module's literals, never input.
    await conn.execute(f"UPDATE {table} SET created_at = '2025-01-01T00:00:00Z'")  # noqa: S608


@pytest.fixture
async def quick_merchant(db: Database, settings: Settings) -> Merchant:
    """A merchant signed up straight in storage and given an access token: the same account as the
    `merchant` fixture's, without the two deliberately slow argon2 hashes of signup and login."""
    email = "admin@quick.example"
    invite = await issue_invite(db, settings, email)
    account = await db.transaction(
        accounts.sign_up,
        token_hash=token_hash(invite.token),
        account=accounts.NewAccount(
            organization=signup_body(email, "REG-QUICK")["organization"],
            admin_email=email,
            admin_password_hash="$argon2id$placeholder",
            admin_first_name="Ada",
            admin_last_name="Lovelace",
        ),
        now=datetime.now(UTC),
    )
    assert account is not None
    token = issue_access_token(
        AccessClaims(user_id=account.user_id, merchant_id=account.merchant_id),
        secret=settings.auth.jwt_secret,
        ttl_s=settings.auth.jwt_ttl_s,
        now=datetime.now(UTC),
    )
    return Merchant(email=email, access_token=token)


@pytest.fixture(params=LISTS)
async def listing(
    request: pytest.FixtureRequest, client: Client, quick_merchant: Merchant, db: Database
) -> PaginatedList:
    paginated = PaginatedList(request.param, client, quick_merchant, db)
    await paginated.prepare()
    return paginated


async def test_empty_list_has_no_pages(listing: PaginatedList) -> None:
    body = await listing.page()
    assert body == {
        "items": [],
        "page": 1,
        "limit": 20,
        "totalItems": 0,
        "totalPages": 0,
        "hasPreviousPage": False,
        "hasNextPage": False,
    }


async def test_list_defaults_to_page_1_of_20(listing: PaginatedList) -> None:
    await listing.add(1)
    body = await listing.page()
    assert (body["page"], body["limit"]) == (1, 20)
    assert len(body["items"]) == 1


async def test_first_of_three_pages(listing: PaginatedList) -> None:
    await listing.add(5)
    body = await listing.page("limit=2")
    assert len(body["items"]) == 2
    assert (body["page"], body["limit"], body["totalItems"], body["totalPages"]) == (1, 2, 5, 3)
    assert (body["hasPreviousPage"], body["hasNextPage"]) == (False, True)


async def test_middle_page_has_both_neighbours(listing: PaginatedList) -> None:
    await listing.add(5)
    body = await listing.page("page=2&limit=2")
    assert len(body["items"]) == 2
    assert (body["page"], body["totalItems"], body["totalPages"]) == (2, 5, 3)
    assert (body["hasPreviousPage"], body["hasNextPage"]) == (True, True)


async def test_last_page_holds_the_remainder(listing: PaginatedList) -> None:
    await listing.add(5)
    body = await listing.page("page=3&limit=2")
    assert len(body["items"]) == 1
    assert (body["page"], body["totalItems"], body["totalPages"]) == (3, 5, 3)
    assert (body["hasPreviousPage"], body["hasNextPage"]) == (True, False)


async def test_page_past_the_end_is_200_with_no_items(listing: PaginatedList) -> None:
    await listing.add(5)
    body = await listing.page("page=4&limit=2")
    assert body["items"] == []
    assert (body["page"], body["totalItems"], body["totalPages"]) == (4, 5, 3)
    assert (body["hasPreviousPage"], body["hasNextPage"]) == (True, False)


async def test_page_far_past_the_end_is_200_with_no_items(listing: PaginatedList) -> None:
    body = await listing.page(f"page={MAX_PAGE}")
    assert body["items"] == []
    assert (body["page"], body["hasNextPage"]) == (MAX_PAGE, False)


@pytest.mark.parametrize("page", [str(MAX_PAGE + 1), "18382663540203269707324719104", "9" * 5000])
async def test_page_beyond_the_largest_says_the_largest(listing: PaginatedList, page: str) -> None:
    response = await listing.get(f"page={page}")
    assert response.status_code == 400
    (problem,) = (await response.get_json())["details"]
    assert problem["field"] == "page"
    assert str(MAX_PAGE) in problem["message"]


async def test_limit_of_100_is_accepted(listing: PaginatedList) -> None:
    body = await listing.page("limit=100")
    assert body["limit"] == 100


async def test_items_are_newest_first(listing: PaginatedList) -> None:
    made = await listing.add(3)
    body = await listing.page()
    assert [item["id"] for item in body["items"]] == list(reversed(made))


async def test_pages_walk_the_list_newest_first_without_gaps(listing: PaginatedList) -> None:
    made = await listing.add(5)
    walked = []
    for page in (1, 2, 3):
        walked += [item["id"] for item in (await listing.page(f"page={page}&limit=2"))["items"]]
    assert walked == list(reversed(made))


async def test_items_made_at_the_same_time_are_ordered_by_id_descending(listing: PaginatedList) -> None:
    made = await listing.add(4)
    table = {"applications": "applications", "api-keys": "api_keys", "sessions": "checkout_sessions"}
    await listing.db.transaction(same_creation_time, table[listing.kind])
    body = await listing.page()
    assert [item["id"] for item in body["items"]] == sorted(made, key=uuid.UUID, reverse=True)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("page=0", "page"),
        ("page=-1", "page"),
        ("page=abc", "page"),
        ("page=1.5", "page"),
        ("page=", "page"),
        ("page=2.0", "page"),
        ("page=%2B1", "page"),
        ("page=1_0", "page"),
        ("page=%201", "page"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=abc", "limit"),
        ("sort=name", "sort"),
    ],
)
async def test_bad_page_query_is_400_naming_the_field(listing: PaginatedList, query: str, field: str) -> None:
    response = await listing.get(query)
    assert response.status_code == 400
    body = await response.get_json()
    assert body["code"] == 400
    assert body["error"] == "Bad Request"
    assert [item["field"] for item in body["details"]] == [field]
