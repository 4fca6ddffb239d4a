"""Applications of a merchant, and their API keys."""

from __future__ import annotations

from quart import Blueprint
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, application_for, authenticated
from payorch.http.models import (
    ApiKeyCreateRequest,
    ApplicationCreateRequest,
    ApplicationListQuery,
    ApplicationStatusRequest,
    PageQuery,
)
from payorch.http.operations import applications
from payorch.http.operations.applications import APPLICATION_MAX_BODY_BYTES
from payorch.http.services import services
from payorch.http.validation import (
    body_limit,
    validate_optional_request,
    validate_querystring,
    validate_request,
)
from payorch.storage.applications import ApiKey, Application
from payorch.values.pagination import Page, envelope
from payorch.values.timefmt import iso

blueprint = Blueprint("applications", __name__, url_prefix="/api/v1/applications")
tag_blueprint(blueprint, ["Applications and API keys"])


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
    return application_body(await applications.create_application(services(), principal, data)), 201


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
    found, total = await applications.list_applications(
        services(), principal, page, with_api_keys=query_args.include == "apiKeys"
    )
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
    return application_body(
        await applications.set_application_status(services(), principal, application_id, data)
    )


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
    key, created = await applications.create_api_key(services(), principal, application_id, data)
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
    found, total = await applications.list_api_keys(services(), principal, application_id, page)
    return envelope([api_key_summary(key) for key in found], page, total)


@blueprint.delete("/<application_id>/api-keys/<key_id>")
@security_scheme(api.JWT)
@document_response(bodies.Empty, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def revoke_api_key(application_id: str, key_id: str, principal: Principal) -> bodies.Empty:
    """Revoke a key: its very next request gets 401; the application's other keys keep working."""
    await applications.revoke_api_key(services(), principal, application_id, key_id)
    return {}
