"""Repair: a payment the provider settled that payorch has unpaid in one of its sessions is applied
through the same path as the provider's event (`engine.payments.provider_events`), in the session's
lane of its application's actor: the session becomes SUCCEEDED exactly as if the event had arrived,
and its `session.completed` webhook event is written in the same transaction.

The event's id is the settled item's, under a prefix of its own (`reconciliation:<item id>`), so a
second run applies nothing again; the provider's own event arriving late finds the session paid and
changes nothing. Only the run's application's sessions are looked up, so nothing of another
application's is touched.
"""

from __future__ import annotations

import uuid

from payorch.engine.commands import ApplyProviderEvent, PaymentActors
from payorch.engine.reconciliation.match import Finding
from payorch.providers.base import EventKind, ProviderEvent


async def repair(
    actors: PaymentActors, application_id: uuid.UUID, provider: str, finding: Finding, checkout_reference: str
) -> bool:
    """Apply the settled payment of `finding` to its session; True when it changed the session."""
    assert finding.settled is not None and finding.session_id is not None
    event = ProviderEvent(
        id=f"reconciliation:{finding.settled.item_id}",
        kind=EventKind.PAYMENT_SUCCEEDED,
        session_id=finding.session_id,
        checkout_reference=checkout_reference,
    )
    return await actors.ask(application_id, ApplyProviderEvent(provider, event))
