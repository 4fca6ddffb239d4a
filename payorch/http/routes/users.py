"""The users of the caller's merchant and their roles; invitations of more users; an invited user's
signup.

Every user reads; only an admin invites, changes a role or removes a user (a read-only user is
refused by `http.auth.permit_role`, as on every other change). The merchant keeps at least one
admin: a change that would leave none is 409. payorch sends no e-mail: an invitation's `signupUrl`
is answered once, for the admin to hand on.
"""

from __future__ import annotations

from pydantic import with_config
from quart import Blueprint
from quart_schema import document_response, security_scheme, tag_blueprint
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from payorch.engine.body_types import CLOSED, Timestamp, Uuid
from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, authenticated
from payorch.http.models import (
    PageQuery,
    SignupQuery,
    UserInviteRequest,
    UserRoleRequest,
    UserSignupRequest,
)
from payorch.http.operations import users
from payorch.http.routes.accounts import charged_per_address
from payorch.http.services import services
from payorch.http.validation import body_limit, validate_querystring, validate_request
from payorch.storage.users import User, UserInvite
from payorch.values.errors import InviteInvalid
from payorch.values.pagination import Page, envelope
from payorch.values.roles import RoleName
from payorch.values.timefmt import iso

blueprint = Blueprint("users", __name__, url_prefix="/api/v1")
tag_blueprint(blueprint, ["Users and roles"])

USERS_MAX_BODY_BYTES = 8 * 1024


@with_config(CLOSED)
class UserBody(TypedDict):
    id: Uuid
    email: str
    firstName: str
    lastName: str
    role: RoleName
    createdAt: Timestamp


@with_config(CLOSED)
class InviteBody(TypedDict):
    id: Uuid
    email: str
    role: RoleName
    invitedBy: Uuid
    createdAt: Timestamp
    expiresAt: Timestamp


@with_config(CLOSED)
class InviteCreated(InviteBody):
    """The invitation, with its one-time `signupUrl`: shown in this answer only."""

    signupUrl: str


def user_body(user: User) -> UserBody:
    return {
        "id": str(user.id),
        "email": user.email,
        "firstName": user.first_name,
        "lastName": user.last_name,
        "role": user.role.value,
        "createdAt": iso(user.created_at),
    }


def invite_body(invite: UserInvite) -> InviteBody:
    return {
        "id": str(invite.id),
        "email": invite.email,
        "role": invite.role.value,
        "invitedBy": str(invite.invited_by),
        "createdAt": iso(invite.created_at),
        "expiresAt": iso(invite.expires_at),
    }


@blueprint.get("/merchants/me/users")
@security_scheme(api.JWT)
@document_response(Page[UserBody], 200)
@api.errors(400, 401, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(PageQuery)
async def list_users(query_args: PageQuery, principal: Principal) -> Page[UserBody]:
    """The users of the caller's merchant, newest first, each with their role. Every role reads it."""
    page = query_args.page_request
    found, total = await users.list_users(services(), principal, page)
    return envelope([user_body(user) for user in found], page, total)


@blueprint.patch("/merchants/me/users/<user_id>")
@security_scheme(api.JWT)
@document_response(UserBody, 200)
@api.errors(400, 401, 403, 404, 409, 413, 429, 500)
@authenticated(Accept.JWT)
@body_limit(USERS_MAX_BODY_BYTES)
@validate_request(UserRoleRequest)
async def change_role(user_id: str, data: UserRoleRequest, principal: Principal) -> UserBody:
    """Give a user of the merchant another role (admins only). The change holds from the user's
    next request. Demoting the merchant's last admin is 409; another merchant's user is 404."""
    return user_body(await users.change_role(services(), principal, user_id, data))


@blueprint.delete("/merchants/me/users/<user_id>")
@security_scheme(api.JWT)
@document_response(bodies.Empty, 200)
@api.errors(401, 403, 404, 409, 429, 500)
@authenticated(Accept.JWT)
async def remove_user(user_id: str, principal: Principal) -> bodies.Empty:
    """Remove a user of the merchant (admins only): every access token of theirs answers 401 from
    their next request on. Removing the merchant's last admin is 409 (an admin may remove themself
    while another admin remains); another merchant's user is 404."""
    await users.remove_user(services(), principal, user_id)
    return {}


@blueprint.post("/merchants/me/invites")
@security_scheme(api.JWT)
@document_response(InviteCreated, 201)
@api.errors(400, 401, 403, 409, 413, 429, 500)
@authenticated(Accept.JWT)
@body_limit(USERS_MAX_BODY_BYTES)
@validate_request(UserInviteRequest)
async def invite_user(data: UserInviteRequest, principal: Principal) -> tuple[InviteCreated, int]:
    """Invite a user to the merchant with a role (admins only). The answer holds the one-time
    `signupUrl`, shown this once: payorch sends no e-mail, hand it on. It holds for
    `signup.invite_ttl_s` and only for this e-mail; a newer invitation of the same address ends
    this one. 409 when the address is a user of the merchant already."""
    issued = await users.invite_user(services(), principal, data)
    return {**invite_body(issued.invite), "signupUrl": issued.signup_url}, 201


@blueprint.get("/merchants/me/invites")
@security_scheme(api.JWT)
@document_response(Page[InviteBody], 200)
@api.errors(400, 401, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(PageQuery)
async def list_invites(query_args: PageQuery, principal: Principal) -> Page[InviteBody]:
    """The merchant's invitations not yet used, revoked or replaced (expired ones included until
    then), newest first. Their links are never shown again."""
    page = query_args.page_request
    found, total = await users.list_invites(services(), principal, page)
    return envelope([invite_body(invite) for invite in found], page, total)


@blueprint.delete("/merchants/me/invites/<invite_id>")
@security_scheme(api.JWT)
@document_response(bodies.Empty, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def revoke_invite(invite_id: str, principal: Principal) -> bodies.Empty:
    """Revoke an open invitation (admins only): its link answers 410 from then on."""
    await users.revoke_invite(services(), principal, invite_id)
    return {}


@blueprint.post("/users/signup")
@security_scheme(api.NO_CREDENTIALS)
@document_response(UserBody, 201)
@api.errors(400, 409, 410, 413, 429, 500, 503)
@charged_per_address  # as a merchant's signup: one bucket per address with logins
@body_limit(USERS_MAX_BODY_BYTES)
@validate_querystring(SignupQuery)
@validate_request(UserSignupRequest)
async def join(data: UserSignupRequest, query_args: SignupQuery) -> tuple[UserBody, int]:
    """Become a user of a merchant with an invitation's one-time token (the `signupUrl` an admin
    made): a name and a password; the e-mail and the role are the invitation's. Then log in as
    usual. 410 for an invitation used, revoked, replaced or expired; 409 when its e-mail is a user
    of payorch already (the invitation is spent)."""
    if not query_args.token:
        raise InviteInvalid("query parameter 'token' (the invite token of the signup link) is required")
    user, _ = await users.join(services(), query_args.token, data)
    return user_body(user), 201
