"""Standard Webhooks v1 signatures, checked with the reference `standardwebhooks` library."""

from __future__ import annotations

import base64
import hashlib
import re
import time
import uuid

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from payorch.outbound.signing import (
    MalformedSigningSecret,
    key_fingerprint,
    new_signing_secret,
    sign,
    webhook_headers,
)

BODY = b'{"id":"evt_1","type":"session.completed","data":{"amount":"12.50","name":"Zo\xc3\xab"}}'


def signed_headers(secrets: list[str], body: bytes = BODY) -> dict[str, str]:
    # Now: the reference library refuses timestamps more than 5 minutes away from its clock.
    secret = secrets[0]
    return webhook_headers(
        secrets, f"msg_{uuid.uuid4().hex}", int(time.time()), body, key_fingerprint(secret)
    )


def test_secret_is_whsec_and_base64_of_32_bytes() -> None:
    secret = new_signing_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32


def test_secrets_do_not_repeat() -> None:
    assert len({new_signing_secret() for _ in range(1000)}) == 1000


def test_fingerprint_is_sha256_prefix_of_the_whole_secret_text() -> None:
    secret = new_signing_secret()
    fingerprint = key_fingerprint(secret)
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", fingerprint)
    assert fingerprint == "sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:16]


def test_different_secrets_have_different_fingerprints() -> None:
    assert key_fingerprint(new_signing_secret()) != key_fingerprint(new_signing_secret())


def test_signature_matches_the_standard_webhooks_test_vector() -> None:
    # The example of the Standard Webhooks reference libraries.
    signature = sign(
        ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        b'{"test": 2432232314}',
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_signed_delivery_verifies_with_the_reference_library() -> None:
    secret = new_signing_secret()
    headers = signed_headers([secret])
    assert Webhook(secret).verify(BODY, headers) == {
        "id": "evt_1",
        "type": "session.completed",
        "data": {"amount": "12.50", "name": "Zoë"},
    }


def test_headers_carry_id_timestamp_fingerprint_and_json_content_type() -> None:
    secret = new_signing_secret()
    headers = webhook_headers([secret], "msg_abc", 1700000000, BODY, key_fingerprint(secret))
    assert headers == {
        "webhook-id": "msg_abc",
        "webhook-timestamp": "1700000000",
        "webhook-signature": sign([secret], "msg_abc", 1700000000, BODY),
        "webhook-key-fingerprint": key_fingerprint(secret),
        "content-type": "application/json",
        "user-agent": "payorch-webhooks/1",
    }


def test_during_rotation_both_secrets_sign_current_first() -> None:
    current, previous = new_signing_secret(), new_signing_secret()
    signature = sign([current, previous], "msg_abc", 1700000000, BODY)
    assert signature.split(" ") == [
        sign([current], "msg_abc", 1700000000, BODY),
        sign([previous], "msg_abc", 1700000000, BODY),
    ]


def test_during_rotation_each_secret_verifies_on_its_own() -> None:
    current, previous = new_signing_secret(), new_signing_secret()
    headers = signed_headers([current, previous])
    Webhook(current).verify(BODY, headers)
    Webhook(previous).verify(BODY, headers)


def test_tampered_body_does_not_verify() -> None:
    secret = new_signing_secret()
    headers = signed_headers([secret])
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY.replace(b"12.50", b"99.50"), headers)


def test_wrong_secret_does_not_verify() -> None:
    headers = signed_headers([new_signing_secret()])
    with pytest.raises(WebhookVerificationError):
        Webhook(new_signing_secret()).verify(BODY, headers)


def test_changed_timestamp_does_not_verify() -> None:
    secret = new_signing_secret()
    headers = signed_headers([secret])
    headers["webhook-timestamp"] = str(int(headers["webhook-timestamp"]) - 1)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY, headers)


def test_signing_without_a_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        sign([], "msg_abc", 1700000000, BODY)


@pytest.mark.parametrize("secret", ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_"])
def test_malformed_secret_is_refused(secret: str) -> None:
    with pytest.raises(MalformedSigningSecret):
        sign([secret], "msg_abc", 1700000000, BODY)
