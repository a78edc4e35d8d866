"""The built-in OCR engine: the ``tesseract`` command, registered when it is on PATH.

Each image goes to ``tesseract stdin stdout`` through a pipe, with a timeout: a run that
outlives it is killed, and the page is indexed without text. Tesseract is told to use
one thread (``OMP_THREAD_LIMIT=1``): an ingestion worker is one job's worth of CPU.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentcore.config import PluginSettings, command_environment
from agentcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.knowledge.ocr import OcrEngine

__all__ = [
    "NAME",
    "TesseractOcr",
    "TesseractSettings",
    "agentcore_register_ocr",
    "agentcore_register_settings",
]

NAME = "tesseract"
_MAX_STDERR = 300  # characters of tesseract's complaint kept in an error


class TesseractSettings(PluginSettings):
    """Settings of the ``tesseract`` OCR engine. Namespace ``tesseract``:
    ``AGENTCORE_TESSERACT_<FIELD>``, or ``AgentCore.open(path, tesseract_<field>=...)``."""

    model_config = SettingsConfigDict(env_prefix="AGENTCORE_TESSERACT_")

    languages: str | None = Field(
        None,
        description="Tesseract's `-l`: the languages of the scans, e.g. `eng+deu` (each"
        " needs its traineddata installed); unset: tesseract's default, English.",
    )

    @field_validator("languages", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value


class TesseractOcr:
    """Reads images with the ``tesseract`` command.

    :param command: the command's path.
    :param languages: its ``-l`` argument (``None``: its default).
    """

    name = NAME

    def __init__(self, command: str, languages: str | None = None) -> None:
        self.command = command
        self.languages = languages
        self._env = command_environment(OMP_THREAD_LIMIT="1")  # one thread a page

    def read(self, image: bytes, *, timeout: float) -> str:
        """The text tesseract reads in ``image`` (a PNG).

        :raises TimeoutError: it ran longer than ``timeout`` seconds (it is killed).
        :raises RuntimeError: it failed (its exit status and last words say why).
        """
        languages = ["-l", self.languages] if self.languages else []
        try:
            done = subprocess.run(
                [self.command, "stdin", "stdout", *languages],
                input=image,
                capture_output=True,
                timeout=timeout,
                env=self._env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"tesseract ran longer than {timeout:.3g} s") from None
        if done.returncode != 0:
            said = " ".join(done.stderr.decode("utf-8", "replace").split())[-_MAX_STDERR:]
            raise RuntimeError(f"tesseract exited with status {done.returncode}: {said}")
        return done.stdout.decode("utf-8", "replace")


@hookimpl
def agentcore_register_settings(register: Callable[[str, type[BaseSettings]], None]) -> None:
    """Declare ``TesseractSettings`` under the namespace ``tesseract``."""
    register("tesseract", TesseractSettings)


@hookimpl
def agentcore_register_ocr(register: Callable[[OcrEngine], None], settings: Settings) -> None:
    """Register ``tesseract`` when the command is on ``PATH``."""
    command = shutil.which(NAME)
    if command is not None:
        register(TesseractOcr(command, settings.plugin(TesseractSettings).languages))
