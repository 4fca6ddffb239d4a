"""`SandboxProvider.parse_event`: the signature check, and the translation into payorch's events."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from payorch.providers.base import Credentials, EventKind, EventRejected, ProviderEvent
from payorch.providers.sandbox import SandboxProvider
from payorch.providers.sandbox.signing import signature_header
from payorch.storage.database import Database
from tests.providers.helpers import events_of, new_checkout

SECRET = "whsec_sbx_test-secret"
SESSION_ID = uuid.uuid4()
REFUND_ID = uuid.uuid4()


def _body(event_type: str, **data: Any) -> bytes:
    payload = {"id": "evt_sbx_1", "type": event_type, "created": int(time.time()), "data": data}
    return json.dumps(payload).encode()


def _signed(body: bytes, *, secret: str = SECRET, at: float | None = None) -> dict[str, str]:
    return {"Sandbox-Signature": signature_header(secret, body, int(time.time() if at is None else at))}


async def test_correctly_signed_event_is_accepted(sandbox: SandboxProvider) -> None:
    body = _body("checkout.paid", checkout_id="cs_sbx_1", client_reference=str(SESSION_ID))
    event = sandbox.parse_event(_signed(body), body, SECRET)
    assert event == ProviderEvent(
        id="evt_sbx_1",
        kind=EventKind.PAYMENT_SUCCEEDED,
        session_id=SESSION_ID,
        checkout_reference="cs_sbx_1",
    )


@pytest.mark.parametrize(
    ("event_type", "extra", "kind", "reason"),
    [
        (
            "checkout.payment_failed",
            {"failure_code": "card_declined"},
            EventKind.PAYMENT_DECLINED,
            "CARD_DECLINED",
        ),
        (
            "checkout.payment_failed",
            {"failure_code": "insufficient_funds"},
            EventKind.PAYMENT_DECLINED,
            "INSUFFICIENT_FUNDS",
        ),
        (
            "checkout.payment_failed",
            {"failure_code": "payment_failed"},
            EventKind.PAYMENT_DECLINED,
            "PAYMENT_FAILED",
        ),
        (
            "checkout.payment_failed",
            {"failure_code": "new_code"},
            EventKind.PAYMENT_DECLINED,
            "PAYMENT_FAILED",
        ),
        ("dispute.lost", {"dispute_id": "dp_sbx_1"}, EventKind.DISPUTE_LOST, None),
    ],
)
async def test_checkout_events_map_to_payorch_kinds_and_reasons(
    sandbox: SandboxProvider, event_type: str, extra: dict[str, str], kind: EventKind, reason: str | None
) -> None:
    body = _body(event_type, checkout_id="cs_sbx_1", client_reference=str(SESSION_ID), **extra)
    event = sandbox.parse_event(_signed(body), body, SECRET)
    assert (event.kind, event.session_id, event.reason) == (kind, SESSION_ID, reason)


@pytest.mark.parametrize(
    ("event_type", "extra", "kind", "reason"),
    [
        ("refund.succeeded", {}, EventKind.REFUND_SUCCEEDED, None),
        (
            "refund.failed",
            {"failure_code": "lost_or_stolen_card"},
            EventKind.REFUND_FAILED,
            "LOST_OR_STOLEN_CARD",
        ),
    ],
)
async def test_refund_events_carry_payorch_s_refund_id(
    sandbox: SandboxProvider, event_type: str, extra: dict[str, str], kind: EventKind, reason: str | None
) -> None:
    body = _body(
        event_type,
        checkout_id="cs_sbx_1",
        client_reference=str(SESSION_ID),
        refund_id="re_sbx_1",
        refund_client_reference=str(REFUND_ID),
        **extra,
    )
    event = sandbox.parse_event(_signed(body), body, SECRET)
    assert (event.kind, event.session_id, event.refund_id, event.reason) == (
        kind,
        SESSION_ID,
        REFUND_ID,
        reason,
    )


async def test_unknown_event_types_are_ignored(sandbox: SandboxProvider) -> None:
    body = _body("checkout.created", checkout_id="cs_sbx_1")
    assert sandbox.parse_event(_signed(body), body, SECRET) == ProviderEvent(
        id="evt_sbx_1", kind=EventKind.IGNORED
    )


async def test_signature_header_is_found_in_any_case(sandbox: SandboxProvider) -> None:
    body = _body("checkout.paid", checkout_id="cs_sbx_1", client_reference=str(SESSION_ID))
    headers = {"sandbox-signature": _signed(body)["Sandbox-Signature"]}
    assert sandbox.parse_event(headers, body, SECRET).kind is EventKind.PAYMENT_SUCCEEDED


async def test_any_matching_v1_signature_is_enough(sandbox: SandboxProvider) -> None:
    body = _body("checkout.paid", checkout_id="cs_sbx_1", client_reference=str(SESSION_ID))
    now = int(time.time())
    good = signature_header(SECRET, body, now).split(",v1=")[1]
    headers = {"Sandbox-Signature": f"t={now},v1={'0' * 64},v1={good}"}
    assert sandbox.parse_event(headers, body, SECRET).kind is EventKind.PAYMENT_SUCCEEDED


# Rejections


async def test_event_signed_with_another_secret_is_rejected(sandbox: SandboxProvider) -> None:
    body = _body("checkout.paid", checkout_id="cs_sbx_1", client_reference=str(SESSION_ID))
    with pytest.raises(EventRejected):
        sandbox.parse_event(_signed(body, secret="whsec_sbx_other"), body, SECRET)


async def test_event_with_an_altered_body_is_rejected(sandbox: SandboxProvider) -> None:
    body = _body("checkout.paid", checkout_id="cs_sbx_1", client_reference=str(SESSION_ID))
    with pytest.raises(EventRejected):
        sandbox.parse_event(_signed(body), body.replace(b"cs_sbx_1", b"cs_sbx_2"), SECRET)


@pytest.mark.parametrize("offset_s", [-301, 301])
async def test_event_signed_outside_the_tolerance_is_rejected(
    sandbox: SandboxProvider, offset_s: int
) -> None:
    body = _body("checkout.paid", checkout_id="cs_sbx_1", client_reference=str(SESSION_ID))
    with pytest.raises(EventRejected, match="tolerance"):
        sandbox.parse_event(_signed(body, at=time.time() + offset_s), body, SECRET)


async def test_event_signed_within_the_tolerance_is_accepted(sandbox: SandboxProvider) -> None:
    body = _body("checkout.paid", checkout_id="cs_sbx_1", client_reference=str(SESSION_ID))
    assert sandbox.parse_event(_signed(body, at=time.time() - 290), body, SECRET).id == "evt_sbx_1"


async def test_event_without_a_signature_header_is_rejected(sandbox: SandboxProvider) -> None:
    body = _body("checkout.paid", checkout_id="cs_sbx_1", client_reference=str(SESSION_ID))
    with pytest.raises(EventRejected):
        sandbox.parse_event({"Content-Type": "application/json"}, body, SECRET)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "v1=abc",
        "t=now,v1=abc",
        "t=123",
        "garbage",
        f"t={'9' * 400},v1=00",
        "t=\u00b2,v1=00",
        "t=-5,v1=00",
    ],
)
async def test_malformed_signature_header_is_rejected(sandbox: SandboxProvider, header: str) -> None:
    body = _body("checkout.paid")
    with pytest.raises(EventRejected):
        sandbox.parse_event({"Sandbox-Signature": header}, body, SECRET)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'{"id": "evt_sbx_1", "type": "checkout.paid"}',
        b'{"id": 1, "type": "checkout.paid", "data": {}}',
        b'{"id": "evt_sbx_1", "type": "checkout.paid", "data": {"client_reference": "not-a-uuid"}}',
        b"\xff\xfe",
    ],
)
async def test_authentic_but_unparseable_event_is_rejected(sandbox: SandboxProvider, body: bytes) -> None:
    with pytest.raises(EventRejected):
        sandbox.parse_event(_signed(body), body, SECRET)


# What the sandbox itself queues parses back


async def test_queued_event_bodies_parse_back_to_the_session(
    sandbox: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    request, checkout_id = await new_checkout(sandbox, credentials)
    await sandbox.pay(checkout_id, "4000000000009995")
    (queued,) = await events_of(db, checkout_id)
    body = queued.body.encode()
    event = sandbox.parse_event(_signed(body), body, SECRET)
    assert event == ProviderEvent(
        id=queued.id,
        kind=EventKind.PAYMENT_DECLINED,
        session_id=request.session_id,
        checkout_reference=checkout_id,
        reason="INSUFFICIENT_FUNDS",
    )
