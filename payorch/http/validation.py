"""Request validation as quart-schema's decorators do it: each request model built at its route's
first request, bodies validated by their model's own validator, bodies that may be absent, and
per-route body limits.

quart-schema validates each request through a new `TypeAdapter` of the route's model. The models
build their validators at first use (`defer_build`, `http/models.py`), and a `TypeAdapter` of a model
not yet built builds one of its own, every time: each request would build its model's whole schema
again, a millisecond or more. `validate_request` and `validate_querystring` here build the model
itself at the first request, so every `TypeAdapter` after takes the model's validator as it is; and
`validate_request` calls that validator itself (`model_validate`), with no `TypeAdapter` made per
request at all. The routes use these two, never quart-schema's (ruff's banned-api, pyproject.toml,
says so).

Quart bounds every request body by the app's `MAX_CONTENT_LENGTH` (`server.max_body_bytes`), fixed
when the request object is made: `Request.max_content_length`, though settable, only bounds form
parsing, not the body a JSON route awaits. `LimitedBody` lets a route lower its body's limit once the
request has started, with the same effect as the app-wide one: a `Content-Length` beyond it, or
bytes arriving beyond it, make the body raise `RequestEntityTooLarge` (413 in shape A), and nothing
further is kept.

A large body (over `LONG_BODY_BYTES`) is a millisecond or more of the serving thread to parse and
validate, and its route's own work follows at once: `validate_request` puts a checkpoint between
the two, so that other requests' steps that are ready run in between, and a routing document of
35 KB holds the thread in two slices instead of one.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import quart_schema
import trio
from pydantic import BaseModel, ValidationError
from quart import request
from quart_schema import DataSource, RequestSchemaValidationError
from quart_schema.validation import QUART_SCHEMA_REQUEST_ATTRIBUTE
from quart_trio.wrappers.request import TrioBody, TrioRequest
from werkzeug.exceptions import RequestEntityTooLarge

R = TypeVar("R")
View = Callable[..., Awaitable[R]]


def _built_at_first_request(model: type[BaseModel], view: View[R]) -> View[R]:
    """`view`, first building `model`'s validator if it is not built yet (once per process)."""

    @functools.wraps(view)
    async def wrapper(*args: Any, **kwargs: Any) -> R:
        if not model.__pydantic_complete__:
            model.model_rebuild()
        return await view(*args, **kwargs)

    return wrapper


# A body larger than this was parsed and validated in a slice of the thread long enough to let others'
# ready steps run before its route's work (`validate_request`).
LONG_BODY_BYTES = 8 * 1024


def validate_request(model: type[BaseModel]) -> Callable[[View[R]], View[R]]:
    """quart-schema's `validate_request` (the JSON body as `data`, 400 in shape A when it does not
    validate, the model documented as the route's body), on `model` built once per process; a long
    body's route then starts after a checkpoint.

    The body is validated by the model's own validator, where quart-schema builds a `TypeAdapter` of
    the model at every request to reach the same one: the same answers and errors, without that
    object per request. (quart-schema's key casing, `QUART_SCHEMA_CONVERT_CASING`, is never set by
    payorch: bodies are validated as they come.)"""

    def decorator(view: View[R]) -> View[R]:
        @functools.wraps(view)
        async def validated(*args: Any, **kwargs: Any) -> R:
            if not model.__pydantic_complete__:
                model.model_rebuild()
            body = await request.get_json()
            try:
                data = model.model_validate(body)
            except (TypeError, ValidationError, ValueError) as error:
                raise RequestSchemaValidationError(error) from error
            if (request.content_length or 0) > LONG_BODY_BYTES:
                await trio.lowlevel.checkpoint()
            return await view(*args, data=data, **kwargs)

        setattr(validated, QUART_SCHEMA_REQUEST_ATTRIBUTE, (model, DataSource.JSON))
        return validated

    return decorator


def validate_querystring(model: type[BaseModel]) -> Callable[[View[R]], View[R]]:
    """quart-schema's `validate_querystring` (the query as `query_args`), on `model` built once per
    process."""

    def decorator(view: View[R]) -> View[R]:
        return _built_at_first_request(model, quart_schema.validate_querystring(model)(view))

    return decorator


class LimitedBody(TrioBody):
    """quart-trio's request body, whose size limit a route can lower while the body arrives."""

    def __init__(self, expected_content_length: int | None, max_content_length: int | None) -> None:
        super().__init__(expected_content_length, max_content_length)
        self._expected_content_length = expected_content_length

    @property
    def max_bytes(self) -> int | None:
        """The most bytes this body may hold (None: no limit)."""
        limit: int | None = self._max_content_length
        return limit

    def lower_limit(self, max_bytes: int) -> None:
        """From now on the body holds at most `max_bytes` (never more than it was allowed before)."""
        if self._max_content_length is not None and self._max_content_length <= max_bytes:
            return
        self._max_content_length = max_bytes
        announced = self._expected_content_length or 0
        if self._must_raise is None and max(announced, len(self._data)) > max_bytes:
            # As quart's own limit does when it is passed: refuse, drop what came, keep nothing more.
            self._must_raise = RequestEntityTooLarge()
            self._data.clear()
            self.set_complete()


@functools.cache
def _blueprint_path(name: str) -> list[str]:
    """A blueprint's name and its parents' (`a.b.c`, `a.b`, `a`), as Quart lists them."""
    names = [name]
    while "." in names[-1]:
        names.append(names[-1].rpartition(".")[0])
    return names


class LimitedRequest(TrioRequest):
    body_class = LimitedBody

    @property
    def blueprints(self) -> list[str]:
        """Quart's own (the request's blueprint, then its parents), without the import Quart's makes
        at each of the three times a request asks."""
        name = self.blueprint
        return [] if name is None else _blueprint_path(name)


def limit_request_body(max_bytes: int) -> None:
    """The current request's body is refused (413) past `max_bytes`, or past the app-wide limit if
    that is lower; whatever already awaits or will await the body sees the refusal."""
    body = request.body
    if not isinstance(body, LimitedBody):
        raise TypeError("the app's request_class must be LimitedRequest")
    body.lower_limit(max_bytes)


def body_limit(max_bytes: int) -> Callable[[View[R]], View[R]]:
    """A route whose request body is refused (413) past `max_bytes`: place it above
    `validate_request`, so that the limit is set before the body is read."""

    def decorator(view: View[R]) -> View[R]:
        @functools.wraps(view)
        async def limited(*args: Any, **kwargs: Any) -> R:
            limit_request_body(max_bytes)
            return await view(*args, **kwargs)

        return limited

    return decorator


# Set on a view whose body may be left out, so that the OpenAPI document says so (`http.openapi`).
OPTIONAL_BODY_ATTRIBUTE = "_payorch_optional_body"


def validate_optional_request(model: type[BaseModel]) -> Callable[[View[R]], View[R]]:
    """`validate_request` for a body whose fields are all optional: a request with no body at all
    counts as `{}` (a merchant's `POST .../refunds` with nothing in it refunds the whole balance),
    and the OpenAPI document marks the body not required."""

    def decorator(view: View[R]) -> View[R]:
        validated = validate_request(model)(view)

        @functools.wraps(validated)
        async def wrapper(*args: Any, **kwargs: Any) -> R:
            if not await request.get_data(as_text=False):
                return await view(*args, data=model(), **kwargs)
            result: R = await validated(*args, **kwargs)
            return result

        setattr(wrapper, OPTIONAL_BODY_ATTRIBUTE, True)  # functools.wraps copies it to outer decorators
        return wrapper

    return decorator
