"""Request validation helpers beyond quart-schema's."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from quart import request
from quart_schema import validate_request

R = TypeVar("R")


def validate_optional_request(
    model: type[BaseModel],
) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """`validate_request` for a body whose fields are all optional: a request with no body at all
    counts as `{}` (a merchant's `POST .../refunds` with nothing in it refunds the whole balance)."""

    def decorator(view: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        validated = validate_request(model)(view)

        @functools.wraps(validated)
        async def wrapper(*args: Any, **kwargs: Any) -> R:
            if not await request.get_data(as_text=False):
                return await view(*args, data=model(), **kwargs)
            result: R = await validated(*args, **kwargs)
            return result

        return wrapper

    return decorator
