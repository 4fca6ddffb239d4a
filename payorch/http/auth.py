"""Who is calling, and may they touch this application: the one place every route asks.

A merchant's admin presents a JWT (`Authorization: Bearer <jwt>`); a merchant's server presents an
API key of one application (`X-API-Key: sk_...`). `authenticate` turns the request's credential
into a `Principal`; `application_for` checks that the principal may act on an application.

Roles are enforced here too, for the API and the console alike (`permit_role`): every access token
passes `principal_of_access_token`, which refuses a `read_only` user (403) any request but a read
(GET, HEAD) unless its view is marked `@open_to_read_only`. So a new route that changes something
is closed to read-only users without a word; one that only reads through a POST says so.
"""

from __future__ import annotations

import enum
import functools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import trio
from quart import current_app, g, request

from payorch.engine.accounts.access_tokens import verify_access_token
from payorch.http.requestlog import note_application
from payorch.http.services import services
from payorch.storage import applications as applications_store
from payorch.storage import users as users_store
from payorch.storage.applications import Application
from payorch.values.errors import (
    ApplicationDisabled,
    AuthenticationRequired,
    Missing,
    NotFound,
    NotPermitted,
    RoleRefused,
    WrongCredentialKind,
)
from payorch.values.roles import READ_ONLY_REFUSAL, Role
from payorch.values.secrets import looks_like_api_key, token_hash

API_KEY_HEADER = "X-API-Key"
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])
# The requests that only read: open to every role.
READING_METHODS = frozenset({"GET", "HEAD"})
_OPEN_TO_READ_ONLY = "_payorch_open_to_read_only"


class Accept(enum.Enum):
    """Which credentials an operation accepts."""

    JWT = "jwt"
    JWT_OR_API_KEY = "jwt-or-api-key"


@dataclass(frozen=True)
class Principal:
    merchant_id: uuid.UUID
    user_id: uuid.UUID | None = None  # set for a JWT
    application_id: uuid.UUID | None = None  # set for an API key: the one application it serves
    key_id: uuid.UUID | None = None  # set for an API key: which key, for its rate limit
    role: Role | None = None  # set for a JWT: the user's role as it is now

    @property
    def is_api_key(self) -> bool:
        return self.application_id is not None

    @property
    def is_admin(self) -> bool:
        """Whether the principal is a user whose role is admin."""
        return self.role is Role.ADMIN


async def authenticate(accept: Accept) -> Principal:
    """The caller's identity, or `AuthenticationRequired` / `WrongCredentialKind` (401),
    `ApplicationDisabled` (403, an API key of a disabled application) or `RateLimited` (429).

    A verified credential is charged one token of its bucket: `apikey:<key id>` (and its merchant's
    `merchant-keys:<merchant id>`) for an API key, `merchant:<merchant id>` for a JWT. An API key
    that fails verification is charged to its client address instead (`ip:<address>` of the failed
    API-key limit); a forged or expired JWT costs only its signature check and is not charged."""
    authorization = request.headers.get("Authorization")
    api_key = request.headers.get(API_KEY_HEADER)
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationRequired("Authorization must be 'Bearer <access token>'")
        return await principal_of_access_token(token.strip())
    if api_key is not None:
        if accept is Accept.JWT:
            raise WrongCredentialKind(
                "this operation needs a merchant access token (Authorization: Bearer); "
                "API keys are not accepted"
            )
        return await _api_key_principal(api_key.strip())
    raise AuthenticationRequired(
        "credentials required: Authorization: Bearer <access token>"
        + (f" or {API_KEY_HEADER}: <api key>" if accept is Accept.JWT_OR_API_KEY else "")
    )


async def principal_of_access_token(token: str) -> Principal:
    """The user an access token (JWT) names, charged one token of the merchant's bucket:
    `AuthenticationRequired` for a forged or expired token, one a sign-out ended or whose user was
    removed, `RateLimited` for an empty bucket, `RoleRefused` for what the user's role may not do
    (`permit_role`). The API's `Authorization: Bearer` and the console's session cookie both come
    here.

    Whether a sign-out ended the token is read from the database, one primary-key read per request:
    its user's `session_version` against the token's (`sv`), and the user's role with it. So a
    sign-out, a removal or a change of role holds at once on every process and node. Only users'
    calls carry a JWT; merchants' servers use API keys, which are read
    from `api_key_cache` (docs/api.md, "Signing out")."""
    context = services().context
    claims = verify_access_token(token, secret=context.settings.auth.jwt_secret, now=context.clock.now())
    await services().limits.charge_credential(f"merchant:{claims.merchant_id}")
    current = await context.db.autocommit(users_store.credential_of, claims.user_id)
    if current is None or current[0] != claims.session_version:
        raise AuthenticationRequired("access token ended by a sign-out: log in again")
    principal = Principal(merchant_id=claims.merchant_id, user_id=claims.user_id, role=current[1])
    permit_role(principal)
    return principal


def open_to_read_only(view: F) -> F:
    """Mark a view that only reads although its method is not GET (a logout, a routing evaluation):
    `permit_role` lets a read-only user through. Put it below the route's decorator."""
    setattr(view, _OPEN_TO_READ_ONLY, True)
    return view


def is_open_to_read_only(view: Callable[..., Any]) -> bool:
    return bool(getattr(view, _OPEN_TO_READ_ONLY, False))


def permit_role(principal: Principal) -> None:
    """`RoleRefused` (403) for a read-only user on a request that is not a read (GET, HEAD) and whose
    view is not `@open_to_read_only`: refunds, changes of anything, every answer that shows a
    secret (those are answers to a POST or a PATCH), inviting users. Every role reads."""
    if principal.role is not Role.READ_ONLY or request.method in READING_METHODS:
        return
    view = current_app.view_functions.get(request.endpoint or "")
    if view is None or not is_open_to_read_only(view):
        raise RoleRefused(READ_ONLY_REFUSAL)


async def _api_key_principal(api_key: str) -> Principal:
    """The key's owner, charged to the key's and the merchant's buckets. A key that fails costs its
    client address one failed authentication; an address out of them is refused (429) every key that
    would need a database read, before the read (keys remembered as active still work)."""
    running = services()
    limits, address = running.limits, request.remote_addr
    if not looks_like_api_key(api_key):
        await limits.count_api_key_failure(address)
        raise AuthenticationRequired("invalid API key")
    # The key is looked up by its SHA-256: the stored hash is compared, never the key itself.
    key_hash = token_hash(api_key)
    cache = running.api_keys
    owner = cache.get(key_hash, trio.current_time())
    if owner is None and not cache.is_missing(key_hash, trio.current_time()):
        limits.check_api_key_failures(address)
        generation = cache.generation
        owner = await running.context.db.autocommit(applications_store.find_api_key_owner, key_hash)
        if owner is not None:
            cache.put(key_hash, owner, trio.current_time(), generation)
        else:
            cache.put_missing(key_hash, trio.current_time(), generation)
    if owner is None:
        await limits.count_api_key_failure(address)
        raise AuthenticationRequired("invalid or revoked API key")
    note_application(owner.application_id)
    await limits.pace_api_key(owner.key_id, owner.merchant_id)
    if not owner.application_enabled:
        raise ApplicationDisabled("the application of this API key is disabled")
    return Principal(merchant_id=owner.merchant_id, application_id=owner.application_id, key_id=owner.key_id)


def parse_id(value: str, what: Missing) -> uuid.UUID:
    """A path identifier; a value that is not a UUID cannot name anything, so it is a 404."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(f"{what} not found", missing=what) from None


async def application_for(principal: Principal, application_id: str) -> Application:
    """The application, if `principal` may act on it: 404 when there is none, 403 when it belongs to
    another merchant (or, for an API key, is not the key's own application).

    The application is read once per request (`_read_once`) and checked at every call: a console
    page that shows the application and calls operations that each check it costs one read. A
    request that changes the application takes the changed one from the change's answer."""
    found = await _read_once(parse_id(application_id, "application"))
    if found is None:
        raise NotFound("application not found", missing="application")
    if found.merchant_id != principal.merchant_id:
        raise NotPermitted("this application belongs to another merchant")
    if principal.is_api_key and principal.application_id != found.id:
        raise NotPermitted("this API key belongs to another application")
    note_application(found.id)
    return found


async def _read_once(application_id: uuid.UUID) -> Application | None:
    """The application as this request first read it (None: there was none)."""
    read: dict[uuid.UUID, Application | None] = g.setdefault("applications_read", {})
    if application_id not in read:
        read[application_id] = await services().context.db.autocommit(
            applications_store.get_application, application_id
        )
    return read[application_id]


def authenticated(accept: Accept) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """Route decorator: authenticate before anything else (so a stranger learns nothing from
    validation errors) and pass the caller in as `principal`."""

    def decorator(view: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        @functools.wraps(view)
        async def wrapper(*args: Any, **kwargs: Any) -> R:
            principal = await authenticate(accept)
            return await view(*args, principal=principal, **kwargs)

        return wrapper

    return decorator
