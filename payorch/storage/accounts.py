"""Invites, merchants and their admin users."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.errors import FieldProblem, InvalidInput, InviteInvalid, InviteUsedOrExpired

# The 409 of a signup (`AccountExists`): it names neither field, and the invite is spent by it.
ACCOUNT_EXISTS = (
    "an account with this admin e-mail or company registration number already exists; "
    "this invite is now used: ask for a new one"
)


@dataclass(frozen=True)
class NewAccount:
    """A merchant and its admin user to create. `admin_email` and the organization's
    `companyRegistrationNumber` are in canonical form (`engine/accounts/identifiers.py`): the unique indexes
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
    session_version: int  # carried by the access tokens of this login (claim `sv`)


@on_database_thread
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


# The columns `_usable` reads: $2 is now, $3 the admin e-mail of the signup (NULL: any).
_EXPIRED = "expires_at <= $2 AS expired"
# The invite is bound to the e-mail it was made for, compared as logins and `users_email_key` compare
# e-mails: without regard to letter case (`engine.accounts.invites` stores the address in canonical form).
_FOR_EMAIL = "($3::text IS NULL OR lower(email) = lower($3::text)) AS for_email"


@on_database_thread
async def check_invite(
    conn: Connection, *, token_hash: bytes, now: datetime, admin_email: str | None = None
) -> None:
    """Whether the invite of `token_hash` could be used now (by `admin_email`, when given), read
    without a lock, so that a signup with a bad token is refused before its password is hashed:
    `InviteInvalid` (unknown token), `InviteUsedOrExpired`, or `InvalidInput` (made for another
    e-mail). `sign_up` checks it again under the invite's lock."""
    invite = await conn.fetchrow(
        f"SELECT used_at, {_EXPIRED}, {_FOR_EMAIL} FROM invites WHERE token_hash = $1",
        token_hash,
        now,
        admin_email,
    )
    _usable(invite)


@dataclass(frozen=True)
class OpenInvite:
    """An invite as its signup page shows it: the e-mail it was made for and when it expires."""

    email: str
    expires_at: datetime


@on_database_thread
async def open_invite(conn: Connection, *, token_hash: bytes, now: datetime) -> OpenInvite:
    """The invite of `token_hash`, when it may still be used: `InviteInvalid` or `InviteUsedOrExpired`
    as `check_invite` answers them. Reads only; the signup itself checks it again under its lock."""
    invite = await conn.fetchrow(
        f"SELECT email, expires_at, used_at, {_EXPIRED}, true AS for_email FROM invites"
        " WHERE token_hash = $1",
        token_hash,
        now,
    )
    usable = _usable(invite)
    return OpenInvite(email=usable["email"], expires_at=usable["expires_at"])


def _usable(invite: asyncpg.Record | None) -> asyncpg.Record:
    """`invite` (a row with `used_at`, `expired` and `for_email`) when it may be used now by the
    signup's admin e-mail; else the error. A signup for another e-mail is refused before anything is
    looked up by that e-mail, so the answer says nothing of whether it is registered."""
    if invite is None:
        raise InviteInvalid("invite token is unknown")
    if invite["used_at"] is not None or invite["expired"]:
        raise InviteUsedOrExpired("invite token was already used or has expired: ask for a new one")
    if not invite["for_email"]:
        raise InvalidInput(
            "this invite was made for another e-mail address: sign up with the address it was sent to",
            [FieldProblem("admin.email", "is not the e-mail address this invite was made for")],
        )
    return invite


@on_database_thread
async def sign_up(
    conn: Connection, *, token_hash: bytes, account: NewAccount, now: datetime
) -> Account | None:
    """Use the invite once and create the merchant with its admin user; run in a transaction.

    Raises `InviteInvalid` (unknown token), `InviteUsedOrExpired`, or `InvalidInput` (the invite was
    made for another e-mail), changing nothing: the invite stays usable if it was. Returns None when
    the admin e-mail or the company registration number is already registered: nothing is created,
    but the invite is spent all the same, as by a signup that succeeds, so that one invite cannot
    probe which e-mails and numbers exist. The caller answers `AccountExists` (`ACCOUNT_EXISTS`)
    once that has committed.
    """
    invite = await conn.fetchrow(
        f"SELECT id, used_at, {_EXPIRED}, {_FOR_EMAIL} FROM invites WHERE token_hash = $1 FOR UPDATE",
        token_hash,
        now,
        account.admin_email,
    )
    invite = _usable(invite)

    organization = account.organization
    merchant_id, user_id = uuid.uuid4(), uuid.uuid4()
    try:
        async with conn.transaction():  # a savepoint: a conflict undoes the inserts, not the spending
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
        await conn.execute("UPDATE invites SET used_at = $2 WHERE id = $1", invite["id"], now)
        return None
    await conn.execute(
        "UPDATE invites SET used_at = $3, merchant_id = $2 WHERE id = $1", invite["id"], merchant_id, now
    )
    return Account(merchant_id=merchant_id, user_id=user_id)


@on_database_thread
async def find_login(conn: Connection, email: str) -> LoginRecord | None:
    """The user whose e-mail is `email` (canonical form, as stored), whatever its letter case."""
    row = await conn.fetchrow(
        "SELECT id, merchant_id, password_hash, session_version FROM users WHERE lower(email) = lower($1)",
        email,
    )
    if row is None:
        return None
    return LoginRecord(
        user_id=row["id"],
        merchant_id=row["merchant_id"],
        password_hash=row["password_hash"],
        session_version=row["session_version"],
    )


@on_database_thread
async def replace_password_hash(conn: Connection, user_id: uuid.UUID, old_hash: str, new_hash: str) -> None:
    """The user's password hash `old_hash`, made with older parameters, replaced by `new_hash` of the
    same password; nothing when the password changed meanwhile."""
    await conn.execute(
        "UPDATE users SET password_hash = $3 WHERE id = $1 AND password_hash = $2",
        user_id,
        old_hash,
        new_hash,
    )


@on_database_thread
async def end_sessions(conn: Connection, user_id: uuid.UUID) -> None:
    """Sign the user out everywhere: every access token issued to them so far stops working."""
    await conn.execute("UPDATE users SET session_version = session_version + 1 WHERE id = $1", user_id)
