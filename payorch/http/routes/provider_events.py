"""Inbound provider events: verified with the provider's own signature, then applied by the
application's actor. No JWT: the signature is the credential."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from payorch.engine.errors import InvalidInput, NotFound
from payorch.engine.provider_events import ApplyProviderEvent
from payorch.http.auth import parse_id
from payorch.http.context import services
from payorch.http.requestlog import note_application
from payorch.providers.base import EventRejected
from payorch.storage import provider_configs

blueprint = Blueprint("provider_events", __name__, url_prefix="/api/v1/provider-events")


@blueprint.post("/<provider_name>/<application_id>")
async def receive_provider_event(provider_name: str, application_id: str) -> dict[str, Any]:
    """Apply a provider's event once; a redelivered event answers 200 and changes nothing."""
    provider = services().providers.get(provider_name)
    if provider is None:
        raise NotFound(f"provider {provider_name!r} is not in the catalogue")
    app_id = parse_id(application_id, "application")
    config = await services().db.read(provider_configs.get_provider_config, app_id, provider.name)
    if config is None or config.webhook_secret is None:
        raise NotFound("no such provider configuration")
    note_application(app_id)
    body = await request.get_data(as_text=False)
    assert isinstance(body, bytes)
    try:
        event = provider.parse_event(
            dict(request.headers), body, services().secrets.open(config.webhook_secret)
        )
    except EventRejected as error:
        raise InvalidInput(f"event rejected: {error}") from None
    applied = await services().actors.ask(app_id, ApplyProviderEvent(provider.name, event))
    return {"received": True, "applied": applied}
