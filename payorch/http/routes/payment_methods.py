"""Which payment methods an application can offer now, for a currency and an amount."""

from __future__ import annotations

from decimal import Decimal

from quart import Blueprint
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, application_for, authenticated
from payorch.http.models import PaymentMethodsQuery
from payorch.http.operations.sessions import money_of
from payorch.http.services import services
from payorch.http.validation import validate_querystring
from payorch.storage import provider_configs
from payorch.values.errors import FieldProblem, InvalidInput, NotPermitted

blueprint = Blueprint("payment_methods", __name__, url_prefix="/api/v1")
tag_blueprint(blueprint, ["Payment methods"])


@blueprint.get("/payment-methods")
@security_scheme(api.JWT_OR_API_KEY)
@document_response(bodies.PaymentMethodList, 200)
@api.errors(400, 401, 403, 404, 429, 500)
@authenticated(Accept.JWT_OR_API_KEY)
@validate_querystring(PaymentMethodsQuery)
async def payment_methods(query_args: PaymentMethodsQuery, principal: Principal) -> bodies.PaymentMethodList:
    """Methods enabled on an active configuration whose provider takes this currency and amount;
    `warnings` say why the list is empty or short."""
    if principal.is_api_key:
        # As for sessions: a key answers for its own application only, never silently for another.
        if query_args.applicationId is not None and query_args.applicationId != principal.application_id:
            raise NotPermitted("this API key belongs to another application")
        application_id = str(principal.application_id)
    elif query_args.applicationId is None:
        raise InvalidInput(
            "applicationId is required with an access token",
            [FieldProblem("applicationId", "required when authenticating with a JWT")],
        )
    else:
        application_id = str(query_args.applicationId)
    application = await application_for(principal, application_id)
    amount = money_of(Decimal(query_args.amount), query_args.currency, "amount")
    configs = await services().context.db.autocommit(provider_configs.active_provider_configs, application.id)
    methods: list[str] = []
    warnings: set[bodies.PaymentMethodWarning] = set()
    connected = False  # a link to a provider this deployment no longer offers connects nothing
    for config in configs:
        provider = services().context.providers.get(config.provider)
        if provider is None:
            continue
        connected = True
        for method in config.payment_methods:
            limits = provider.limits(amount.currency, method)
            if limits is None:
                warnings.add("CURRENCY_NOT_SUPPORTED")
            elif not limits.min_minor <= amount.minor <= limits.max_minor:
                warnings.add("AMOUNT_OUT_OF_RANGE")
            elif method not in methods:
                methods.append(method)
    if not connected:
        warnings.add("NO_ACTIVE_PROVIDER_CONNECTIONS")
    body: bodies.PaymentMethodList = {"paymentMethods": sorted(methods)}
    if warnings:
        body["warnings"] = sorted(warnings)
    return body
