"""The provider catalogue, and the providers linked to an application: linked (the key checked with
the provider, payorch's event endpoint registered there, the key stored sealed), listed, their key
replaced or their payment methods changed, with the same ownership checks, the same checks with the
provider and the same effects on the application actors for the API's routes and the console's
pages."""

from __future__ import annotations

import uuid

import trio

from payorch.http.auth import Principal, application_for
from payorch.http.models import (
    ProviderApiKeyRequest,
    ProviderCredentials,
    ProviderLinkRequest,
    ProviderPaymentMethodsRequest,
)
from payorch.http.operations.pages import application_page
from payorch.http.services import Services
from payorch.providers.base import (
    Credentials,
    CredentialsRejected,
    Provider,
    ProviderError,
    TakesCredentialFields,
    WebhookRegistration,
    provider_events_url,
)
from payorch.storage import provider_configs as provider_configs_store
from payorch.storage.provider_configs import ProviderConfig
from payorch.values.errors import (
    FieldProblem,
    InvalidInput,
    NotFound,
    ProviderCredentialsRejected,
    ProviderUnavailable,
    UnsupportedPaymentMethod,
)
from payorch.values.pagination import PageRequest
from payorch.values.secretbox import key_fingerprint


def _provider(services: Services, name: str) -> Provider:
    provider = services.context.providers.get(name)
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


def _credentials(provider: Provider, given: ProviderCredentials, prefix: str) -> Credentials:
    """The credentials the request gives for `provider`: its `apiKey`, or the fields of a provider
    that takes several (`TakesCredentialFields`). `InvalidInput` (400) naming each field (under
    `prefix`) that is missing, of the wrong form, or not the provider's."""
    given_fields = {name: value for name, value in given.model_dump().items() if value is not None}
    wanted = provider.credential_fields if isinstance(provider, TakesCredentialFields) else {"apiKey": ""}
    foreign = sorted(set(given_fields) - set(wanted))
    if foreign:
        raise InvalidInput(
            f"{provider.name} takes the credentials {', '.join(wanted)}",
            [FieldProblem(f"{prefix}{name}", f"{provider.name} does not take it") for name in foreign],
        )
    if not isinstance(provider, TakesCredentialFields):
        if given.apiKey is None:
            raise InvalidInput("apiKey is required", [FieldProblem(f"{prefix}apiKey", "is required")])
        return Credentials(api_key=given.apiKey)
    try:
        return provider.credentials_from(given_fields)
    except CredentialsRejected as error:
        raise _naming_fields(provider, error, prefix) from None


def _naming_fields(provider: Provider, error: CredentialsRejected, prefix: str) -> InvalidInput:
    return InvalidInput(
        f"{provider.name} rejected the credentials: {error}",
        [FieldProblem(f"{prefix}{name}", str(error)) for name in error.fields],
    )


def _fingerprint(provider: Provider, credentials: Credentials) -> str:
    if isinstance(provider, TakesCredentialFields):
        return provider.fingerprint(credentials)
    return key_fingerprint(credentials.api_key)


async def _check_key(provider: Provider, credentials: Credentials, prefix: str) -> None:
    """Ask the provider whether it accepts the credentials (no side effect there)."""
    try:
        await provider.validate_credentials(credentials)
    except CredentialsRejected as error:
        if error.fields:
            raise _naming_fields(provider, error, prefix) from None
        raise ProviderCredentialsRejected(f"{provider.name} rejected the API key: {error}") from None
    except ProviderError as error:
        raise ProviderUnavailable(f"{provider.name} could not be reached: {error}") from None


async def _register(
    services: Services, provider: Provider, credentials: Credentials, application_id: uuid.UUID
) -> WebhookRegistration:
    """Register payorch's endpoint for the provider's events on this account."""
    base_url = services.context.settings.server.public_base_url
    try:
        return await provider.register_webhook(
            credentials, provider_events_url(base_url, provider.name, application_id)
        )
    except CredentialsRejected as error:
        raise ProviderCredentialsRejected(f"{provider.name} rejected the API key: {error}") from None
    except ProviderError as error:
        raise ProviderUnavailable(f"{provider.name} could not be reached: {error}") from None


async def _linked(services: Services, application_id: uuid.UUID, name: str) -> Provider:
    """The provider `name`, linked to the application (`NotFound` otherwise)."""
    provider = _provider(services, name)
    config = await services.context.db.autocommit(
        provider_configs_store.get_provider_config, application_id, provider.name
    )
    if config is None or config.webhook_secret is None:
        raise NotFound(f"provider {name!r} is not linked to this application")
    return provider


async def _finish_change(
    services: Services,
    application_id: uuid.UUID,
    provider: Provider,
    credentials: Credentials,
    registration: WebhookRegistration,
) -> ProviderConfig:
    """Store the checked `credentials` and the endpoint registered with them, sealed, ending a link or
    a key change; the application's actors route with them from their next session on."""
    secrets = services.context.secrets
    changed = await services.context.db.transaction(
        provider_configs_store.finish_change,
        application_id=application_id,
        provider=provider.name,
        credentials=secrets.seal(credentials.api_key),
        key_fingerprint=_fingerprint(provider, credentials),
        webhook_reference=registration.reference,
        webhook_secret=secrets.seal(registration.secret),
        now=services.context.clock.now(),
    )
    _forget(services, application_id)
    return changed


def list_catalogue(services: Services, principal: Principal) -> list[Provider]:
    """The providers this deployment offers, by name: the same for every merchant (`principal` is
    asked for so that only a signed-in caller reads it)."""
    del principal
    return list(services.context.providers)


async def link_provider(
    services: Services, principal: Principal, application_id: str, data: ProviderLinkRequest
) -> ProviderConfig:
    """Link a provider to the application: check the key with the provider, register payorch's event
    endpoint there, store the key sealed. Refused: `NotFound` (not in the catalogue),
    `UnsupportedPaymentMethod`, `ProviderCredentialsRejected`, `ProviderUnavailable`,
    `ProviderAlreadyLinked`; nothing is kept then."""
    application = await application_for(principal, application_id)
    provider = _provider(services, data.name)
    methods = _check_methods(provider, data.paymentMethods)
    db, secrets = services.context.db, services.context.secrets
    credentials = _credentials(provider, data.credentials, "credentials.")
    await _check_key(provider, credentials, "credentials.")
    await db.transaction(
        provider_configs_store.begin_link,
        application_id=application.id,
        provider=provider.name,
        payment_methods=methods,
        credentials=secrets.seal(credentials.api_key),
        key_fingerprint=_fingerprint(provider, credentials),
        owner=services.context.node.id,
        now=services.context.clock.now(),
    )
    try:
        registration = await _register(services, provider, credentials, application.id)
    except BaseException:
        with trio.CancelScope(shield=True):
            await db.transaction(provider_configs_store.abandon_link, application.id, provider.name)
        raise
    return await _finish_change(services, application.id, provider, credentials, registration)


async def list_provider_configs(
    services: Services, principal: Principal, application_id: str, page: PageRequest
) -> tuple[list[ProviderConfig], int]:
    """A page of the providers linked to the application, newest first, and how many there are."""
    return await application_page(
        services, principal, application_id, provider_configs_store.list_provider_configs, page
    )


async def replace_provider_key(
    services: Services,
    principal: Principal,
    application_id: str,
    provider_name: str,
    data: ProviderApiKeyRequest,
) -> ProviderConfig:
    """Replace a linked provider's key: checked with the provider, and the event endpoint registered
    anew for it; the configuration as it is then (its new fingerprint)."""
    application = await application_for(principal, application_id)
    provider = await _linked(services, application.id, provider_name)
    credentials = _credentials(provider, data, "")
    await _check_key(provider, credentials, "")
    db = services.context.db
    await db.transaction(
        provider_configs_store.begin_key_change,
        application.id,
        provider.name,
        services.context.node.id,
        now=services.context.clock.now(),
    )
    try:
        registration = await _register(services, provider, credentials, application.id)
    except BaseException:
        with trio.CancelScope(shield=True):
            await db.transaction(provider_configs_store.end_key_change, application.id, provider.name)
        raise
    return await _finish_change(services, application.id, provider, credentials, registration)


async def set_payment_methods(
    services: Services,
    principal: Principal,
    application_id: str,
    provider_name: str,
    data: ProviderPaymentMethodsRequest,
) -> ProviderConfig:
    """Replace the payment methods enabled on a linked provider (`UnsupportedPaymentMethod` for one
    it does not offer)."""
    application = await application_for(principal, application_id)
    provider = await _linked(services, application.id, provider_name)
    methods = _check_methods(provider, data.paymentMethods)
    updated = await services.context.db.transaction(
        provider_configs_store.set_payment_methods,
        application.id,
        provider.name,
        methods,
        now=services.context.clock.now(),
    )
    _forget(services, application.id)
    return updated


def _forget(services: Services, application_id: uuid.UUID) -> None:
    """What this process keeps of the application's provider configurations, dropped once a change
    of one commits (other processes hear of it from PostgreSQL): the next session routes with the
    change, and the next provider event is checked against it."""
    services.actors.forget_application(application_id)
    services.provider_configs.forget_application(application_id)


async def config_for_event(
    services: Services, application_id: uuid.UUID, provider: str
) -> ProviderConfig | None:
    """The application's configuration of `provider` that an inbound event of it is checked against,
    as this process remembers it (`http/provider_config_cache.py`) or read; None when there is none."""
    cache = services.provider_configs
    remembered = cache.get(application_id, provider, trio.current_time())
    if remembered is not None:
        return remembered.config
    generation = cache.generation
    config = await services.context.db.autocommit(
        provider_configs_store.get_provider_config, application_id, provider
    )
    cache.put(application_id, provider, config, trio.current_time(), generation)
    return config
