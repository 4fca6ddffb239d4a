"""Password reset links of admin users: made by an operator, used once, each newer one ending the
older of its user; only their tokens' hashes are stored."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread


class ResetState(enum.Enum):
    """Why a link may or may not be used now."""

    OPEN = "open"
    UNKNOWN = "unknown"
    USED = "used"
    REPLACED = "replaced"  # a newer link for the same user ended it
    EXPIRED = "expired"


@dataclass(frozen=True)
class ResetLink:
    """A link as its page shows it: for which e-mail, until when, and whether it may be used now."""

    state: ResetState
    email: str = ""
    expires_at: datetime | None = None


@dataclass(frozen=True)
class PasswordSet:
    """The user whose password a link set, with their new session version (every access token
    issued before carries an older one)."""

    user_id: uuid.UUID
    merchant_id: uuid.UUID
    session_version: int


@on_database_thread
async def create_reset(
    conn: Connection, *, email: str, token_hash: bytes, expires_at: datetime, now: datetime
) -> bool:
    """Store a link for the user whose e-mail is `email` (whatever its letter case), ending the
    user's links still open; run in a transaction. False, storing nothing, when no user has it."""
    user_id = await conn.fetchval("SELECT id FROM users WHERE lower(email) = lower($1) FOR UPDATE", email)
    if user_id is None:
        return False
    await conn.execute(
        "UPDATE password_resets SET ended_at = $2 WHERE user_id = $1 AND ended_at IS NULL", user_id, now
    )
    await conn.execute(
        "INSERT INTO password_resets (id, user_id, token_hash, expires_at) VALUES ($1, $2, $3, $4)",
        uuid.uuid4(),
        user_id,
        token_hash,
        expires_at,
    )
    return True


_LINK = """SELECT r.id, r.user_id, u.email, r.expires_at, r.ended_at, r.used
           FROM password_resets r JOIN users u ON u.id = r.user_id WHERE r.token_hash = $1"""


def _state(row: asyncpg.Record | None, now: datetime) -> ResetState:
    if row is None:
        return ResetState.UNKNOWN
    if row["ended_at"] is not None:
        return ResetState.USED if row["used"] else ResetState.REPLACED
    return ResetState.EXPIRED if row["expires_at"] <= now else ResetState.OPEN


@on_database_thread
async def find_reset(conn: Connection, *, token_hash: bytes, now: datetime) -> ResetLink:
    """The link of `token_hash` as it stands at `now` (read only: `set_password` checks it again
    under its lock)."""
    row = await conn.fetchrow(_LINK, token_hash)
    state = _state(row, now)
    if row is None:
        return ResetLink(state)
    return ResetLink(state, email=row["email"], expires_at=row["expires_at"])


@on_database_thread
async def set_password(
    conn: Connection, *, token_hash: bytes, password_hash: str, now: datetime
) -> PasswordSet | ResetState:
    """Use the link of `token_hash` once: its user's password becomes `password_hash` and their
    session version moves on (every access token of theirs ends, as by a sign-out); run in a
    transaction. The link's state, changing nothing, when it may not be used now."""
    row = await conn.fetchrow(_LINK + " FOR UPDATE OF r", token_hash)
    state = _state(row, now)
    if row is None or state is not ResetState.OPEN:
        return state
    await conn.execute("UPDATE password_resets SET ended_at = $2, used = true WHERE id = $1", row["id"], now)
    user = await conn.fetchrow(
        """UPDATE users SET password_hash = $2, session_version = session_version + 1 WHERE id = $1
           RETURNING merchant_id, session_version""",
        row["user_id"],
        password_hash,
    )
    return PasswordSet(
        user_id=row["user_id"], merchant_id=user["merchant_id"], session_version=user["session_version"]
    )
