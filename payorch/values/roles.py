"""What a user of a merchant may do: the roles, and the one place that says what a read-only user
may not."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class Role(StrEnum):
    """A user's role within their merchant. `admin`: everything, users included. `read_only`:
    every read; no refund, no change of anything (routing, applications, API keys, providers,
    webhooks, users), no secret shown."""

    ADMIN = "admin"
    READ_ONLY = "read_only"


# The roles as a request body names them (`Role(name)` is the member).
RoleName = Literal["admin", "read_only"]

READ_ONLY_REFUSAL = (
    "your role is read_only: it may read but not refund, change anything or see secrets; "
    "ask an admin of your merchant"
)
