"""One webhook delivery read in detail (the event's body sent, each attempt's headers, status and
the receiver's answer), and why a delivery that is not delivered yet waits, in words, for the API's
delivery records and the console alike. The list of deliveries and their resending (`retry`) are
`operations.webhooks`'."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from payorch.http.auth import Principal, parse_id
from payorch.http.operations.webhooks import read_webhook
from payorch.http.services import Services
from payorch.storage import delivery_details
from payorch.storage.delivery_details import DeliveryDetails
from payorch.storage.webhooks import DeliveryView
from payorch.values.errors import NotFound
from payorch.values.statuses import DeliveryStatus

# The latest attempts a delivery's read shows: a delivery sent again by hand, over and over, has
# more attempts than its schedule, and each one's details are up to a few KiB.
ATTEMPTS_SHOWN = 50

WaitKind = Literal["held", "in_flight", "due", "scheduled"]


@dataclass(frozen=True)
class Waiting:
    """Why a PENDING delivery is not delivered yet, as of the moment it was read:

    - `held`: behind its session's earlier event to the same endpoint (`behind_event_id`, its
      delivery `behind_delivery_id`), still PENDING: a session's events reach an endpoint in order;
    - `in_flight`: attempt `attempt` is being made;
    - `due`: attempt `attempt` is due, and the delivery supervisor sends it as soon as it has a slot;
    - `scheduled`: attempt `attempt` falls due `at`.

    `of` is how many attempts the retry schedule makes; an attempt beyond them was asked for by hand.
    """

    kind: WaitKind
    attempt: int
    of: int
    at: datetime | None = None
    behind_event_id: str | None = None
    behind_delivery_id: uuid.UUID | None = None

    def words(self, time_text: Callable[[datetime], str]) -> str:
        """The reason as a sentence, times written by `time_text`."""
        which = (
            f"attempt {self.attempt} of {self.of}"
            if self.attempt <= self.of
            else f"attempt {self.attempt}, sent again by hand"
        )
        if self.kind == "held":
            return (
                f"held behind event {self.behind_event_id} of the same session "
                f"(delivery {self.behind_delivery_id}): a session's events reach an endpoint in order"
            )
        if self.kind == "in_flight":
            return f"sending now ({which})"
        if self.kind == "due" or self.at is None:
            return f"retrying now ({which})" if self.attempt > 1 else f"sending now ({which})"
        return f"next attempt at {time_text(self.at)} ({which})"


def waiting(delivery: DeliveryView, *, now: datetime, attempts_scheduled: int) -> Waiting | None:
    """Why `delivery` waits at `now` (None: it does not, being DELIVERED or FAILED), the retry
    schedule making `attempts_scheduled` attempts."""
    if delivery.status != DeliveryStatus.PENDING:
        return None
    if delivery.waits_for_event_id is not None:
        return Waiting(
            "held",
            delivery.attempts + 1,
            attempts_scheduled,
            behind_event_id=delivery.waits_for_event_id,
            behind_delivery_id=delivery.waits_for_delivery_id,
        )
    if delivery.claimed_until is not None and delivery.claimed_until > now:
        return Waiting("in_flight", delivery.attempts, attempts_scheduled)
    if delivery.next_attempt_at is None or delivery.next_attempt_at <= now:
        return Waiting("due", delivery.attempts + 1, attempts_scheduled)
    return Waiting("scheduled", delivery.attempts + 1, attempts_scheduled, at=delivery.next_attempt_at)


def waiting_now(services: Services, delivery: DeliveryView) -> Waiting | None:
    """`waiting` at the service's clock's now, with its retry schedule."""
    return waiting(
        delivery,
        now=services.context.clock.now(),
        attempts_scheduled=len(services.context.settings.webhooks.retry_schedule_s),
    )


async def read_delivery(
    services: Services, principal: Principal, application_id: str, webhook_id: str, delivery_id: str
) -> DeliveryDetails:
    """The configuration's delivery with the event's body it sends and its latest `ATTEMPTS_SHOWN`
    attempts in detail; `NotFound` when the application's configuration has no such delivery."""
    config = await read_webhook(services, principal, application_id, webhook_id)
    found = await services.context.db.snapshot(
        delivery_details.read_delivery,
        config.id,
        parse_id(delivery_id, "delivery"),
        attempts_shown=ATTEMPTS_SHOWN,
    )
    if found is None:
        raise NotFound("delivery not found", missing="delivery")
    return found
