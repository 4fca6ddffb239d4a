"""Every command an application's actor runs, what each answers, and who sends it.

- `CreateSession` (`engine/payments/checkout.py`), from `POST /api/v1/sessions`; lane: sessions being
  created, batched. Answers the key's `Answer`: 201 with the session, or the replay of an earlier one.
- `ApplyProviderEvent` (`engine/payments/provider_events.py`), from `POST /api/v1/provider-events/...`; lane:
  its session's, or its refund's. Answers `bool`: applied now (False: seen before, or about nothing).
- `ExpireSession` (`engine/payments/expiry.py`), from the expiry loop (`supervisors/expiry_loop.py`);
  lane: its session's. Answers `bool`: the session changed.
- `CreateRefund` (`engine/payments/refunds.py`), from `POST /api/v1/sessions/<id>/refunds`; lane: its
  session's. Answers the key's `Answer`: 201 or 202 with the refund, or the replay of an earlier one.
- `SubmitRefund` (`engine/payments/refunds.py`), from the refund loop (`supervisors/refund_loop.py`);
  lane: its refund's. Answers `bool`: the provider took the refund.
- `ReturnFromCheckout` (`engine/payments/recovery.py`), from `GET /checkout/<id>/return`; lane: its
  session's. Answers `str | None`: where to send the customer (None: not the application's session).
- `EvaluateRouting` (`engine/routing/sessions.py`), from `POST /api/v1/applications/<id>/routing/evaluate`;
  lane: the application's. Answers an `Evaluation`: how a session would be routed now (creates
  nothing, calls no provider).

And the one command an actor sends itself: `_StoreSession` (`engine/payments/checkout.py`), what a created
session's providers answered, stored with the others that came back together (batched in a lane
of its own). The other commands that wait on a provider continue in their own lane when it answers
(`ApplicationActor.spawn`).

`PaymentActors` is the registry the HTTP routes and the supervisors hold: its `ask` takes exactly
these commands, and mypy checks each answer's type where it is used. A route names the command it
sends (`actors.ask(application_id, CreateSession(...))`), one hop from its handler.
"""

from __future__ import annotations

import uuid
from typing import Any, overload

from payorch.engine.actors import ActorRegistry, Command
from payorch.engine.context import Context
from payorch.engine.idempotency import Answer
from payorch.engine.payments.checkout import CreateSession
from payorch.engine.payments.expiry import ExpireSession
from payorch.engine.payments.provider_events import ApplyProviderEvent
from payorch.engine.payments.recovery import ReturnFromCheckout
from payorch.engine.payments.refunds import CreateRefund, SubmitRefund
from payorch.engine.routing.sessions import EvaluateRouting, Evaluation

__all__ = [
    "ApplyProviderEvent",
    "CreateRefund",
    "CreateSession",
    "EvaluateRouting",
    "ExpireSession",
    "PaymentActors",
    "ReturnFromCheckout",
    "SubmitRefund",
]


class PaymentActors(ActorRegistry[Context]):
    """The application actors of payorch's payments: `ask` sends one of the commands listed above."""

    # Narrower than `ActorRegistry.ask` on purpose: payorch's actors take only these commands.
    @overload  # type: ignore[override]
    async def ask(self, application_id: uuid.UUID, command: CreateSession) -> Answer: ...
    @overload
    async def ask(self, application_id: uuid.UUID, command: ApplyProviderEvent) -> bool: ...
    @overload
    async def ask(self, application_id: uuid.UUID, command: ExpireSession) -> bool: ...
    @overload
    async def ask(self, application_id: uuid.UUID, command: CreateRefund) -> Answer: ...
    @overload
    async def ask(self, application_id: uuid.UUID, command: SubmitRefund) -> bool: ...
    @overload
    async def ask(self, application_id: uuid.UUID, command: EvaluateRouting) -> Evaluation: ...
    @overload
    async def ask(self, application_id: uuid.UUID, command: ReturnFromCheckout) -> str | None: ...

    async def ask(self, application_id: uuid.UUID, command: Command[Context, Any]) -> Any:
        return await super().ask(application_id, command)
