"""Reading a document upload: one multipart ``file`` with its ``metadata``,
``external_id`` and ``access`` fields, within the upload limit and the body's timeouts."""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import Message

from agentcore.errors import InvalidRequest, PayloadTooLarge, ValidationFailed
from agentcore_starlette.bodies import read_limited
from agentcore_starlette.routing import Upload

MULTIPART_OVERHEAD = 64 * 1024
"""Bytes a multipart body may hold beyond its file: the part headers, boundaries and
the other fields."""
UPLOAD_FIELDS = ("file", "metadata", "external_id", "access")
"""The multipart fields a document upload may carry (openapi.py declares the same)."""


async def read_upload(request: Request, *, limit: int, timeout: float, deadline: float) -> Upload:
    """The uploaded file and its fields: 413 past ``limit`` bytes of file (the body is
    refused sooner when it is larger by more than ``MULTIPART_OVERHEAD``), 408 when the
    body stalls or comes too slowly (``read_limited``), 400 for a body that is not
    multipart or lacks ``file``, 422 naming an unknown field or a bad one."""
    raw = await read_limited(
        request, limit + MULTIPART_OVERHEAD, timeout=timeout, deadline=deadline, what="upload"
    )
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return {"type": "http.disconnect"}
        replayed = True
        return {"type": "http.request", "body": raw, "more_body": False}

    try:
        form = await Request(request.scope, replay).form(
            max_files=1, max_fields=8, max_part_size=1024 * 1024
        )
    except HTTPException as exc:
        raise InvalidRequest(f"Bad multipart body: {exc.detail}", param="file") from None
    file = form.get("file")
    if file is None or isinstance(file, str):
        raise InvalidRequest("Send the document as the multipart field 'file'.", param="file")
    unknown = [name for name in form if name not in UPLOAD_FIELDS]
    if unknown:  # as unknown JSON fields are: refused, not silently dropped
        await form.close()
        raise ValidationFailed(
            f"Unknown multipart field {unknown[0]!r} (allowed: {', '.join(UPLOAD_FIELDS)}).",
            code="unknown_parameter",
            param=unknown[0],
        )
    try:
        metadata = _form_object(form.get("metadata"), "metadata")
        access = _form_object(form.get("access"), "access")
    except ValidationFailed:
        await form.close()
        raise
    external_id = form.get("external_id")
    if external_id is not None and not isinstance(external_id, str):
        await form.close()
        raise ValidationFailed("The 'external_id' field must be text.", param="external_id")
    data = await file.read()
    await form.close()
    for value in (file.filename, file.content_type):
        if value is not None and "\x00" in value:  # as JSON strings: no NUL anywhere
            raise ValidationFailed(
                "The file name and type must not contain NUL characters.", param="file"
            )
    if len(data) > limit:
        raise PayloadTooLarge(
            f"The uploaded file exceeds the limit of {limit} bytes.",
            code="file_too_large",
            param="file",
        )
    return Upload(file.filename or "upload", file.content_type, data, metadata, external_id, access)


def _form_object(field: Any, name: str) -> dict[str, Any] | None:
    """The multipart field ``name`` (``metadata``, ``access``): a JSON object (checked
    like the JSON body's field of that name by the core), or a 422 naming it."""
    if field is None:
        return None
    if not isinstance(field, str):
        raise ValidationFailed(f"The '{name}' field must be JSON text.", param=name)
    try:
        value = json.loads(field)
    except ValueError:
        raise ValidationFailed(f"The '{name}' field is not valid JSON.", param=name) from None
    except RecursionError:  # nested deeper than the decoder's stack (values must be flat)
        raise ValidationFailed(f"The '{name}' field is nested too deeply.", param=name) from None
    if not isinstance(value, dict):
        raise ValidationFailed(f"The '{name}' field must be a JSON object.", param=name)
    return value
