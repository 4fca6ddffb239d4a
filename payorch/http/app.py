"""The Quart-Trio application: blueprints, error shapes, request log, JSON that keeps money exact."""

from __future__ import annotations

from quart_schema import QuartSchema

from payorch.http import openapi_models
from payorch.http.context import PayorchApp, Services
from payorch.http.errors import install_error_handlers
from payorch.http.jsonio import ExactJsonProvider
from payorch.http.requestlog import install_request_log
from payorch.http.routes import (
    accounts,
    applications,
    checkout_result,
    docs,
    health,
    metrics,
    payment_methods,
    provider_events,
    providers,
    refunds,
    sessions,
    webhooks,
)
from payorch.providers.sandbox import pages as sandbox_pages


class _App(PayorchApp):
    json_provider_class = ExactJsonProvider


def create_app(services: Services) -> PayorchApp:
    """A new app serving with `services`; nothing is shared between two apps."""
    app = _App("payorch")
    app.services = services
    app.config["MAX_CONTENT_LENGTH"] = services.settings.server.max_body_bytes
    app.config["JSON_SORT_KEYS"] = False
    QuartSchema(
        app,
        openapi_path="/api/v1/openapi.json",
        redoc_ui_path=None,
        scalar_ui_path=None,
        swagger_ui_path=None,  # /docs serves a Swagger UI of its own, without any outside asset
        info=openapi_models.INFO,
        tags=list(openapi_models.TAGS),
        security_schemes=dict(openapi_models.SECURITY_SCHEMES),
        openapi_provider_class=openapi_models.PayorchOpenAPIProvider,
    )
    # QuartSchema installs its own JSON provider, which would parse amounts as float: put ours back.
    app.json = ExactJsonProvider(app)
    install_request_log(app)
    install_error_handlers(app)
    for blueprint in (
        health.blueprint,
        metrics.blueprint,
        docs.blueprint,
        accounts.blueprint,
        applications.blueprint,
        sessions.blueprint,
        providers.blueprint,
        provider_events.blueprint,
        payment_methods.blueprint,
        refunds.blueprint,
        webhooks.blueprint,
        sandbox_pages.blueprint,
        checkout_result.blueprint,
    ):
        app.register_blueprint(blueprint)
    return app
