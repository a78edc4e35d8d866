"""Idempotency-Key on POST routes, with Stripe's semantics, over the core's store."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from agentcore.errors import AgentCoreError, Cancelled, Conflict, DeadlineExceeded, InvalidRequest
from agentcore.storage.records import StoredResponse
from agentcore.workspace import Workspace
from agentcore_starlette.problems import problem_body

MAX_KEY_LENGTH = 255
POLL = 0.02
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


def check_key(key: str) -> str:
    """The key if usable, else a 400 naming the header."""
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise InvalidRequest(
            f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable characters.",
            code="invalid_idempotency_key",
            param="Idempotency-Key",
        )
    return key


async def run_once(
    workspace: Workspace,
    key: str,
    print_: str,
    run: Callable[[], Awaitable[Response]],
    *,
    wait: float,
) -> Response:
    """Run ``run`` at most once per key: replay its stored response for a retry.

    Same key and same request → the stored response (``Idempotent-Replayed: true``);
    same key and another request → 409; a duplicate that arrives while the first is
    still running waits for it (up to ``wait`` seconds) and then replays it.

    Never a stored resource behind a cached error. Work that stopped before it
    committed (``Cancelled``, ``DeadlineExceeded``) releases the key, so a retry runs
    afresh. Work past its deadline whose outcome is not yet known
    (``OutcomePending``) keeps the key in progress until it settles: its real
    response is stored for replay, or the key is released if it stopped in time.
    """
    store = workspace.core.store
    ttl = workspace.core.settings.idempotency_ttl
    org, env = workspace.organization_id, workspace.environment
    deadline = time.monotonic() + wait
    while True:
        claim, stored = await run_in_threadpool(
            store.claim_idempotency_key, org, env, key, print_, now=time.time(), ttl=ttl
        )
        if claim == "replay" and stored is not None:
            return Response(
                stored.body,
                status_code=stored.status,
                headers={**stored.headers, "Idempotent-Replayed": "true"},
            )
        if claim == "mismatch":
            raise Conflict(
                "This Idempotency-Key was already used with a different request.",
                code="idempotency_key_reused",
                param="Idempotency-Key",
            )
        if claim == "new":
            break
        if time.monotonic() > deadline:
            raise Conflict(
                "A request with this Idempotency-Key is still being processed.",
                code="idempotency_request_in_progress",
                param="Idempotency-Key",
            )
        await asyncio.sleep(POLL)
    try:
        response = await run()
    except OutcomePending as pending:
        task = asyncio.ensure_future(_record(workspace, key, pending.outcome))
        _settling.add(task)
        task.add_done_callback(_settling.discard)
        raise
    except BaseException as error:
        await _record_error(workspace, key, error)
        raise
    await _record_response(workspace, key, response)
    return response


async def _record(workspace: Workspace, key: str, outcome: asyncio.Future[Response]) -> None:
    """Store what late work ended as, or release the key if it stopped before committing."""
    try:
        response = await outcome
    except BaseException as error:
        await _record_error(workspace, key, error)
        return
    await _record_response(workspace, key, response)


async def _record_response(workspace: Workspace, key: str, response: Response) -> None:
    headers = {"content-type": response.headers.get("content-type", "application/json")}
    await run_in_threadpool(
        workspace.core.store.finish_idempotency_key,
        workspace.organization_id,
        workspace.environment,
        key,
        StoredResponse(response.status_code, bytes(response.body), headers),
    )


async def _record_error(workspace: Workspace, key: str, error: BaseException) -> None:
    store = workspace.core.store
    org, env = workspace.organization_id, workspace.environment
    if isinstance(error, AgentCoreError) and not isinstance(error, Cancelled | DeadlineExceeded):
        body = json.dumps(problem_body(error, None), separators=(",", ":")).encode()
        stored = StoredResponse(error.status, body, {"content-type": "application/problem+json"})
        await run_in_threadpool(store.finish_idempotency_key, org, env, key, stored)
    else:  # nothing was committed (stopped in time, or crashed): a retry runs afresh
        await run_in_threadpool(store.release_idempotency_key, org, env, key)
