"""The provider catalogue, and the providers linked to each application."""

from __future__ import annotations

from quart import Blueprint
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, authenticated
from payorch.http.models import (
    PageQuery,
    ProviderApiKeyRequest,
    ProviderLinkRequest,
    ProviderPaymentMethodsRequest,
)
from payorch.http.operations import providers
from payorch.http.services import services
from payorch.http.validation import validate_querystring, validate_request
from payorch.providers.base import Provider
from payorch.storage.provider_configs import ProviderConfig
from payorch.values.pagination import Page, envelope
from payorch.values.timefmt import iso

blueprint = Blueprint("providers", __name__, url_prefix="/api/v1")
tag_blueprint(blueprint, ["Providers"])


def config_body(config: ProviderConfig) -> bodies.ProviderConfig:
    return {
        "applicationId": str(config.application_id),
        "provider": config.provider,
        "isActive": config.is_active,
        "paymentMethods": list(config.payment_methods),
        "keyFingerprint": config.key_fingerprint,
        "createdAt": iso(config.created_at),
        "updatedAt": iso(config.updated_at),
    }


def catalogue_entry(provider: Provider) -> bodies.ProviderCatalogueEntry:
    return {
        "name": provider.name,
        "displayName": provider.display_name,
        "paymentMethods": sorted(provider.payment_methods),
        "eventDelivery": provider.event_delivery,
    }


@blueprint.get("/providers")
@security_scheme(api.JWT)
@document_response(Page[bodies.ProviderCatalogueEntry], 200)
@api.errors(400, 401, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(PageQuery)
async def list_catalogue(query_args: PageQuery, principal: Principal) -> Page[bodies.ProviderCatalogueEntry]:
    """The providers this deployment offers."""
    page = query_args.page_request
    entries = [catalogue_entry(item) for item in providers.list_catalogue(services(), principal)]
    return envelope(entries[page.offset : page.offset + page.limit], page, len(entries))


@blueprint.post("/applications/<application_id>/providers")
@security_scheme(api.JWT)
@document_response(bodies.ProviderConfig, 201)
@api.errors(400, 401, 403, 404, 409, 413, 422, 429, 500, 502)
@authenticated(Accept.JWT)
@validate_request(ProviderLinkRequest)
async def link_provider(
    application_id: str, data: ProviderLinkRequest, principal: Principal
) -> tuple[bodies.ProviderConfig, int]:
    """Link a provider: check the key, register payorch's event endpoint, store the key sealed."""
    return config_body(await providers.link_provider(services(), principal, application_id, data)), 201


@blueprint.get("/applications/<application_id>/providers")
@security_scheme(api.JWT)
@document_response(Page[bodies.ProviderConfig], 200)
@api.errors(400, 401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(PageQuery)
async def list_provider_configs(
    application_id: str, query_args: PageQuery, principal: Principal
) -> Page[bodies.ProviderConfig]:
    """The providers linked to the application."""
    page = query_args.page_request
    found, total = await providers.list_provider_configs(services(), principal, application_id, page)
    return envelope([config_body(item) for item in found], page, total)


@blueprint.patch("/applications/<application_id>/providers/<provider_name>/api-key")
@security_scheme(api.JWT)
@document_response(bodies.Empty, 200)
@api.errors(400, 401, 403, 404, 409, 413, 422, 429, 500, 502)
@authenticated(Accept.JWT)
@validate_request(ProviderApiKeyRequest)
async def replace_api_key(
    application_id: str, provider_name: str, data: ProviderApiKeyRequest, principal: Principal
) -> bodies.Empty:
    """Replace the stored key: checked with the provider, and the event endpoint registered anew."""
    await providers.replace_provider_key(services(), principal, application_id, provider_name, data)
    return {}


@blueprint.patch("/applications/<application_id>/providers/<provider_name>/payment-methods")
@security_scheme(api.JWT)
@document_response(bodies.ProviderConfig, 200)
@api.errors(400, 401, 403, 404, 409, 413, 422, 429, 500)
@authenticated(Accept.JWT)
@validate_request(ProviderPaymentMethodsRequest)
async def set_payment_methods(
    application_id: str, provider_name: str, data: ProviderPaymentMethodsRequest, principal: Principal
) -> bodies.ProviderConfig:
    """Replace the payment methods enabled on a linked provider."""
    return config_body(
        await providers.set_payment_methods(services(), principal, application_id, provider_name, data)
    )
