"""Applications of a merchant, and their API keys."""

from __future__ import annotations

from quart import Blueprint
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, application_for, authenticated, parse_id
from payorch.http.models import (
    FREE_FORM_MAX_BYTES,
    ApiKeyCreateRequest,
    ApplicationCreateRequest,
    ApplicationListQuery,
    ApplicationStatusRequest,
    PageQuery,
)
from payorch.http.services import services
from payorch.http.validation import (
    body_limit,
    validate_optional_request,
    validate_querystring,
    validate_request,
)
from payorch.storage import applications as applications_store
from payorch.storage.applications import ApiKey, Application
from payorch.values.pagination import Page, PageRequest, envelope
from payorch.values.secrets import api_key_prefix, new_api_key, token_hash
from payorch.values.timefmt import iso

blueprint = Blueprint("applications", __name__, url_prefix="/api/v1/applications")
tag_blueprint(blueprint, ["Applications and API keys"])

# Room for the largest valid body (a description of FREE_FORM_MAX_BYTES) even with every character
# sent as a \u escape, and not much more: a bigger body is refused before it is read, let alone parsed.
APPLICATION_MAX_BODY_BYTES = 6 * FREE_FORM_MAX_BYTES + 4 * 1024


def application_body(application: Application, api_keys: list[ApiKey] | None = None) -> bodies.Application:
    body: bodies.Application = {
        "id": str(application.id),
        "name": application.name,
        "description": application.description,
        "isEnabled": application.is_enabled,
        "createdAt": iso(application.created_at),
    }
    if api_keys is not None:
        body["apiKeys"] = [api_key_summary(key) for key in api_keys]
    return body


def api_key_summary(key: ApiKey) -> bodies.ApiKeySummary:
    return {
        "id": str(key.id),
        "keyPrefix": key.key_prefix,
        "description": key.description,
        "status": key.status,
        "createdAt": iso(key.created_at),
    }


# The operations behind the routes below, which the console's pages call too: one path to the data,
# with the same ownership checks (`application_for`) and the same effects on the API key cache.


async def create_application_of(principal: Principal, data: ApplicationCreateRequest) -> Application:
    """A new, enabled application of the principal's merchant."""
    return await services().context.db.transaction(
        applications_store.create_application,
        merchant_id=principal.merchant_id,
        name=data.name,
        description=data.description,
        most=services().context.settings.limits.applications_per_merchant,
    )


async def applications_of(
    principal: Principal, page: PageRequest, *, with_api_keys: bool
) -> tuple[list[tuple[Application, list[ApiKey] | None]], int]:
    """A page of the merchant's applications, newest first, each with its API keys when asked, and
    how many there are in all."""
    db = services().context.db
    async with services().limits.list_read(principal.merchant_id):
        found, total = await db.autocommit(applications_store.list_applications, principal.merchant_id, page)
        if not with_api_keys or not found:
            return [(item, None) for item in found], total
        keys = await db.autocommit(applications_store.api_keys_of_applications, [item.id for item in found])
    return [(item, keys[item.id]) for item in found], total


async def set_status_of(
    principal: Principal, application_id: str, data: ApplicationStatusRequest
) -> Application:
    """Enable or disable the application (`StatusUnchanged` when it already has that status)."""
    application = await application_for(principal, application_id)
    updated = await services().context.db.transaction(
        applications_store.set_application_enabled,
        application.id,
        data.isEnabled,
        now=services().context.clock.now(),
    )
    services().api_keys.forget_application(application.id)  # its keys' next request sees the status
    return updated


async def create_api_key_of(
    principal: Principal, application_id: str, data: ApiKeyCreateRequest
) -> tuple[str, ApiKey]:
    """A new API key of the application: the key itself (for the caller to show this once) and what
    is kept of it (its SHA-256 and prefix)."""
    application = await application_for(principal, application_id)
    key = new_api_key()
    created = await services().context.db.transaction(
        applications_store.create_api_key,
        application_id=application.id,
        key_hash=token_hash(key),
        key_prefix=api_key_prefix(key),
        description=data.description,
        most_active=services().context.settings.limits.active_api_keys_per_application,
    )
    services().api_keys.forget_application(application.id)  # no unknown key is remembered past it
    return key, created


async def api_keys_of(
    principal: Principal, application_id: str, page: PageRequest
) -> tuple[list[ApiKey], int]:
    """A page of the application's API keys, revoked ones included, and how many there are."""
    application = await application_for(principal, application_id)
    async with services().limits.list_read(principal.merchant_id):
        return await services().context.db.autocommit(applications_store.list_api_keys, application.id, page)


async def revoke_api_key_of(principal: Principal, application_id: str, key_id: str) -> None:
    """Revoke the key at once (revoking it again changes nothing)."""
    application = await application_for(principal, application_id)
    await services().context.db.transaction(
        applications_store.revoke_api_key,
        application.id,
        parse_id(key_id, "API key"),
        now=services().context.clock.now(),
    )
    services().api_keys.forget_application(application.id)  # the key's very next request is 401


@blueprint.post("")
@security_scheme(api.JWT)
@document_response(bodies.Application, 201)
@api.errors(400, 401, 409, 413, 429, 500)
@authenticated(Accept.JWT)
@body_limit(APPLICATION_MAX_BODY_BYTES)
@validate_request(ApplicationCreateRequest)
async def create_application(
    data: ApplicationCreateRequest, principal: Principal
) -> tuple[bodies.Application, int]:
    """Create an application."""
    return application_body(await create_application_of(principal, data)), 201


@blueprint.get("")
@security_scheme(api.JWT)
@document_response(Page[bodies.Application], 200)
@api.errors(400, 401, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(ApplicationListQuery)
async def list_applications(
    query_args: ApplicationListQuery, principal: Principal
) -> Page[bodies.Application]:
    """The merchant's applications; with `include=apiKeys`, each with its API keys."""
    page = query_args.page_request
    found, total = await applications_of(principal, page, with_api_keys=query_args.include == "apiKeys")
    return envelope([application_body(item, keys) for item, keys in found], page, total)


@blueprint.get("/<application_id>")
@security_scheme(api.JWT)
@document_response(bodies.Application, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def get_application(application_id: str, principal: Principal) -> bodies.Application:
    """An application."""
    return application_body(await application_for(principal, application_id))


@blueprint.patch("/<application_id>/status")
@security_scheme(api.JWT)
@document_response(bodies.Application, 200)
@api.errors(400, 401, 403, 404, 409, 413, 429, 500)
@authenticated(Accept.JWT)
@validate_request(ApplicationStatusRequest)
async def set_application_status(
    application_id: str, data: ApplicationStatusRequest, principal: Principal
) -> bodies.Application:
    """Enable or disable an application (409 when it already has that status)."""
    return application_body(await set_status_of(principal, application_id, data))


@blueprint.post("/<application_id>/api-keys")
@security_scheme(api.JWT)
@document_response(bodies.ApiKeyCreated, 201)
@api.errors(400, 401, 403, 404, 409, 413, 429, 500)
@authenticated(Accept.JWT)
@validate_optional_request(ApiKeyCreateRequest)
async def create_api_key(
    application_id: str, data: ApiKeyCreateRequest, principal: Principal
) -> tuple[bodies.ApiKeyCreated, int]:
    """A new API key, shown in full this once; only its SHA-256 is kept."""
    key, created = await create_api_key_of(principal, application_id, data)
    return {"key": key, **api_key_summary(created)}, 201


@blueprint.get("/<application_id>/api-keys")
@security_scheme(api.JWT)
@document_response(Page[bodies.ApiKeySummary], 200)
@api.errors(400, 401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(PageQuery)
async def list_api_keys(
    application_id: str, query_args: PageQuery, principal: Principal
) -> Page[bodies.ApiKeySummary]:
    """The application's API keys, revoked ones included, without the keys themselves."""
    page = query_args.page_request
    found, total = await api_keys_of(principal, application_id, page)
    return envelope([api_key_summary(key) for key in found], page, total)


@blueprint.delete("/<application_id>/api-keys/<key_id>")
@security_scheme(api.JWT)
@document_response(bodies.Empty, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def revoke_api_key(application_id: str, key_id: str, principal: Principal) -> bodies.Empty:
    """Revoke a key: its very next request gets 401; the application's other keys keep working."""
    await revoke_api_key_of(principal, application_id, key_id)
    return {}
