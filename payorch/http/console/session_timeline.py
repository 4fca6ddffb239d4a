"""One timeline of a session, as its console page shows it: its creation, each payment attempt
opened and ended at its provider, each refund asked for and decided, each webhook event written and
each attempt to deliver it, in the order they happened (oldest first; what happened at one moment
in that order)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from payorch.engine.payments.records import SessionRecord
from payorch.http.console.display import label, moment_of
from payorch.storage.session_deliveries import DeliveryStep
from payorch.values.statuses import AttemptStatus, RefundStatus


@dataclass(frozen=True)
class Moment:
    """One line of the timeline: when, what kind of thing (`session`, `attempt`, `refund`,
    `event`, `delivery`), and what happened, in words."""

    at: datetime
    kind: str
    what: str


def _outcome(status: object, reason: object | None) -> str:
    return f"{label(status).lower()}" + (f" ({label(reason).lower()})" if reason else "")


def _attempts(record: SessionRecord) -> list[Moment]:
    found = []
    for attempt in record["attempts"]:
        provider = label(attempt["provider"])
        found.append(
            Moment(
                moment_of(attempt["createdAt"]),
                "attempt",
                f"Attempt {attempt['number']} opened at {provider} "
                f"(routed by {label(attempt['reason']).lower()})",
            )
        )
        if attempt["endedAt"] is not None and attempt["status"] is not AttemptStatus.OPEN:
            code = f", code {attempt['providerCode']}" if attempt["providerCode"] else ""
            outcome = _outcome(attempt["status"], attempt["failureReason"])
            found.append(
                Moment(
                    moment_of(attempt["endedAt"]),
                    "attempt",
                    f"Attempt {attempt['number']} at {provider} {outcome}{code}",
                )
            )
    return found


def _refunds(record: SessionRecord, money: Callable[[Decimal, str], str]) -> list[Moment]:
    found = []
    for refund in record["refunds"] or []:
        amount = money(refund["amount"], refund["currency"])
        reason = f" ({label(refund['reason']).lower()})" if refund["reason"] else ""
        found.append(
            Moment(moment_of(refund["createdAt"]), "refund", f"Refund of {amount} asked for{reason}")
        )
        if refund["status"] != RefundStatus.PENDING:
            outcome = _outcome(refund["status"], refund["failureReason"])
            found.append(Moment(moment_of(refund["updatedAt"]), "refund", f"Refund of {amount} {outcome}"))
    return found


def _deliveries(steps: Sequence[DeliveryStep]) -> list[Moment]:
    found = []
    for step in steps:
        if step.attempted_at is None:
            waiting = (
                f"; next attempt {step.next_attempt_at:%Y-%m-%d %H:%M:%S} UTC" if step.next_attempt_at else ""
            )
            what = (
                f"{step.event_type} to {step.url}: {label(step.status).lower()}, not attempted yet{waiting}"
            )
            found.append(Moment(step.created_at, "delivery", what))
            continue
        answer = f"HTTP {step.status_code}" if step.status_code is not None else (step.error or "no answer")
        what = f"{step.event_type} sent to {step.url} (attempt {step.attempt_number}): {answer}"
        found.append(Moment(step.attempted_at, "delivery", what))
    return found


def timeline(
    record: SessionRecord,
    events: Sequence[dict[str, Any]],
    steps: Sequence[DeliveryStep],
    money: Callable[[Decimal, str], str],
) -> list[Moment]:
    """The session's timeline, oldest first: from its read `record` (its attempts and refunds), its
    webhook `events` (their delivery bodies) and the `steps` of their deliveries."""
    amount = money(record["amount"], record["currency"])
    moments = [
        Moment(
            moment_of(record["createdAt"]),
            "session",
            f"Session created for {amount}, order {record['orderReference']}",
        ),
        *_attempts(record),
        *_refunds(record, money),
        *(
            Moment(moment_of(event["createdAt"]), "event", f"Event {event['type']} written ({event['id']})")
            for event in events
        ),
        *_deliveries(steps),
    ]
    if record["disputeLostAt"] is not None:
        moments.append(
            Moment(
                moment_of(record["disputeLostAt"]),
                "session",
                "Dispute lost: the provider took the payment back",
            )
        )
    return sorted(moments, key=lambda moment: moment.at)
