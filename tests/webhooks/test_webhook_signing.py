"""Standard Webhooks signing, checked by the public standardwebhooks verifier."""

from __future__ import annotations

import base64
import json
import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from agentcore.errors import ValidationFailed
from agentcore.webhooks.signing import (
    build_headers,
    encode_payload,
    generate_secret,
    sign,
    verify,
)

BODY = encode_payload(
    "agent.action", "2024-05-01T12:00:00Z", {"agent_id": "agt_1", "action": "reply"}
)


@pytest.fixture
def now() -> int:
    return int(time.time())


def test_generated_secret_is_whsec_with_32_random_bytes() -> None:
    first, second = generate_secret(), generate_secret()
    assert first.startswith("whsec_")
    assert len(base64.b64decode(first.removeprefix("whsec_"), validate=True)) == 32
    assert first != second


def test_build_headers_names_and_values(now: int) -> None:
    headers = build_headers([generate_secret()], "msg_1", now, BODY)
    assert headers["webhook-id"] == "msg_1"
    assert headers["webhook-timestamp"] == str(now)
    assert headers["webhook-signature"].startswith("v1,")
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == "agentcore-webhooks/1"


def test_standardwebhooks_accepts_our_signature(now: int) -> None:
    secret = generate_secret()
    headers = build_headers([secret], "msg_1", now, BODY)
    payload = Webhook(secret).verify(BODY, headers)
    assert payload == {
        "type": "agent.action",
        "timestamp": "2024-05-01T12:00:00Z",
        "data": {"action": "reply", "agent_id": "agt_1"},
    }


@pytest.mark.parametrize("tamper", ["body", "timestamp", "id", "secret"])
def test_standardwebhooks_rejects_tampering(tamper: str, now: int) -> None:
    secret = generate_secret()
    headers = build_headers([secret], "msg_1", now, BODY)
    body, verifier = BODY, Webhook(secret)
    if tamper == "body":
        body = BODY.replace(b"reply", b"delete")
    elif tamper == "timestamp":
        headers["webhook-timestamp"] = str(now - 1)
    elif tamper == "id":
        headers["webhook-id"] = "msg_2"
    else:
        verifier = Webhook(generate_secret())
    with pytest.raises(WebhookVerificationError):
        verifier.verify(body, headers)


def test_rotation_overlap_signature_accepted_with_either_secret(now: int) -> None:
    old, new = generate_secret(), generate_secret()
    headers = build_headers([new, old], "msg_1", now, BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        Webhook(secret).verify(BODY, headers)
        verify(secret, headers, BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(BODY, headers)


def test_sign_matches_the_reference_signer(now: int) -> None:
    from datetime import UTC, datetime

    secret = generate_secret()
    reference = Webhook(secret).sign("msg_9", datetime.fromtimestamp(now, tz=UTC), BODY.decode())
    assert sign([secret], "msg_9", now, BODY) == reference


def test_sign_needs_a_secret() -> None:
    with pytest.raises(ValueError):
        sign([], "msg_1", 0, BODY)


def test_verify_accepts_genuine_and_is_case_insensitive(now: int) -> None:
    secret = generate_secret()
    headers = {k.upper(): v for k, v in build_headers([secret], "msg_1", now, BODY).items()}
    verify(secret, headers, BODY)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"webhook-signature": None}, "invalid_signature"),
        ({"webhook-id": None}, "invalid_signature"),
        ({"webhook-timestamp": "soon"}, "invalid_signature"),
        ({"webhook-id": "msg_2"}, "invalid_signature"),
        ({"webhook-signature": "v1,not base64!"}, "invalid_signature"),
        ({"webhook-signature": "v2,AAAA"}, "invalid_signature"),
    ],
)
def test_verify_rejects_bad_headers(change: dict[str, str | None], code: str, now: int) -> None:
    secret = generate_secret()
    headers = build_headers([secret], "msg_1", now, BODY)
    for name, value in change.items():
        if value is None:
            del headers[name]
        else:
            headers[name] = value
    with pytest.raises(ValidationFailed) as info:
        verify(secret, headers, BODY)
    assert info.value.code == code


def test_verify_rejects_wrong_secret_and_tampered_body(now: int) -> None:
    secret = generate_secret()
    headers = build_headers([secret], "msg_1", now, BODY)
    for args in ((generate_secret(), BODY), (secret, BODY + b" ")):
        with pytest.raises(ValidationFailed) as info:
            verify(args[0], headers, args[1])
        assert info.value.code == "invalid_signature"


def test_verify_timestamp_tolerance() -> None:
    secret = generate_secret()
    headers = build_headers([secret], "msg_1", 1_000_000, BODY)
    verify(secret, headers, BODY, now=1_000_300)
    verify(secret, headers, BODY, now=999_700)
    for now in (1_000_301, 999_699):
        with pytest.raises(ValidationFailed) as info:
            verify(secret, headers, BODY, now=now)
        assert info.value.code == "timestamp_out_of_tolerance"


def test_encode_payload_is_compact_ordered_and_deterministic() -> None:
    data_a = {"b": 1, "a": {"y": "é", "x": [1, 2]}}
    data_b = json.loads(json.dumps({"a": {"x": [1, 2], "y": "é"}, "b": 1}))
    body = encode_payload("agent.error", "2024-05-01T12:00:00Z", data_a)
    assert body == encode_payload("agent.error", "2024-05-01T12:00:00Z", data_b)
    assert (
        body
        == (
            '{"type":"agent.error","timestamp":"2024-05-01T12:00:00Z",'
            '"data":{"a":{"x":[1,2],"y":"é"},"b":1}}'
        ).encode()
    )


def test_encode_payload_refuses_nan() -> None:
    with pytest.raises(ValueError):
        encode_payload("agent.error", "t", {"score": float("nan")})
