"""The providers linked to one application: link one the catalogue offers, change its payment
methods, replace its API key. Only a key's fingerprint is ever shown.

    GET  /console/applications/<id>/providers                   the linked providers, a form for each
                                                                other provider of the catalogue
    POST /console/applications/<id>/providers                   link (`provider`, `apiKey`, `paymentMethods`)
    POST /console/applications/<id>/providers/payment-methods   (`provider`, `paymentMethods`)
    POST /console/applications/<id>/providers/api-key           (`provider`, `apiKey`)

A provider linked with several credentials (PayU: `TakesCredentialFields`) has a field for each
instead of `apiKey`, named as the API names them (`posId`, `clientId`...), each with its form.

Every action calls the operation the API's route calls (`operations/providers.py`), so ownership,
validation, the provider's checks and rate limits are the API's. A refusal shows the page again with
the API's status and message next to the field it is about, the ticked methods kept and the key
field empty.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from quart import request, url_for
from werkzeug.datastructures import MultiDict

from payorch.http.auth import application_for
from payorch.http.console.guide import progress_of
from payorch.http.console.kit import (
    Session,
    action,
    api_status,
    application_section,
    blueprint,
    done_notice,
    field_errors,
    listing,
    page,
    render_page,
    see_other,
    text_fields,
    validated,
)
from payorch.http.jsonio import unstorable_text_problem
from payorch.http.models import ProviderApiKeyRequest, ProviderLinkRequest, ProviderPaymentMethodsRequest
from payorch.http.operations import providers as operations
from payorch.http.services import services
from payorch.providers.base import Provider, TakesCredentialFields
from payorch.storage.provider_configs import ProviderConfig
from payorch.values import errors as domain

application_section("Providers", "providers")

# What the operations refuse that the page shows next to its form; anything else (another merchant's
# application, a rate limit) gets the console's own error pages.
REFUSALS = (
    domain.InvalidInput,
    domain.NotFound,  # the provider: the application was found before the operation ran
    domain.UnsupportedPaymentMethod,
    domain.ProviderCredentialsRejected,
    domain.ProviderUnavailable,
    domain.ProviderAlreadyLinked,
    domain.ChangeInProgress,
)
# The form's field for each field the API names (`credentials.apiKey` is the link form's `apiKey`);
# the others are about the form as a whole.
FORM_FIELD = {"paymentMethods": "paymentMethods", "credentials": "apiKey", "apiKey": "apiKey"}
EVENT_DELIVERY = {
    "registered_endpoint": "payorch registers an endpoint for them with the provider",
    "per_payment_url": "each payment tells the provider where to send them",
    "signed_per_payment_url": "each payment tells the provider where to send them, signed with your key",
}
DONE = {
    "linked": "{name} is linked.",
    "methods": "The payment methods of {name} are saved.",
    "key": "The API key of {name} is replaced: its fingerprint is now {fingerprint}.",
}


@dataclass(frozen=True)
class Linked:
    config: ProviderConfig
    provider: Provider | None  # None when this deployment no longer offers it

    @property
    def display_name(self) -> str:
        return self.provider.display_name if self.provider else self.config.provider


@dataclass(frozen=True)
class Refused:
    """A form the operation refused: which one (`link-sandbox`...), what it had ticked, and why."""

    form: str
    ticked: list[str]
    errors: dict[str, str]  # by the form's field, `form` for the form as a whole
    status: int


def _refused(form: str, ticked: list[str], error: domain.DomainError) -> Refused:
    status = api_status(error) or 500  # each of REFUSALS has the API's status
    errors: dict[str, str] = {}
    if isinstance(error, domain.InvalidInput):
        for problem in error.details:  # a credential field of its own (`credentials.posId`)
            name = problem.field.removeprefix("credentials.")
            if name in _CREDENTIAL_FIELDS:
                errors.setdefault(name, problem.message)
        for field, message in field_errors(error).items():
            if not errors or field not in ("credentials", *_CREDENTIAL_FIELDS):
                errors.setdefault(FORM_FIELD.get(field, "form"), message)
        errors = errors or {"form": error.message}
    elif isinstance(error, domain.UnsupportedPaymentMethod):
        errors["paymentMethods"] = error.message
    elif isinstance(error, domain.ProviderCredentialsRejected):
        errors["apiKey"] = error.message
    else:
        errors["form"] = error.message
    return Refused(form, ticked, errors, status)


# Every credential field a provider of payorch's may take besides `apiKey`.
_CREDENTIAL_FIELDS = ("posId", "clientId", "clientSecret", "secondKey", "environment", "organizationToken")


def _credentials(form: MultiDict[str, str]) -> dict[str, str]:
    """The credentials the form gives: the provider's own fields when it takes several, else `apiKey`
    (fields left empty are left out, so the API says they are required)."""
    provider = services().context.providers.get(form.get("provider", ""))
    names = tuple(provider.credential_fields) if isinstance(provider, TakesCredentialFields) else ("apiKey",)
    return {name: value for name, value in text_fields(form, names).items() if value}


def _ticked(form: MultiDict[str, str]) -> list[str]:
    """The ticked payment methods; `InvalidInput` for text PostgreSQL cannot store."""
    ticked = form.getlist("paymentMethods")
    for method in ticked:
        problem = unstorable_text_problem(method)
        if problem is not None:
            raise domain.InvalidInput(
                "the form holds text that cannot be stored", [domain.FieldProblem("paymentMethods", problem)]
            )
    return ticked


def _done_notice(linked: list[Linked]) -> str | None:
    """What the form posted just before did (`?done=...&provider=...`, after its redirect)."""
    template = done_notice(DONE)
    found = next((item for item in linked if item.config.provider == request.args.get("provider")), None)
    if template is None or found is None:
        return None
    return template.format(name=found.display_name, fingerprint=found.config.key_fingerprint)


async def _providers_page(
    session: Session, application_id: str, refused: Refused | None = None
) -> tuple[str, int]:
    application = await application_for(session.principal, application_id)
    configs = await listing(
        lambda page: operations.list_provider_configs(services(), session.principal, application_id, page)
    )
    catalogue = operations.list_catalogue(services(), session.principal)
    offered = {provider.name: provider for provider in catalogue}
    linked = [Linked(config, offered.get(config.provider)) for config in configs.items]
    unlinked = [
        provider for provider in catalogue if provider.name not in {c.provider for c in configs.items}
    ]
    forms = {f"link-{provider.name}" for provider in unlinked} | {
        f"{kind}-{item.config.provider}" for item in linked if item.provider for kind in ("methods", "key")
    }
    errors: dict[str, str] = {}
    page_alert = None
    if refused is not None:
        errors = {f"{refused.form}-{field}": message for field, message in refused.errors.items()}
        if refused.form not in forms:  # its form is not on the page (any more): say it on top
            page_alert = " ".join(refused.errors.values())
    return await render_page(
        "console/providers.html",
        session,
        refused.status if refused else 200,
        title="Providers",
        application=application,
        listing=configs,
        linked=linked,
        unlinked=unlinked,
        event_delivery=EVENT_DELIVERY,
        credential_fields={
            provider.name: provider.credential_fields
            for provider in catalogue
            if isinstance(provider, TakesCredentialFields)
        },
        notice=_done_notice(linked) if refused is None else None,
        # After a link, the step that follows it (`guide.py`).
        progress=await progress_of(session.principal, application_id)
        if refused is None and request.args.get("done") == "linked"
        else None,
        page_alert=page_alert,
        refused_form=refused.form if refused else None,
        refused_ticked=refused.ticked if refused else [],
        errors=errors,
    )


async def _submit(
    session: Session,
    application_id: str,
    form: MultiDict[str, str],
    where: str,
    done: str,
    change: Callable[[], Awaitable[object]],
) -> Any:
    """Make the `change` a form asks of its `provider` (the API's operation, after the form's input is
    validated). Refused: the page again, why next to that form (`<where>-<provider>`), its boxes
    ticked as they were sent. Done: back to the page, which says so (`?done=<done>`)."""
    await application_for(session.principal, application_id)  # another merchant's: the 404 page
    name, ticked = form.get("provider", ""), form.getlist("paymentMethods")
    try:
        await change()
    except REFUSALS as error:
        return await _providers_page(session, application_id, _refused(f"{where}-{name}", ticked, error))
    return see_other(url_for("console.providers", application_id=application_id, done=done, provider=name))


@blueprint.get("/applications/<application_id>/providers")
@page
async def providers(application_id: str, session: Session) -> tuple[str, int]:
    return await _providers_page(session, application_id)


@blueprint.post("/applications/<application_id>/providers")
@action
async def link_provider(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """Link the provider `provider` with the key `apiKey` and the ticked `paymentMethods`."""

    async def link() -> None:
        fields = text_fields(form, ("provider",))
        data = validated(
            ProviderLinkRequest,
            {"name": fields["provider"], "paymentMethods": _ticked(form), "credentials": _credentials(form)},
        )
        await operations.link_provider(services(), session.principal, application_id, data)

    return await _submit(session, application_id, form, "link", "linked", link)


@blueprint.post("/applications/<application_id>/providers/payment-methods")
@action
async def provider_payment_methods(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """Enable the ticked `paymentMethods` of the linked provider `provider`, and only those."""

    async def set_methods() -> None:
        fields = text_fields(form, ("provider",))
        data = validated(ProviderPaymentMethodsRequest, {"paymentMethods": _ticked(form)})
        await operations.set_payment_methods(
            services(), session.principal, application_id, fields["provider"], data
        )

    return await _submit(session, application_id, form, "methods", "methods", set_methods)


@blueprint.post("/applications/<application_id>/providers/api-key")
@action
async def provider_api_key(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """Replace the key of the linked provider `provider` with `apiKey`."""

    async def replace_key() -> None:
        fields = text_fields(form, ("provider",))
        data = validated(ProviderApiKeyRequest, _credentials(form))
        await operations.replace_provider_key(
            services(), session.principal, application_id, fields["provider"], data
        )

    return await _submit(session, application_id, form, "key", "key", replace_key)
