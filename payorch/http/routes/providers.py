"""The provider catalogue, and the providers linked to each application."""

from __future__ import annotations

import uuid

import trio
from quart import Blueprint
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, application_for, authenticated
from payorch.http.models import (
    PageQuery,
    ProviderApiKeyRequest,
    ProviderLinkRequest,
    ProviderPaymentMethodsRequest,
)
from payorch.http.services import services
from payorch.http.validation import validate_querystring, validate_request
from payorch.providers.base import (
    Credentials,
    CredentialsRejected,
    Provider,
    ProviderError,
    WebhookRegistration,
)
from payorch.storage import provider_configs as provider_configs_store
from payorch.storage.provider_configs import ProviderConfig
from payorch.values.errors import (
    NotFound,
    ProviderCredentialsRejected,
    ProviderUnavailable,
    UnsupportedPaymentMethod,
)
from payorch.values.pagination import Page, PageRequest, envelope
from payorch.values.secretbox import key_fingerprint
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


def _provider(name: str) -> Provider:
    provider = services().context.providers.get(name)
    if provider is None:
        raise NotFound(f"provider {name!r} is not in the catalogue")
    return provider


def _check_methods(provider: Provider, methods: list[str]) -> list[str]:
    unsupported = sorted(set(methods) - provider.payment_methods)
    if unsupported:
        raise UnsupportedPaymentMethod(
            f"{provider.name} does not offer {', '.join(unsupported)}; it offers "
            f"{', '.join(sorted(provider.payment_methods))}"
        )
    return list(dict.fromkeys(methods))  # keep order, drop repeats


def provider_events_url(provider: str, application_id: object) -> str:
    base_url = services().context.settings.server.public_base_url
    return f"{base_url}/api/v1/provider-events/{provider}/{application_id}"


async def _check_key(provider: Provider, api_key: str) -> None:
    """Ask the provider whether it accepts the key (no side effect there)."""
    try:
        await provider.validate_credentials(Credentials(api_key=api_key))
    except CredentialsRejected as error:
        raise ProviderCredentialsRejected(f"{provider.name} rejected the API key: {error}") from None
    except ProviderError as error:
        raise ProviderUnavailable(f"{provider.name} could not be reached: {error}") from None


async def _register(provider: Provider, api_key: str, application_id: object) -> WebhookRegistration:
    """Register payorch's endpoint for the provider's events on this account."""
    try:
        return await provider.register_webhook(
            Credentials(api_key=api_key), provider_events_url(provider.name, application_id)
        )
    except CredentialsRejected as error:
        raise ProviderCredentialsRejected(f"{provider.name} rejected the API key: {error}") from None
    except ProviderError as error:
        raise ProviderUnavailable(f"{provider.name} could not be reached: {error}") from None


def catalogue_entry(provider: Provider) -> bodies.ProviderCatalogueEntry:
    return {
        "name": provider.name,
        "displayName": provider.display_name,
        "paymentMethods": sorted(provider.payment_methods),
        "eventDelivery": provider.event_delivery,
    }


async def _linked(application_id: uuid.UUID, name: str) -> tuple[Provider, ProviderConfig]:
    provider = _provider(name)
    config = await services().context.db.autocommit(
        provider_configs_store.get_provider_config, application_id, provider.name
    )
    if config is None or config.webhook_secret is None:
        raise NotFound(f"provider {name!r} is not linked to this application")
    return provider, config


# The operations behind the routes below, which the console's pages call too: one path to the data,
# with the same ownership checks (`application_for`), the same checks with the provider and the same
# effects on the routing actors.


def catalogue_of(principal: Principal) -> list[Provider]:
    """The providers this deployment offers, by name: the same for every merchant (`principal` is
    asked for so that only a signed-in caller reads it)."""
    del principal
    return list(services().context.providers)


async def link_provider_of(
    principal: Principal, application_id: str, data: ProviderLinkRequest
) -> ProviderConfig:
    """Link a provider to the application: check the key with the provider, register payorch's event
    endpoint there, store the key sealed. Refused: `NotFound` (not in the catalogue),
    `UnsupportedPaymentMethod`, `ProviderCredentialsRejected`, `ProviderUnavailable`,
    `ProviderAlreadyLinked`; nothing is kept then."""
    application = await application_for(principal, application_id)
    provider = _provider(data.name)
    methods = _check_methods(provider, data.paymentMethods)
    db, secrets = services().context.db, services().context.secrets
    await _check_key(provider, data.credentials.apiKey)
    await db.transaction(
        provider_configs_store.begin_link,
        application_id=application.id,
        provider=provider.name,
        payment_methods=methods,
        credentials=secrets.seal(data.credentials.apiKey),
        key_fingerprint=key_fingerprint(data.credentials.apiKey),
        owner=services().context.node.id,
        now=services().context.clock.now(),
    )
    try:
        registration = await _register(provider, data.credentials.apiKey, application.id)
    except BaseException:
        with trio.CancelScope(shield=True):
            await db.transaction(provider_configs_store.abandon_link, application.id, provider.name)
        raise
    linked = await db.transaction(
        provider_configs_store.finish_change,
        application_id=application.id,
        provider=provider.name,
        credentials=secrets.seal(data.credentials.apiKey),
        key_fingerprint=key_fingerprint(data.credentials.apiKey),
        webhook_reference=registration.reference,
        webhook_secret=secrets.seal(registration.secret),
        now=services().context.clock.now(),
    )
    services().actors.forget_application(application.id)  # the next session routes with it
    return linked


async def provider_configs_of(
    principal: Principal, application_id: str, page: PageRequest
) -> tuple[list[ProviderConfig], int]:
    """A page of the providers linked to the application, newest first, and how many there are."""
    application = await application_for(principal, application_id)
    async with services().limits.list_read(principal.merchant_id):
        return await services().context.db.autocommit(
            provider_configs_store.list_provider_configs, application.id, page
        )


async def replace_api_key_of(
    principal: Principal, application_id: str, provider_name: str, data: ProviderApiKeyRequest
) -> ProviderConfig:
    """Replace a linked provider's key: checked with the provider, and the event endpoint registered
    anew for it; the configuration as it is then (its new fingerprint)."""
    application = await application_for(principal, application_id)
    provider, _ = await _linked(application.id, provider_name)
    await _check_key(provider, data.apiKey)
    db, secrets = services().context.db, services().context.secrets
    await db.transaction(
        provider_configs_store.begin_key_change,
        application.id,
        provider.name,
        services().context.node.id,
        now=services().context.clock.now(),
    )
    try:
        registration = await _register(provider, data.apiKey, application.id)
    except BaseException:
        with trio.CancelScope(shield=True):
            await db.transaction(provider_configs_store.end_key_change, application.id, provider.name)
        raise
    changed = await db.transaction(
        provider_configs_store.finish_change,
        application_id=application.id,
        provider=provider.name,
        credentials=secrets.seal(data.apiKey),
        key_fingerprint=key_fingerprint(data.apiKey),
        webhook_reference=registration.reference,
        webhook_secret=secrets.seal(registration.secret),
        now=services().context.clock.now(),
    )
    services().actors.forget_application(application.id)  # the next session uses the new key
    return changed


async def set_payment_methods_of(
    principal: Principal, application_id: str, provider_name: str, data: ProviderPaymentMethodsRequest
) -> ProviderConfig:
    """Replace the payment methods enabled on a linked provider (`UnsupportedPaymentMethod` for one
    it does not offer)."""
    application = await application_for(principal, application_id)
    provider, _ = await _linked(application.id, provider_name)
    methods = _check_methods(provider, data.paymentMethods)
    updated = await services().context.db.transaction(
        provider_configs_store.set_payment_methods,
        application.id,
        provider.name,
        methods,
        now=services().context.clock.now(),
    )
    services().actors.forget_application(application.id)  # the next session routes with them
    return updated


@blueprint.get("/providers")
@security_scheme(api.JWT)
@document_response(Page[bodies.ProviderCatalogueEntry], 200)
@api.errors(400, 401, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(PageQuery)
async def list_catalogue(query_args: PageQuery, principal: Principal) -> Page[bodies.ProviderCatalogueEntry]:
    """The providers this deployment offers."""
    page = query_args.page_request
    entries = [catalogue_entry(item) for item in catalogue_of(principal)]
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
    return config_body(await link_provider_of(principal, application_id, data)), 201


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
    found, total = await provider_configs_of(principal, application_id, page)
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
    await replace_api_key_of(principal, application_id, provider_name, data)
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
    return config_body(await set_payment_methods_of(principal, application_id, provider_name, data))
