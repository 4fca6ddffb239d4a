"""Timestamps as the API shows them: ISO 8601, UTC, millisecond precision, `Z` suffix."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


@overload
def iso(moment: datetime) -> str: ...
@overload
def iso(moment: None) -> None: ...
@overload
def iso(moment: datetime | None) -> str | None: ...
def iso(moment: datetime | None) -> str | None:
    """`moment` as the interface writes it; None (a time not yet reached, or never) stays None."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
