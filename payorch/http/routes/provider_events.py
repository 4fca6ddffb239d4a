"""Inbound provider events: verified with the provider's own signature, completed with a lookup at
the provider where the event names payorch's session only indirectly, then applied by the
application's actor. No JWT: the signature is the credential."""

from __future__ import annotations

from quart import Blueprint, request
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.engine.context import credentials_of
from payorch.engine.payments.provider_events import ApplyProviderEvent
from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import parse_id
from payorch.http.operations.providers import config_for_event
from payorch.http.requestlog import note_application
from payorch.http.services import services
from payorch.providers.base import EventRejected, ProviderError
from payorch.values.errors import InvalidInput, NotFound, ProviderUnavailable

blueprint = Blueprint("provider_events", __name__, url_prefix="/api/v1/provider-events")
tag_blueprint(blueprint, ["Provider events"])


@blueprint.post("/<provider_name>/<application_id>")
@security_scheme(api.NO_CREDENTIALS)
@document_response(bodies.ProviderEventReceived, 200)
@api.errors(400, 404, 413, 429, 500, 502, 503)
async def receive_provider_event(provider_name: str, application_id: str) -> bodies.ProviderEventReceived:
    """Apply a provider's event once; a redelivered event answers 200 and changes nothing."""
    await services().limits.pace_provider_event(request.remote_addr)
    provider = services().context.providers.get(provider_name)
    if provider is None:
        raise NotFound(f"provider {provider_name!r} is not in the catalogue")
    app_id = parse_id(application_id, "application")
    config = await config_for_event(services(), app_id, provider.name)
    if config is None or config.webhook_secret is None:
        raise NotFound("no such provider configuration")
    note_application(app_id)
    body = await request.get_data(as_text=False)
    assert isinstance(body, bytes)
    try:
        event = provider.parse_event(
            dict(request.headers), body, services().context.secrets.open(config.webhook_secret)
        )
    except EventRejected as error:
        raise InvalidInput(f"event rejected: {error}") from None
    try:
        with services().limits.provider_event_lookup(app_id):
            resolved = await provider.resolve_event(credentials_of(services().context.secrets, config), event)
    except ProviderError as error:
        # Not applied: the provider sends the event again, by when it may answer.
        raise ProviderUnavailable(f"could not look the event up with {provider.display_name}") from error
    applied = False
    for each in resolved:
        if await services().actors.ask(app_id, ApplyProviderEvent(provider.name, each)):
            applied = True
    return {"received": True, "applied": applied}
