"""What an ingestion worker process builds: the ingest pipeline, and nothing more.

A worker gets a ``WorkerBootstrap`` (pickled) and calls it: the store opened again
(unmigrated), the same plugins and settings (so the same embedder and OCR engine), and
the ingest pipeline over them. No core: no indexes, caches, metrics, webhook delivery or job
scheduler, none of which a job uses. Its writes check the workspace's embedder (as
every knowledge write does); the server's index catches up from the store's change log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from agentcore._plugin_manager import configured_ocr, make_plugin_manager, registered_embedders
from agentcore.events import EventBus
from agentcore.knowledge.ingest import IngestPipeline
from agentcore.knowledge.terms import TermCounter
from agentcore.knowledge.text import stems
from agentcore.knowledge.vectors import Embedding, Rows, WorkspaceEmbedders

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.storage.base import Store

__all__ = ["WorkerBootstrap"]

T = TypeVar("T")


@dataclass(frozen=True)
class WorkerBootstrap:
    """Builds a worker's ``IngestPipeline`` (``WorkerSpec.bootstrap``).

    :param plugins: the core's extra plugins, as objects or module names.
    :param entry_points: whether plugins load from the ``agentcore`` entry-point group.
    :param settings: the core's settings (the plugins' included).
    :param reopen: opens the core's store again, in the worker.
    """

    plugins: tuple[object, ...]
    entry_points: bool
    settings: Settings
    reopen: Callable[[], Store]

    def __call__(self) -> IngestPipeline:
        """The pipeline over the store opened again."""
        settings = self.settings
        pm = make_plugin_manager(self.plugins, entry_points=self.entry_points)
        store = self.reopen()
        embedding = Embedding(
            registered_embedders(pm, settings),
            settings.embedder,
            max_token_chars=settings.max_token_chars,
        )
        events = EventBus()
        pm.hook.agentcore_register_event_kinds(register=events.register_kind)
        embedders = WorkspaceEmbedders(store, embedding, codec=settings.index_dtype)

        def write(
            organization_id: str,
            environment: str,
            store_write: Callable[[], T],
            *,
            added: Callable[[T], Rows | None] | None = None,
        ) -> T:
            # one job at a time in a worker: no lock; a document write checks the
            # workspace's embedder in its own transaction (``added`` is given for it)
            key = (organization_id, environment)
            return embedders.write(key, store_write, checks_itself=added is not None)

        return IngestPipeline(
            store,
            settings,
            embedding,
            write,
            terms=TermCounter(stems.tokens_of, stems.stem_frequencies),
            events=events,
            ocr=configured_ocr(pm, settings),
        )
