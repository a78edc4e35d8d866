"""Embedder and OCR plugins that misbehave on purpose, for the ingestion worker tests.

They live in a module of their own (``tests/`` is on ``sys.path`` under pytest) so a
worker process can import them: a worker gets its parent's ``sys.path`` and the plugin
objects by pickle, and rebuilds the same embedder. Each embedder wraps the default one,
so the vectors it returns are the default ones.
"""

from __future__ import annotations

import gc
import importlib
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import agentcore
from agentcore.plugins.hashing_embedder import HashingEmbedder

MiB = 1024 * 1024


class MisbehavingEmbedder:
    """The default embedder, except when a passage holds ``trigger``: then it sleeps
    ``sleep`` seconds and/or holds ``allocate_mb`` MiB while it embeds, or ends its
    process at once with ``exit_code`` (a crash) or, with ``abort``, by ``SIGABRT`` (as
    Rust does when an allocation is refused).

    ``worker_patches`` (``{"module:attribute": value}``) are set in each worker process
    that unpickles it, to reach code only a worker runs.

    A plugin object: register it with ``AgentCore.open(..., plugins=[it],
    embedder=it.name)``. ``pid_file`` (if given) gets the id of the process embedding
    a triggered batch, so a test can see which worker ran it; ``objects_file`` the
    classes of the objects that process holds.
    """

    dimension = 1024

    def __init__(
        self,
        name: str = "misbehaving",
        *,
        trigger: str = "TRIGGER",
        sleep: float = 0.0,
        allocate_mb: int = 0,
        exit_code: int | None = None,
        abort: bool = False,
        worker_patches: dict[str, Any] | None = None,
        pid_file: str | None = None,
        objects_file: str | None = None,
    ) -> None:
        self.name = name
        self.trigger = trigger
        self.sleep = sleep
        self.allocate_mb = allocate_mb
        self.exit_code = exit_code
        self.abort = abort
        self.worker_patches = worker_patches or {}
        self.pid_file = pid_file
        self.objects_file = objects_file
        self._inner: HashingEmbedder | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_inner": None}  # the worker makes its own

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for target, value in self.worker_patches.items():
            module, attribute = target.split(":")
            setattr(importlib.import_module(module), attribute, value)

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        if self._inner is None:
            self._inner = HashingEmbedder()
        held = None
        if kind == "passage" and any(self.trigger in text for text in texts):
            if self.pid_file is not None:
                with open(self.pid_file, "w") as out:
                    out.write(str(os.getpid()))
            if self.objects_file is not None:  # what the embedding process has built
                built = {type(o) for o in gc.get_objects()}
                with open(self.objects_file, "w") as out:
                    out.write("\n".join(sorted(f"{t.__module__}.{t.__qualname__}" for t in built)))
            if self.exit_code is not None:
                os._exit(self.exit_code)
            if self.abort:
                os.abort()
            if self.allocate_mb:
                held = np.ones(self.allocate_mb * MiB, dtype=np.uint8)  # touched: resident
            if self.sleep:
                time.sleep(self.sleep)
        vectors = self._inner.embed(texts, kind=kind)  # type: ignore[arg-type]
        del held
        return vectors

    @agentcore.hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        register(self)


class BrokenOcr:
    """An OCR engine that never reads a page: it raises (``"raise"``), or uses all the
    time it is given and then says it ran out (``"timeout"``, as a well-behaved engine
    whose work outlasts its timeout does). Register it with ``AgentCore.open(...,
    plugins=[it], ocr=it.name)``; a worker process rebuilds it from its pickle."""

    def __init__(self, mode: str, name: str = "broken-ocr") -> None:
        self.mode = mode
        self.name = name

    def read(self, image: bytes, *, timeout: float) -> str:
        if self.mode == "timeout":
            time.sleep(timeout)
            raise TimeoutError(f"gave up after {timeout:.3g} s")
        raise RuntimeError("the scanner glass is dirty")

    @agentcore.hookimpl
    def agentcore_register_ocr(self, register: Any, settings: Any) -> None:
        register(self)
