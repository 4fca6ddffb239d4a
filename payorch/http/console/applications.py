"""The merchant's applications and their API keys.

    GET  /console/applications                      the merchant's applications; POST creates one
    GET  /console/applications/<id>                 one application: its first steps (`guide.py`), its
                                                    API keys by prefix, a test payment
    POST /console/applications/<id>/status          enable, or disable (field `enabled`): disabling
                                                    asks first, and is done with `confirm=yes`
    POST /console/applications/<id>/api-keys        a new key, shown on the answer only
    POST /console/applications/<id>/api-keys/<key>/revoke
    POST /console/applications/<id>/test-payment    a session of 10.00 PLN, then 303 to its checkout

Every action calls the operation the API's route calls (`operations/applications.py`; the test
payment the session create's, `guide.create_test_session`), so ownership, validation and rate limits are the
API's. The description is written as text (`descriptions.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quart import Response, url_for
from werkzeug.datastructures import MultiDict

from payorch.http.auth import application_for
from payorch.http.console.activity import activity_of
from payorch.http.console.descriptions import description_of, shown
from payorch.http.console.figures import figures_of
from payorch.http.console.guide import (
    TEST_PRICE,
    TestPaymentRefused,
    create_test_session,
    here,
    new_test_key,
    progress_of,
)
from payorch.http.console.kit import (
    Session,
    action,
    application_section,
    blueprint,
    done_notice,
    field_errors,
    listing,
    page,
    render_page,
    see_other,
    text_fields,
    true_or_false,
    validated,
)
from payorch.http.models import ApiKeyCreateRequest, ApplicationCreateRequest, ApplicationStatusRequest
from payorch.http.operations import applications as operations
from payorch.http.services import services
from payorch.values import errors as domain

application_section("Overview", "application")

# What the form posted just before did, said after its redirect (`?done=...`): payorch's own words,
# never taken from the address.
DONE = {
    "created": "The application is created.",
    "enabled": "The application is enabled: its API keys work again.",
    "disabled": "The application is disabled: its API keys are refused until it is enabled again.",
}


# --- Applications ------------------------------------------------------------------------------


async def _applications_page(
    session: Session,
    status: int,
    *,
    form: Mapping[str, str] | None = None,
    errors: dict[str, str] | None = None,
) -> tuple[str, int]:
    return await render_page(
        "console/applications.html",
        session,
        status,
        title="Applications",
        listing=await listing(
            lambda page: operations.list_applications(services(), session.principal, page, with_api_keys=True)
        ),
        form={"name": "", "description": "", **(form or {})},
        errors=errors or {},
        activity=await activity_of(session.principal),
        figures=await figures_of(session.principal, None),
        notice=done_notice(DONE, status),
    )


@blueprint.get("/applications")
@page
async def applications(session: Session) -> tuple[str, int]:
    return await _applications_page(session, 200)


@blueprint.post("/applications")
@action
async def create_application(session: Session, form: MultiDict[str, str]) -> Any:
    """Create an application with the API's validation (`ApplicationCreateRequest`); the description
    is the text area's text as `descriptions.description_of` reads it. Then its overview, which
    says what comes next."""
    sent = {"name": form.get("name", ""), "description": form.get("description", "")}
    try:
        fields = text_fields(form, ("name", "description"))
        description = description_of(fields["description"])
        data = validated(ApplicationCreateRequest, {"name": fields["name"], "description": description})
    except domain.InvalidInput as error:
        return await _applications_page(session, 400, form=sent, errors=field_errors(error))
    created = await operations.create_application(services(), session.principal, data)
    return see_other(url_for("console.application", application_id=created.id, done="created"))


@blueprint.post("/applications/<application_id>/status")
@action
async def application_status(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """Enable at once; disable only with `confirm=yes`, else the page asking to confirm (nothing
    changed), as deleting a webhook configuration asks. Then the page the form was on (`back`)."""
    enabled = true_or_false(form, "enabled")
    back = "application" if form.get("back") == "application" else "applications"
    if not enabled and form.get("confirm") != "yes":
        application = await application_for(session.principal, application_id)
        return await render_page(
            "console/application_disable.html",
            session,
            title=f"Disable {application.name}?",
            application=application,
            back=back,
        )
    updated = await operations.set_application_status(
        services(), session.principal, application_id, ApplicationStatusRequest(isEnabled=enabled)
    )
    done = "enabled" if enabled else "disabled"
    if back == "application":
        return see_other(url_for("console.application", application_id=updated.id, done=done))
    return see_other(url_for("console.applications", done=done))


async def _application_page(
    session: Session,
    application_id: str,
    status: int,
    *,
    form: Mapping[str, str] | None = None,
    errors: dict[str, str] | None = None,
    test_refused: TestPaymentRefused | None = None,
) -> tuple[str, int]:
    application = await application_for(session.principal, application_id)
    return await render_page(
        "console/application.html",
        session,
        status,
        title=application.name,
        application=application,
        description=shown(application.description),
        listing=await listing(
            lambda page: operations.list_api_keys(services(), session.principal, application_id, page)
        ),
        form={"description": "", **(form or {})},
        errors=errors or {},
        notice=done_notice(DONE, status),
        progress=await progress_of(session.principal, application_id),
        # A new key each time the page is rendered: its test payment form sent again is one payment.
        test_key=new_test_key(),
        test_price=TEST_PRICE,
        test_refused=test_refused,
        figures=await figures_of(session.principal, application.id),
    )


@blueprint.get("/applications/<application_id>")
@page
async def application(application_id: str, session: Session) -> tuple[str, int]:
    return await _application_page(session, application_id, 200)


@blueprint.post("/applications/<application_id>/api-keys")
@action
async def create_api_key(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """A new key, shown on this answer and never again (no redirect: nothing keeps it to show later)."""
    try:
        data = validated(ApiKeyCreateRequest, text_fields(form, ("description",)))
    except domain.InvalidInput as error:
        shown = {"description": form.get("description", "")}
        return await _application_page(session, application_id, 400, form=shown, errors=field_errors(error))
    key, created = await operations.create_api_key(services(), session.principal, application_id, data)
    application = await application_for(session.principal, application_id)
    return await render_page(
        "console/api_key_created.html",
        session,
        201,
        title="New API key",
        application=application,
        key=created,
        secret=key,
        progress=await progress_of(session.principal, application_id),
    )


@blueprint.post("/applications/<application_id>/api-keys/<key_id>/revoke")
@action
async def revoke_api_key(
    application_id: str, key_id: str, session: Session, form: MultiDict[str, str]
) -> Response:
    await operations.revoke_api_key(services(), session.principal, application_id, key_id)
    return see_other(url_for("console.application", application_id=application_id))


@blueprint.post("/applications/<application_id>/test-payment")
@action
async def test_payment(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """Create a test payment's session (`guide.create_test_session`) and open its checkout page
    (303). Refused: the overview again, with the API's status and why, next to the button."""
    try:
        checkout_url = await create_test_session(session.principal, application_id, form)
    except TestPaymentRefused as refused:
        return await _application_page(session, application_id, refused.status, test_refused=refused)
    return see_other(here(checkout_url))
