"""The merchant's users and their roles, and invitations of more.

    GET  /console/users                          the users and the open invitations (every role);
                                                 an admin also sees the forms below
    POST /console/users/invite                   an invitation (e-mail, role); its link is shown on
                                                 the answer only, to hand on
    POST /console/users/<id>/role                another role (field `role`)
    POST /console/users/<id>/remove              asks first; done with `confirm=yes`
    POST /console/users/invites/<id>/revoke      the invitation's link refused from then on

Each calls the operation the API's route calls (`operations/users.py`), so the merchant's scope, the
last-admin rule (409) and validation are the API's; a read-only user's POST is refused (403) by
`http.auth.permit_role` before any of this runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quart import url_for
from werkzeug.datastructures import MultiDict

from payorch.http.console.join import ROLE_DUTIES, ROLE_WORDS
from payorch.http.console.kit import (
    Session,
    action,
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
from payorch.http.models import UserInviteRequest, UserRoleRequest
from payorch.http.operations import users as operations
from payorch.http.services import services
from payorch.values import errors as domain
from payorch.values.pagination import PageRequest
from payorch.values.roles import Role

DONE = {
    "role": "The role is changed: it holds from the user's next page or request.",
    "removed": "The user is removed: their sessions and access tokens have ended.",
    "revoked": "The invitation is revoked: its link no longer works.",
}
ROLE_LABELS = {Role.ADMIN: "Admin", Role.READ_ONLY: "Read-only"}
INVITES_SHOWN = PageRequest(page=1, limit=100)  # the open invitations, newest first, on one page


async def _users_page(
    session: Session,
    status: int,
    *,
    form: Mapping[str, str] | None = None,
    errors: dict[str, str] | None = None,
    message: str | None = None,
) -> tuple[str, int]:
    invites, invites_total = await operations.list_invites(services(), session.principal, INVITES_SHOWN)
    return await render_page(
        "console/users.html",
        session,
        status,
        title="Users",
        listing=await listing(lambda page: operations.list_users(services(), session.principal, page)),
        invites=invites,
        invites_total=invites_total,
        me=session.principal.user_id,
        roles=ROLE_LABELS,
        role_duties=ROLE_DUTIES,
        now=services().context.clock.now(),
        form={"email": "", "role": Role.READ_ONLY.value, **(form or {})},
        errors=errors or {},
        message=message,
        notice=done_notice(DONE, status),
    )


@blueprint.get("/users")
@page
async def users(session: Session) -> tuple[str, int]:
    return await _users_page(session, 200)


@blueprint.post("/users/invite")
@action
async def invite_user(session: Session, form: MultiDict[str, str]) -> Any:
    """An invitation with the API's validation; its one-time link on the answer (201), not after a
    redirect, as a new API key is shown."""
    sent = {"email": form.get("email", ""), "role": form.get("role", "")}
    try:
        data = validated(UserInviteRequest, text_fields(form, ("email", "role")))
        issued = await operations.invite_user(services(), session.principal, data)
    except domain.InvalidInput as error:
        return await _users_page(session, 400, form=sent, errors=field_errors(error))
    except domain.AccountExists as error:
        return await _users_page(session, 409, form=sent, errors={"email": error.message})
    return await render_page(
        "console/user_invited.html",
        session,
        201,
        title="Invitation made",
        invite=issued.invite,
        signup_url=issued.signup_url,
        role_words=ROLE_WORDS,
    )


@blueprint.post("/users/<user_id>/role")
@action
async def change_role(user_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    try:
        data = validated(UserRoleRequest, text_fields(form, ("role",)))
        await operations.change_role(services(), session.principal, user_id, data)
    except (domain.InvalidInput, domain.LastAdmin) as error:
        return await _users_page(session, _status(error), message=error.message)
    return see_other(url_for("console.users", done="role"))


@blueprint.post("/users/<user_id>/remove")
@action
async def remove_user(user_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """Remove only with `confirm=yes`; else the page asking to confirm, naming the user."""
    if form.get("confirm") != "yes":
        user = await operations.find_user(services(), session.principal, user_id)
        return await render_page(
            "console/user_remove.html",
            session,
            title=f"Remove {user.email}?",
            user=user,
            me=session.principal.user_id,
        )
    try:
        await operations.remove_user(services(), session.principal, user_id)
    except domain.LastAdmin as error:
        return await _users_page(session, 409, message=error.message)
    return see_other(url_for("console.users", done="removed"))


@blueprint.post("/users/invites/<invite_id>/revoke")
@action
async def revoke_invite(invite_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    await operations.revoke_invite(services(), session.principal, invite_id)
    return see_other(url_for("console.users", done="revoked"))


def _status(error: domain.DomainError) -> int:
    return 409 if isinstance(error, domain.LastAdmin) else 400
