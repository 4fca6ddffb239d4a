"""A merchant's applications and their API keys: created, listed, enabled or disabled, a key made
or revoked, with the same ownership checks (`application_for`) and the same effects on the API key
cache for the API's routes and the console's pages."""

from __future__ import annotations

from payorch.http.auth import Principal, application_for, parse_id
from payorch.http.models import (
    FREE_FORM_MAX_BYTES,
    ApiKeyCreateRequest,
    ApplicationCreateRequest,
    ApplicationStatusRequest,
)
from payorch.http.operations.pages import application_page
from payorch.http.services import Services
from payorch.storage import applications as applications_store
from payorch.storage.applications import ApiKey, Application
from payorch.values.pagination import PageRequest
from payorch.values.secrets import api_key_prefix, new_api_key, token_hash

# Room for the largest valid body (a description of FREE_FORM_MAX_BYTES) even with every character
# sent as a \u escape, and not much more: a bigger body is refused before it is read, let alone parsed.
APPLICATION_MAX_BODY_BYTES = 6 * FREE_FORM_MAX_BYTES + 4 * 1024


async def create_application(
    services: Services, principal: Principal, data: ApplicationCreateRequest
) -> Application:
    """A new, enabled application of the principal's merchant."""
    return await services.context.db.transaction(
        applications_store.create_application,
        merchant_id=principal.merchant_id,
        name=data.name,
        description=data.description,
        most=services.context.settings.limits.applications_per_merchant,
    )


async def list_applications(
    services: Services, principal: Principal, page: PageRequest, *, with_api_keys: bool
) -> tuple[list[tuple[Application, list[ApiKey] | None]], int]:
    """A page of the merchant's applications, newest first, each with its API keys when asked, and
    how many there are in all."""
    db = services.context.db
    async with services.limits.list_read(principal.merchant_id):
        found, total = await db.autocommit(applications_store.list_applications, principal.merchant_id, page)
        if not with_api_keys or not found:
            return [(item, None) for item in found], total
        keys = await db.autocommit(applications_store.api_keys_of_applications, [item.id for item in found])
    return [(item, keys[item.id]) for item in found], total


async def set_application_status(
    services: Services, principal: Principal, application_id: str, data: ApplicationStatusRequest
) -> Application:
    """Enable or disable the application (`StatusUnchanged` when it already has that status)."""
    application = await application_for(principal, application_id)
    updated = await services.context.db.transaction(
        applications_store.set_application_enabled,
        application.id,
        data.isEnabled,
        now=services.context.clock.now(),
    )
    services.api_keys.forget_application(application.id)  # its keys' next request sees the status
    return updated


async def create_api_key(
    services: Services, principal: Principal, application_id: str, data: ApiKeyCreateRequest
) -> tuple[str, ApiKey]:
    """A new API key of the application: the key itself (for the caller to show this once) and what
    is kept of it (its SHA-256 and prefix)."""
    application = await application_for(principal, application_id)
    key = new_api_key()
    created = await services.context.db.transaction(
        applications_store.create_api_key,
        application_id=application.id,
        key_hash=token_hash(key),
        key_prefix=api_key_prefix(key),
        description=data.description,
        most_active=services.context.settings.limits.active_api_keys_per_application,
    )
    services.api_keys.forget_application(application.id)  # no unknown key is remembered past it
    return key, created


async def list_api_keys(
    services: Services, principal: Principal, application_id: str, page: PageRequest
) -> tuple[list[ApiKey], int]:
    """A page of the application's API keys, revoked ones included, and how many there are."""
    return await application_page(services, principal, application_id, applications_store.list_api_keys, page)


async def revoke_api_key(services: Services, principal: Principal, application_id: str, key_id: str) -> None:
    """Revoke the key at once (revoking it again changes nothing)."""
    application = await application_for(principal, application_id)
    await services.context.db.transaction(
        applications_store.revoke_api_key,
        application.id,
        parse_id(key_id, "API key"),
        now=services.context.clock.now(),
    )
    services.api_keys.forget_application(application.id)  # the key's very next request is 401
