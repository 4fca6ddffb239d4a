"""The users of a merchant, their roles, and the invitations an admin makes for more of them.

Every change of a merchant's users (a role changed, a user removed, an invitation made or used)
first locks the merchant's row, so that two admins demoting or removing each other at once cannot
leave the merchant without an admin: the second sees the first's change (`LastAdmin`). Only a hash
of an invitation's token is stored.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.pages import read_page
from payorch.values.errors import (
    AccountExists,
    InviteInvalid,
    InviteUsedOrExpired,
    LastAdmin,
    NotFound,
)
from payorch.values.pagination import PageRequest
from payorch.values.roles import Role

_USER_COLUMNS = "id, email, first_name, last_name, role, created_at"
_INVITE_COLUMNS = "id, email, role, invited_by, created_at, expires_at"
_OTHER_ADMINS = f"""SELECT count(*) FROM users
                    WHERE merchant_id = $1 AND id <> $2 AND role = '{Role.ADMIN}'"""
# The 409 of a signup by invitation whose e-mail is a user already (of any merchant).
USER_EXISTS = "this e-mail address is already a user of payorch: this invitation is now used"


@dataclass(frozen=True)
class User:
    id: uuid.UUID
    email: str
    first_name: str
    last_name: str
    role: Role
    created_at: datetime


@dataclass(frozen=True)
class UserInvite:
    """An invitation not yet used, revoked nor replaced (it may have expired)."""

    id: uuid.UUID
    email: str
    role: Role
    invited_by: uuid.UUID
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class OpenUserInvite:
    """An invitation as its signup page shows it."""

    email: str
    role: Role
    merchant_name: str
    expires_at: datetime


@dataclass(frozen=True)
class Joined:
    """The user an invitation created, with their session version (for their first access token)."""

    user_id: uuid.UUID
    merchant_id: uuid.UUID
    email: str
    role: Role
    session_version: int


def _user(row: asyncpg.Record) -> User:
    return User(
        id=row["id"],
        email=row["email"],
        first_name=row["first_name"],
        last_name=row["last_name"],
        role=Role(row["role"]),
        created_at=row["created_at"],
    )


def _invite(row: asyncpg.Record) -> UserInvite:
    return UserInvite(
        id=row["id"],
        email=row["email"],
        role=Role(row["role"]),
        invited_by=row["invited_by"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
    )


@on_database_thread
async def credential_of(conn: Connection, user_id: uuid.UUID) -> tuple[int, Role] | None:
    """The user's session version and role (None: no such user, or no longer), read at every
    request that carries an access token, so a removal or a change of role holds at once."""
    row = await conn.fetchrow("SELECT session_version, role FROM users WHERE id = $1", user_id)
    return None if row is None else (row["session_version"], Role(row["role"]))


@on_database_thread
async def list_users(conn: Connection, merchant_id: uuid.UUID, page: PageRequest) -> tuple[list[User], int]:
    return await read_page(
        conn,
        page,
        columns=_USER_COLUMNS,
        rows_from="users WHERE merchant_id = $1",
        args=[merchant_id],
        order_by="created_at DESC, id DESC",
        item=_user,
    )


@on_database_thread
async def list_open_invites(
    conn: Connection, merchant_id: uuid.UUID, page: PageRequest
) -> tuple[list[UserInvite], int]:
    return await read_page(
        conn,
        page,
        columns=_INVITE_COLUMNS,
        rows_from="user_invites WHERE merchant_id = $1 AND ended_at IS NULL",
        args=[merchant_id],
        order_by="created_at DESC, id DESC",
        item=_invite,
    )


@on_database_thread
async def _lock_merchant(conn: Connection, merchant_id: uuid.UUID) -> None:
    await conn.execute("SELECT 1 FROM merchants WHERE id = $1 FOR UPDATE", merchant_id)


@on_database_thread
async def _user_of(conn: Connection, merchant_id: uuid.UUID, user_id: uuid.UUID) -> User:
    """The merchant's user; `NotFound` for another merchant's as for none."""
    row = await conn.fetchrow(
        f"SELECT {_USER_COLUMNS} FROM users WHERE id = $1 AND merchant_id = $2", user_id, merchant_id
    )
    if row is None:
        raise NotFound("user not found", missing="user")
    return _user(row)


@on_database_thread
async def find_user(conn: Connection, *, merchant_id: uuid.UUID, user_id: uuid.UUID) -> User:
    """The merchant's user; `NotFound` for another merchant's as for none."""
    return await _user_of(conn, merchant_id, user_id)


@on_database_thread
async def _keep_an_admin(conn: Connection, merchant_id: uuid.UUID, user: User, change: str) -> None:
    if user.role is Role.ADMIN and not await conn.fetchval(_OTHER_ADMINS, merchant_id, user.id):
        raise LastAdmin(f"cannot {change} the merchant's last admin: make another user admin first")


@on_database_thread
async def change_role(conn: Connection, *, merchant_id: uuid.UUID, user_id: uuid.UUID, role: Role) -> User:
    """Give the merchant's user `role`; run in a transaction. `NotFound`, or `LastAdmin` when it
    would demote the merchant's last admin, changing nothing. The same role again changes nothing."""
    await _lock_merchant(conn, merchant_id)
    user = await _user_of(conn, merchant_id, user_id)
    if role is not Role.ADMIN:
        await _keep_an_admin(conn, merchant_id, user, "demote")
    row = await conn.fetchrow(
        f"UPDATE users SET role = $2 WHERE id = $1 RETURNING {_USER_COLUMNS}", user_id, role.value
    )
    return _user(row)


@on_database_thread
async def remove_user(conn: Connection, *, merchant_id: uuid.UUID, user_id: uuid.UUID) -> None:
    """Remove the merchant's user; run in a transaction. Every access token of theirs is refused from
    then on (their user is gone: `credential_of` answers None). `NotFound`, or `LastAdmin` for the
    merchant's last admin, changing nothing."""
    await _lock_merchant(conn, merchant_id)
    user = await _user_of(conn, merchant_id, user_id)
    await _keep_an_admin(conn, merchant_id, user, "remove")
    await conn.execute("DELETE FROM password_resets WHERE user_id = $1", user_id)
    await conn.execute("DELETE FROM users WHERE id = $1", user_id)


@on_database_thread
async def create_invite(
    conn: Connection,
    *,
    merchant_id: uuid.UUID,
    email: str,
    role: Role,
    invited_by: uuid.UUID,
    token_hash: bytes,
    now: datetime,
    expires_at: datetime,
) -> UserInvite:
    """Store an invitation of `email` (canonical form) to the merchant, ending the merchant's earlier
    invitations of that address; run in a transaction. `AccountExists` when the address is already a
    user of this merchant (whether it is one of another merchant is not said here: the signup says
    so, as a merchant's signup does)."""
    await _lock_merchant(conn, merchant_id)
    if await conn.fetchval(
        "SELECT 1 FROM users WHERE merchant_id = $1 AND lower(email) = lower($2)", merchant_id, email
    ):
        raise AccountExists("this e-mail address is already a user of your merchant")
    await conn.execute(
        """UPDATE user_invites SET ended_at = $3
           WHERE merchant_id = $1 AND lower(email) = lower($2) AND ended_at IS NULL""",
        merchant_id,
        email,
        now,
    )
    row = await conn.fetchrow(
        f"""INSERT INTO user_invites (id, merchant_id, email, role, invited_by, token_hash, created_at,
                                      expires_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {_INVITE_COLUMNS}""",
        uuid.uuid4(),
        merchant_id,
        email,
        role.value,
        invited_by,
        token_hash,
        now,
        expires_at,
    )
    return _invite(row)


@on_database_thread
async def revoke_invite(
    conn: Connection, *, merchant_id: uuid.UUID, invite_id: uuid.UUID, now: datetime
) -> None:
    """End the merchant's open invitation `invite_id`: its link is refused from then on. `NotFound`
    for one that is not open (used, revoked, replaced) or is another merchant's."""
    ended = await conn.fetchval(
        """UPDATE user_invites SET ended_at = $3
           WHERE id = $1 AND merchant_id = $2 AND ended_at IS NULL RETURNING id""",
        invite_id,
        merchant_id,
        now,
    )
    if ended is None:
        raise NotFound("invite not found", missing="invite")


_INVITE_OF_HASH = """SELECT i.id, i.merchant_id, i.email, i.role, i.expires_at, i.ended_at,
                             m.legal_business_name
                      FROM user_invites i JOIN merchants m ON m.id = i.merchant_id
                      WHERE i.token_hash = $1"""


def _usable(row: asyncpg.Record | None, now: datetime) -> asyncpg.Record:
    if row is None:
        raise InviteInvalid("invite token is unknown")
    if row["ended_at"] is not None or row["expires_at"] <= now:
        raise InviteUsedOrExpired(
            "invite token was already used, revoked or has expired: "
            "ask an admin of the merchant for a new one"
        )
    return row


@on_database_thread
async def open_invite(conn: Connection, *, token_hash: bytes, now: datetime) -> OpenUserInvite:
    """The invitation of `token_hash` when it may still be used: `InviteInvalid` (unknown) or
    `InviteUsedOrExpired` else. Reads only; `join` checks it again under its lock."""
    row = _usable(await conn.fetchrow(_INVITE_OF_HASH, token_hash), now)
    return OpenUserInvite(
        email=row["email"],
        role=Role(row["role"]),
        merchant_name=row["legal_business_name"],
        expires_at=row["expires_at"],
    )


@on_database_thread
async def join(
    conn: Connection,
    *,
    token_hash: bytes,
    password_hash: str,
    first_name: str,
    last_name: str,
    now: datetime,
) -> Joined | None:
    """Use the invitation once: its e-mail becomes a user of its merchant with its role; run in a
    transaction. `InviteInvalid` or `InviteUsedOrExpired`, changing nothing. None when the e-mail
    is a user of payorch already: nothing is created, but the invitation is spent; the caller
    answers `AccountExists` (`USER_EXISTS`) once that has committed."""
    row = _usable(await conn.fetchrow(_INVITE_OF_HASH + " FOR UPDATE OF i", token_hash), now)
    await _lock_merchant(conn, row["merchant_id"])
    user_id = uuid.uuid4()
    try:
        async with conn.transaction():  # a savepoint: a conflict undoes the insert, not the spending
            await conn.execute(
                """INSERT INTO users (id, merchant_id, email, password_hash, first_name, last_name, role,
                                      created_at)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8)""",
                user_id,
                row["merchant_id"],
                row["email"],
                password_hash,
                first_name,
                last_name,
                row["role"],
                now,
            )
    except asyncpg.UniqueViolationError:
        await conn.execute("UPDATE user_invites SET ended_at = $2 WHERE id = $1", row["id"], now)
        return None
    await conn.execute(
        "UPDATE user_invites SET ended_at = $2, user_id = $3 WHERE id = $1", row["id"], now, user_id
    )
    return Joined(
        user_id=user_id,
        merchant_id=row["merchant_id"],
        email=row["email"],
        role=Role(row["role"]),
        session_version=0,
    )
