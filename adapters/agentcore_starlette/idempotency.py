"""Idempotency-Key on POST routes: the core's ``IdempotencyKeys`` behind HTTP headers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable

from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from agentcore import Workspace
from agentcore.adapters import IdempotencyKeys, StoredResult, kept_error
from agentcore.errors import AgentCoreError, DeadlineExceeded, InvalidRequest
from agentcore_starlette.problems import MEDIA_TYPE, problem_document, problem_headers
from agentcore_starlette.routing import Call

MAX_KEY_LENGTH = 255
REPLAYED = {"Idempotent-Replayed": "true"}
_settling: set[asyncio.Future[None]] = set()  # late outcomes being recorded


class OutcomePending(DeadlineExceeded):
    """A 504 for work that was told to stop but may still commit: ``outcome`` settles it.

    ``outcome`` resolves to the response the work produced, or raises its error
    (``Cancelled``/``DeadlineExceeded`` when it stopped before committing anything).
    """

    def __init__(self, detail: str, *, outcome: asyncio.Future[Response]) -> None:
        super().__init__(detail)
        self.outcome = outcome


def fingerprint(method: str, path: str, canonical_body: bytes) -> str:
    """What makes two requests "the same": method, path and the parsed body."""
    digest = hashlib.sha256()
    for part in (method.encode(), path.encode(), canonical_body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def canonical_body(call: Call) -> bytes:
    """The parsed body as bytes, for the fingerprint (computed only when a request
    carries an ``Idempotency-Key``): the upload's name, type and digest, or the
    validated JSON body re-serialised, so formatting differences do not count."""
    upload = call.upload
    if upload is not None:
        attributes = json.dumps([upload.metadata, upload.external_id], sort_keys=True)
        meta = f"{upload.filename}\0{upload.content_type}\0{attributes}\0".encode()
        return meta + hashlib.sha256(upload.data).digest()
    if call.body is None:
        return b""
    body: BaseModel = call.body
    return body.model_dump_json().encode()


def check_key(key: str) -> str:
    """The key if usable, else a 400 naming the header."""
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise InvalidRequest(
            f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable characters.",
            code="invalid_idempotency_key",
            param="Idempotency-Key",
        )
    return key


def replay_response(result: StoredResult, request_id: str | None) -> Response:
    """A kept result as the response to a retry (``Idempotent-Replayed: true``); a kept
    error as a problem document naming the retry's ``request_id``, with the headers
    its facts call for (a 503's ``Retry-After``)."""
    if result.failed:
        error, fields = kept_error(result)
        body = json.dumps(problem_document(fields, request_id), separators=(",", ":"))
        headers = {**problem_headers(error), **REPLAYED}
        return Response(body, status_code=result.status, media_type=MEDIA_TYPE, headers=headers)
    return Response(
        result.body, status_code=result.status, media_type="application/json", headers=REPLAYED
    )


async def run_once(
    keys: IdempotencyKeys,
    workspace: Workspace,
    key: str,
    print_: str,
    run: Callable[[], Awaitable[Response]],
    *,
    wait: float,
    request_id: str | None = None,
) -> Response:
    """Run ``run`` at most once per key: replay its kept result for a retry.

    Same key and same request → the kept result (``Idempotent-Replayed: true``);
    same key and another request → 409; a duplicate that arrives while the first is
    still running waits for it (up to ``wait`` seconds, polling on the event loop)
    and then replays it. The rules are the core's (``keys``: ``core.idempotency``).

    A claim whose holder died (its process, or its store connection, lost before it
    kept a result) lapses after the core's lease; a retry then runs (``keys.claim``).

    Never a stored resource behind a cached error: work that stopped before it
    committed releases the key (``IdempotencyKeys.fail``), and work past its
    deadline whose outcome is not known yet (``OutcomePending``) keeps the key
    claimed until it settles, then keeps its real result (or releases the key).
    """
    org, env = workspace.organization_id, workspace.environment
    wait_until = time.monotonic() + wait
    while True:
        claim = await run_in_threadpool(keys.claim, org, env, key, print_, wait_until=wait_until)
        if claim.action == "replay" and claim.result is not None:
            return replay_response(claim.result, request_id)
        if claim.action == "run":
            break
        await asyncio.sleep(keys.poll)
    held = claim.claimed_at
    try:
        response = await run()
    except OutcomePending as pending:
        task = asyncio.ensure_future(_settle(keys, workspace, key, held, pending.outcome))
        _settling.add(task)
        task.add_done_callback(_settling.discard)
        raise
    except AgentCoreError as error:
        await run_in_threadpool(keys.fail, org, env, key, error, claimed_at=held)
        raise
    except BaseException:
        await run_in_threadpool(keys.release, org, env, key, claimed_at=held)
        raise
    await _succeed(keys, workspace, key, held, response)
    return response


async def _succeed(
    keys: IdempotencyKeys, workspace: Workspace, key: str, held: float | None, response: Response
) -> None:
    body = bytes(response.body).decode()
    await run_in_threadpool(
        keys.succeed,
        workspace.organization_id,
        workspace.environment,
        key,
        response.status_code,
        body,
        conversation_id=_conversation_of(body),
        claimed_at=held,
    )


def _conversation_of(body: str) -> str | None:
    """The conversation whose messages a JSON answer holds (a chat answer's
    ``conversationId``), so deleting it deletes the kept answer too."""
    if '"conversationId"' not in body:  # most answers: no need to parse them
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    found = data.get("conversationId") if isinstance(data, dict) else None
    return found if isinstance(found, str) else None


async def _settle(
    keys: IdempotencyKeys,
    workspace: Workspace,
    key: str,
    held: float | None,
    outcome: asyncio.Future[Response],
) -> None:
    """Keep what late work ended as, or release the key if it stopped before committing."""
    org, env = workspace.organization_id, workspace.environment
    try:
        response = await outcome
    except AgentCoreError as error:
        await run_in_threadpool(keys.fail, org, env, key, error, claimed_at=held)
    except BaseException:
        await run_in_threadpool(keys.release, org, env, key, claimed_at=held)
    else:
        await _succeed(keys, workspace, key, held, response)
