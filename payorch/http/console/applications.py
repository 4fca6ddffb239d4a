"""The merchant's applications and their API keys.

    GET  /console/applications                      the merchant's applications; POST creates one
    GET  /console/applications/<id>                 one application and its API keys by prefix
    POST /console/applications/<id>/status          enable or disable (field `enabled`)
    POST /console/applications/<id>/api-keys        a new key, shown on the answer only
    POST /console/applications/<id>/api-keys/<key>/revoke

Every action calls the operation the API's route calls (`routes/applications.py`), so ownership,
validation and rate limits are the API's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quart import Response, url_for
from werkzeug.datastructures import MultiDict

from payorch.http.auth import application_for
from payorch.http.console.activity import activity_of
from payorch.http.console.kit import (
    Session,
    action,
    application_section,
    blueprint,
    field_errors,
    listing,
    page,
    render_page,
    see_other,
    text_fields,
    true_or_false,
    validated,
)
from payorch.http.jsonio import loads_request_json
from payorch.http.models import ApiKeyCreateRequest, ApplicationCreateRequest, ApplicationStatusRequest
from payorch.http.routes.applications import (
    api_keys_of,
    applications_of,
    create_api_key_of,
    create_application_of,
    revoke_api_key_of,
    set_status_of,
)
from payorch.jsonexact import dumps_exact
from payorch.values import errors as domain

application_section("Overview", "application")


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
        listing=await listing(lambda page: applications_of(session.principal, page, with_api_keys=True)),
        form={"name": "", "description": "", **(form or {})},
        errors=errors or {},
        activity=await activity_of(session.principal),
    )


@blueprint.get("/applications")
@page
async def applications(session: Session) -> tuple[str, int]:
    return await _applications_page(session, 200)


@blueprint.post("/applications")
@action
async def create_application(session: Session, form: MultiDict[str, str]) -> Any:
    """Create an application with the API's validation (`ApplicationCreateRequest`); the description
    is a JSON object written in a text area, parsed as the API parses its bodies."""
    shown = {"name": form.get("name", ""), "description": form.get("description", "")}
    try:
        fields = text_fields(form, ("name", "description"))
        description = None
        if fields["description"].strip():
            try:
                description = loads_request_json(fields["description"])
            except domain.InvalidInput as error:
                problem = error.details[0].message if error.details else error.message
                raise domain.InvalidInput(
                    "validation failed",
                    [domain.FieldProblem("description", f"must be a JSON object: {problem}")],
                ) from None
        data = validated(ApplicationCreateRequest, {"name": fields["name"], "description": description})
    except domain.InvalidInput as error:
        return await _applications_page(session, 400, form=shown, errors=field_errors(error))
    created = await create_application_of(session.principal, data)
    return see_other(url_for("console.application", application_id=created.id))


@blueprint.post("/applications/<application_id>/status")
@action
async def application_status(application_id: str, session: Session, form: MultiDict[str, str]) -> Response:
    enabled = true_or_false(form, "enabled")
    updated = await set_status_of(
        session.principal, application_id, ApplicationStatusRequest(isEnabled=enabled)
    )
    if form.get("back") == "application":
        return see_other(url_for("console.application", application_id=updated.id))
    return see_other(url_for("console.applications"))


async def _application_page(
    session: Session,
    application_id: str,
    status: int,
    *,
    form: Mapping[str, str] | None = None,
    errors: dict[str, str] | None = None,
) -> tuple[str, int]:
    application = await application_for(session.principal, application_id)
    return await render_page(
        "console/application.html",
        session,
        status,
        title=application.name,
        application=application,
        description=dumps_exact(application.description) if application.description else None,
        listing=await listing(lambda page: api_keys_of(session.principal, application_id, page)),
        form={"description": "", **(form or {})},
        errors=errors or {},
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
    key, created = await create_api_key_of(session.principal, application_id, data)
    application = await application_for(session.principal, application_id)
    return await render_page(
        "console/api_key_created.html",
        session,
        201,
        title="New API key",
        application=application,
        key=created,
        secret=key,
    )


@blueprint.post("/applications/<application_id>/api-keys/<key_id>/revoke")
@action
async def revoke_api_key(
    application_id: str, key_id: str, session: Session, form: MultiDict[str, str]
) -> Response:
    await revoke_api_key_of(session.principal, application_id, key_id)
    return see_other(url_for("console.application", application_id=application_id))
