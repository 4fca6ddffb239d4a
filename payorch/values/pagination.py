"""Page arithmetic of the pagination envelope shared by every list, and the envelope's shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Generic, TypeVar

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

T = TypeVar("T")

DEFAULT_PAGE = 1
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
# The largest `page` a list takes: a 64-bit integer, which every client can hold (and send back).
MAX_PAGE = 2**63 - 1
# PostgreSQL takes OFFSET as a bigint; no list is that long, so any page beyond it is past the end.
MAX_OFFSET = 2**63 - 1


@dataclass(frozen=True)
class PageRequest:
    page: int = DEFAULT_PAGE
    limit: int = DEFAULT_LIMIT

    @property
    def offset(self) -> int:
        """How many items come before this page; capped so a huge `page` is past the end, not an error."""
        return min((self.page - 1) * self.limit, MAX_OFFSET)

    def is_past(self, total_items: int) -> bool:
        """Whether this page starts beyond a list of `total_items`: it is empty, and a list that
        knows its total answers it without reading the items (a huge `page` costs nothing)."""
        return self.offset >= total_items


@with_config(ConfigDict(extra="forbid"))
class Page(TypedDict, Generic[T]):
    """One page of a list, newest first."""

    items: list[T]
    page: Annotated[int, Field(ge=1)]
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)]
    totalItems: Annotated[int, Field(ge=0)]
    totalPages: Annotated[int, Field(ge=0)]
    hasPreviousPage: bool
    hasNextPage: bool


def envelope(items: list[T], request: PageRequest, total_items: int) -> Page[T]:
    """The envelope of section 2.2: the items of one page and where it stands among all pages."""
    total_pages = -(-total_items // request.limit)
    return {
        "items": items,
        "page": request.page,
        "limit": request.limit,
        "totalItems": total_items,
        "totalPages": total_pages,
        "hasPreviousPage": request.page > 1,
        "hasNextPage": request.page < total_pages,
    }
