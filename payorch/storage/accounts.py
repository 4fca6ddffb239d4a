"""Invites, merchants and their admin users."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from payorch.storage.database import Connection
from payorch.values.errors import AccountExists, InviteInvalid, InviteUsedOrExpired


@dataclass(frozen=True)
class NewAccount:
    """A merchant and its admin user to create. `admin_email` and the organization's
    `companyRegistrationNumber` are in canonical form (`engine/identifiers.py`): the unique indexes
    on `lower(...)` of both then refuse every spelling of a registered identifier."""

    organization: dict[str, Any]
    admin_email: str
    admin_password_hash: str
    admin_first_name: str
    admin_last_name: str


@dataclass(frozen=True)
class Account:
    merchant_id: uuid.UUID
    user_id: uuid.UUID


@dataclass(frozen=True)
class LoginRecord:
    user_id: uuid.UUID
    merchant_id: uuid.UUID
    password_hash: str


async def create_invite(
    conn: Connection, *, token_hash: bytes, email: str, expires_at: datetime
) -> uuid.UUID:
    invite_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO invites (id, token_hash, email, expires_at) VALUES ($1, $2, $3, $4)",
        invite_id,
        token_hash,
        email,
        expires_at,
    )
    return invite_id


async def sign_up(conn: Connection, *, token_hash: bytes, account: NewAccount, now: datetime) -> Account:
    """Use the invite once and create the merchant with its admin user, all or nothing.

    Raises `InviteInvalid` (unknown token), `InviteUsedOrExpired`, or `AccountExists`; in every case
    nothing changes and the invite stays usable if it was.
    """
    invite = await conn.fetchrow(
        "SELECT id, used_at, expires_at <= $2 AS expired FROM invites WHERE token_hash = $1 FOR UPDATE",
        token_hash,
        now,
    )
    if invite is None:
        raise InviteInvalid("invite token is unknown")
    if invite["used_at"] is not None or invite["expired"]:
        raise InviteUsedOrExpired("invite token was already used or has expired: ask for a new one")

    organization = account.organization
    merchant_id, user_id = uuid.uuid4(), uuid.uuid4()
    try:
        await conn.execute(
            """INSERT INTO merchants (id, legal_business_name, company_registration_number, organization)
               VALUES ($1, $2, $3, $4)""",
            merchant_id,
            organization["legalBusinessName"],
            organization["companyRegistrationNumber"],
            organization,
        )
        await conn.execute(
            """INSERT INTO users (id, merchant_id, email, password_hash, first_name, last_name)
               VALUES ($1, $2, $3, $4, $5, $6)""",
            user_id,
            merchant_id,
            account.admin_email,
            account.admin_password_hash,
            account.admin_first_name,
            account.admin_last_name,
        )
    except asyncpg.UniqueViolationError:
        raise AccountExists(
            "an account with this admin e-mail or company registration number already exists"
        ) from None
    await conn.execute(
        "UPDATE invites SET used_at = $3, merchant_id = $2 WHERE id = $1", invite["id"], merchant_id, now
    )
    return Account(merchant_id=merchant_id, user_id=user_id)


async def find_login(conn: Connection, email: str) -> LoginRecord | None:
    """The user whose e-mail is `email` (canonical form, as stored), whatever its letter case."""
    row = await conn.fetchrow(
        "SELECT id, merchant_id, password_hash FROM users WHERE lower(email) = lower($1)", email
    )
    if row is None:
        return None
    return LoginRecord(user_id=row["id"], merchant_id=row["merchant_id"], password_hash=row["password_hash"])
