"""An admin's password set again by a reset link an operator made (`payorch reset-password`): the
checks behind the console's reset page."""

from __future__ import annotations

from payorch.engine.accounts.access_tokens import AccessClaims
from payorch.http.operations import accounts
from payorch.http.services import Services
from payorch.storage import password_resets
from payorch.storage.password_resets import ResetLink, ResetState
from payorch.values.secrets import token_hash


async def open_reset(services: Services, token: str) -> ResetLink:
    """The link `token` as its page shows it: for which e-mail, until when, and whether it may be
    used now."""
    context = services.context
    return await context.db.autocommit(
        password_resets.find_reset, token_hash=token_hash(token), now=context.clock.now()
    )


async def reset_password(services: Services, token: str, password: str) -> str | ResetState:
    """Use the link `token` once: its admin's password becomes `password` (a password `NewPassword`
    accepts), every access token of theirs ends (as by a sign-out), and the answer is a new one,
    signing them in. A link that may not be used now is answered with its state, before anything
    is hashed, changing nothing. `ServiceBusy` when every password hashing turn is taken."""
    context = services.context
    link = await open_reset(services, token)  # checked again under the link's lock
    if link.state is not ResetState.OPEN:
        return link.state
    with services.passwords.turn() as turn:
        password_hash = await turn.hash(password)
    done = await context.db.transaction(
        password_resets.set_password,
        token_hash=token_hash(token),
        password_hash=password_hash,
        now=context.clock.now(),
    )
    if isinstance(done, ResetState):
        return done
    return accounts.access_token(
        services,
        AccessClaims(
            user_id=done.user_id, merchant_id=done.merchant_id, session_version=done.session_version
        ),
    )
