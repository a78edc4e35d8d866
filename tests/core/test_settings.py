"""Settings on pydantic-settings: environment, .env, keywords, and plugins' own settings."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentcore import AgentCore, Settings, hookimpl
from agentcore.config import PluginSettings, database_url, export_to_children
from agentcore.plugins.openai_compat import DEFAULT_BASE_URL, OpenAISettings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No AGENTCORE_* or OPENAI_API_KEY variables, and a working directory without .env."""
    for name in list(os.environ):
        if name.upper().startswith("AGENTCORE_") or name.upper() == "OPENAI_API_KEY":
            monkeypatch.delenv(name)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield


def open_core(tmp_path: Path, **kwargs: Any) -> AgentCore:
    return AgentCore.open(str(tmp_path / "core.db"), entry_points=False, **kwargs)


# --- the core's settings ----------------------------------------------------------------


def test_defaults_without_environment(tmp_path: Path) -> None:
    with open_core(tmp_path) as core:
        assert core.settings.model_dump() == Settings.model_validate({}).model_dump()
        assert core.settings.max_top_k == 100 and core.settings.webhook_allowed_networks == ()


def test_environment_variables_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCORE_MAX_TOP_K", "50")
    monkeypatch.setenv("agentcore_model_timeout", "2.5")  # names are case-insensitive
    monkeypatch.setenv("AGENTCORE_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/8, 127.0.0.0/8,")
    monkeypatch.setenv("AGENTCORE_START_WORKERS", "false")
    with open_core(tmp_path) as core:
        assert core.settings.max_top_k == 50
        assert core.settings.model_timeout == 2.5
        assert core.settings.webhook_allowed_networks == ("10.0.0.0/8", "127.0.0.0/8")
        assert core.settings.start_workers is False


def test_keyword_arguments_win_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCORE_MAX_TOP_K", "50")
    with open_core(tmp_path, max_top_k=60, webhook_allowed_networks=["192.168.0.0/16"]) as core:
        assert core.settings.max_top_k == 60
        assert core.settings.webhook_allowed_networks == ("192.168.0.0/16",)


def test_dotenv_file_is_read_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Path(".env").write_text(
        "AGENTCORE_MAX_TOP_K=42\n"
        "AGENTCORE_MAX_PAGE_SIZE=77\n"
        "AGENTCORE_OPENAI_MODEL=from-dotenv\n"  # a plugin's line: not the core's business
        "AGENTCORE_DB=/somewhere/else.db\n"  # the CLI's variable: ignored by Settings
        "UNRELATED=1\n"
    )
    monkeypatch.setenv("AGENTCORE_MAX_PAGE_SIZE", "55")
    with open_core(tmp_path) as core:
        assert core.settings.max_top_k == 42
        assert core.settings.max_page_size == 55
        assert core.settings.plugin(OpenAISettings).model == "from-dotenv"
    assert Settings(_env_file=None).max_top_k == 100  # .env can be skipped


def test_bad_core_value_is_refused_at_open_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValidationError, match="max_top_k"):
        open_core(tmp_path, max_top_k=0)
    monkeypatch.setenv("AGENTCORE_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/8,not-a-network")
    with pytest.raises(ValidationError, match="webhook_allowed_networks"):
        open_core(tmp_path)
    monkeypatch.delenv("AGENTCORE_WEBHOOK_ALLOWED_NETWORKS")
    with pytest.raises(ValidationError, match="default_top_k cannot exceed max_top_k"):
        open_core(tmp_path, default_top_k=20, max_top_k=10)
    assert not (tmp_path / "core.db").exists()  # refused before the store was opened


def test_unknown_keyword_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="max_topk") as info:
        open_core(tmp_path, max_topk=5)
    assert "Extra inputs are not permitted" in str(info.value)
    with pytest.raises(ValidationError, match="openai_modle"):  # near a plugin's name
        open_core(tmp_path, openai_modle="llama3")
    with pytest.raises(ValidationError, match="bogus"):
        Settings(bogus=1)


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.max_top_k = 3  # type: ignore[misc]


def test_from_env_still_builds_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCORE_MAX_TOP_K", "50")
    settings = Settings.from_env(default_top_k=7)
    assert (settings.max_top_k, settings.default_top_k) == (50, 7)


def test_explicit_settings_plus_keywords(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = Settings(max_top_k=9, default_top_k=2)
    monkeypatch.setenv("AGENTCORE_MAX_PAGE_SIZE", "55")  # not read: settings are given
    with open_core(tmp_path, settings=base, default_top_k=3, openai_model="m") as core:
        assert (core.settings.max_top_k, core.settings.default_top_k) == (9, 3)
        assert core.settings.max_page_size == 100
        assert core.settings.plugin(OpenAISettings).model == "m"
    with pytest.raises(ValidationError, match="default_top_k"):
        open_core(tmp_path, settings=base, default_top_k=10)  # keywords are validated too


# --- the OpenAI-compatible provider's own settings ---------------------------------------


def test_openai_settings_from_keywords_register_the_model(tmp_path: Path) -> None:
    with open_core(
        tmp_path, openai_base_url="http://127.0.0.1:9/v1", openai_model="llama3"
    ) as core:
        openai = core.settings.plugin(OpenAISettings)
        assert openai.base_url == "http://127.0.0.1:9/v1" and openai.model == "llama3"
        assert core.settings.plugin("openai") is openai
        assert "openai:llama3" in core.chat_models
        assert not hasattr(core.settings, "openai_model")  # no longer a core field


def test_openai_settings_from_the_environment_and_key_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCORE_OPENAI_MODEL", "gpt-4o-mini")
    monkeypatch.setenv("AGENTCORE_OPENAI_EMBEDDING_MODEL", "text-embedding-3-small")
    monkeypatch.setenv("AGENTCORE_OPENAI_EMBEDDING_DIMENSION", "1536")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    with open_core(tmp_path) as core:
        openai = core.settings.plugin(OpenAISettings)
        assert openai.api_key is not None and openai.api_key.get_secret_value() == "sk-fallback"
        assert openai.resolved_base_url() == DEFAULT_BASE_URL
        assert "openai:gpt-4o-mini" in core.chat_models
        assert core.embedders["openai:text-embedding-3-small"].dimension == 1536
    monkeypatch.setenv("AGENTCORE_OPENAI_API_KEY", "sk-own")  # the prefixed name wins
    key = OpenAISettings().api_key
    assert key is not None and key.get_secret_value() == "sk-own"
    with open_core(tmp_path, openai_api_key="sk-keyword") as core:  # a keyword wins over both
        key = core.settings.plugin(OpenAISettings).api_key
        assert key is not None and key.get_secret_value() == "sk-keyword"


def test_empty_openai_key_means_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    monkeypatch.setenv("AGENTCORE_OPENAI_MODEL", "gpt-4o-mini")
    openai = OpenAISettings()
    assert openai.api_key is None and openai.resolved_base_url() is None


def test_bad_plugin_value_names_the_setting_and_the_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValidationError) as info:
        open_core(tmp_path, openai_embedding_dimension="many")
    message = str(info.value)
    assert "openai_embedding_dimension" in message and "plugin 'openai'" in message
    assert "valid integer" in message

    monkeypatch.setenv("AGENTCORE_OPENAI_EMBEDDING_DIMENSION", "many")
    with pytest.raises(ValidationError, match="openai_embedding_dimension"):
        open_core(tmp_path)
    assert not (tmp_path / "core.db").exists()


# --- a third-party plugin declaring its own settings ---------------------------------------


class AcmeSettings(PluginSettings):
    """A third-party plugin's settings, namespace ``acme``."""

    model_config = SettingsConfigDict(env_prefix="AGENTCORE_ACME_")

    greeting: str = "hello"
    retries: int = Field(3, ge=0)
    token: SecretStr | None = Field(None, min_length=12)


class AcmePlugin:
    """Declares ``AcmeSettings`` and records what its other hooks were given."""

    def __init__(self) -> None:
        self.seen: list[AcmeSettings] = []

    @hookimpl
    def agentcore_register_settings(
        self, register: Callable[[str, type[BaseSettings]], None]
    ) -> None:
        register("acme", AcmeSettings)

    @hookimpl
    def agentcore_open_store(self, url: str, settings: Settings) -> None:
        self.seen.append(settings.plugin(AcmeSettings))  # already loaded when the store opens

    @hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Settings) -> None:
        self.seen.append(settings.plugin(AcmeSettings))


def test_third_party_plugin_settings_from_env_dotenv_and_keywords(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Path(".env").write_text("AGENTCORE_ACME_GREETING=from-dotenv\n")
    monkeypatch.setenv("AGENTCORE_ACME_RETRIES", "5")
    plugin = AcmePlugin()
    with open_core(tmp_path, plugins=[plugin]) as core:
        acme = core.settings.plugin(AcmeSettings)
        assert (acme.greeting, acme.retries) == ("from-dotenv", 5)
        assert plugin.seen == [acme, acme]
    plugin = AcmePlugin()
    with open_core(tmp_path, plugins=[plugin], acme_greeting="hi", acme_retries=0) as core:
        assert core.settings.plugin(AcmeSettings) == AcmeSettings(greeting="hi", retries=0)


def test_third_party_plugin_bad_and_unknown_settings(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        open_core(tmp_path, plugins=[AcmePlugin()], acme_retries=-1)
    message = str(info.value)
    assert "acme_retries" in message and "plugin 'acme'" in message
    assert "greater than or equal to 0" in message
    with pytest.raises(ValidationError) as info:
        open_core(tmp_path, plugins=[AcmePlugin()], acme_token="tok-short")
    assert "acme_token" in str(info.value) and "tok-short" not in str(info.value)
    with pytest.raises(ValidationError, match="acme_colour"):
        open_core(tmp_path, plugins=[AcmePlugin()], acme_colour="red")
    with pytest.raises(ValidationError, match="acme_greeting"):  # unknown without the plugin
        open_core(tmp_path, acme_greeting="hi")


def declares(namespace: str, model: type[BaseSettings]) -> object:
    """A plugin that declares ``model`` under ``namespace``."""

    class Declares:
        @hookimpl
        def agentcore_register_settings(
            self, register: Callable[[str, type[BaseSettings]], None]
        ) -> None:
            register(namespace, model)

    return Declares()


def test_plugin_settings_declarations_are_checked(tmp_path: Path) -> None:
    class Unprefixed(PluginSettings):
        colour: str = "red"

    class Clash(PluginSettings):
        model_config = SettingsConfigDict(env_prefix="AGENTCORE_MAX_")
        top_k: int = 1  # would be the keyword max_top_k, a core setting

    with pytest.raises(ValueError, match="env_prefix='AGENTCORE_PAINT_'"):
        open_core(tmp_path, plugins=[declares("paint", Unprefixed)])
    with pytest.raises(ValueError, match="'max_top_k' of plugin 'max' is declared twice"):
        open_core(tmp_path, plugins=[declares("max", Clash)])
    with pytest.raises(ValueError, match="two plugins declare settings named 'acme'"):
        open_core(tmp_path, plugins=[AcmePlugin(), declares("acme", AcmeSettings)])
    with pytest.raises(ValueError, match="lower-case"):
        open_core(tmp_path, plugins=[declares("Acme", AcmeSettings)])


class BareSettings(PluginSettings):
    """A plugin's settings named without its namespace (as the HTTP adapter's are)."""

    model_config = SettingsConfigDict(env_prefix="AGENTCORE_")

    max_widgets: int = Field(10, ge=1)


def test_plugin_settings_may_keep_bare_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # env_prefix AGENTCORE_: the field's own name is its keyword, AGENTCORE_<FIELD> its
    # variable (the names a setting had as the core's keep working once a plugin owns it)
    monkeypatch.setenv("AGENTCORE_MAX_WIDGETS", "20")
    with open_core(tmp_path, plugins=[declares("widgets", BareSettings)]) as core:
        assert core.settings.plugin(BareSettings).max_widgets == 20
    plugin = declares("widgets", BareSettings)
    with open_core(tmp_path, plugins=[plugin], max_widgets=30, max_top_k=7) as core:
        assert core.settings.plugin(BareSettings).max_widgets == 30
        assert core.settings.max_top_k == 7
    with pytest.raises(ValidationError) as info:
        open_core(tmp_path, plugins=[declares("widgets", BareSettings)], max_widgets=0)
    message = str(info.value)
    assert "max_widgets" in message and "plugin 'widgets'" in message
    assert "widgets_max_widgets" not in message and "AGENTCORE_*" in message


def test_bare_plugin_settings_may_not_clash(tmp_path: Path) -> None:
    class TopK(PluginSettings):
        model_config = SettingsConfigDict(env_prefix="AGENTCORE_")
        max_top_k: int = 1  # the core's

    class Model(PluginSettings):
        model_config = SettingsConfigDict(env_prefix="AGENTCORE_")
        openai_model: str = "x"  # the OpenAI-compatible provider's keyword

    with pytest.raises(ValueError, match="'max_top_k' of plugin 'topk' is declared twice"):
        open_core(tmp_path, plugins=[declares("topk", TopK)])
    with pytest.raises(ValueError, match="'openai_model' of plugin '.*' is declared twice"):
        Settings.load({"openai": OpenAISettings, "model": Model})
    with pytest.raises(ValueError, match="env_prefix='AGENTCORE_WIDGETS_', or 'AGENTCORE_'"):
        Settings.load({"widgets": AcmeSettings})


def test_plugin_settings_outside_open() -> None:
    """Settings built in code: typed lookup reads the environment; namespaces must exist."""
    settings = Settings()
    assert settings.plugin(AcmeSettings) == AcmeSettings()
    with pytest.raises(LookupError, match="'acme'"):
        settings.plugin("acme")
    chosen = settings.with_plugins(acme=AcmeSettings(greeting="yo"))
    assert chosen.plugin("acme") == chosen.plugin(AcmeSettings) == AcmeSettings(greeting="yo")
    loaded = Settings.load({"acme": AcmeSettings}, acme_retries=1, max_top_k=7)
    assert loaded.plugin(AcmeSettings).retries == 1 and loaded.max_top_k == 7


def test_the_database_variable_is_read_and_exported_by_the_settings_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``AGENTCORE_DB`` is read in one place (``config.database_url``), and ``serve
    --workers`` hands its store and settings to worker processes through
    ``config.export_to_children``, which the workers' settings then read."""
    for name in ("AGENTCORE_RATE_LIMIT_BACKEND", "AGENTCORE_MAX_TOP_K"):
        monkeypatch.setenv(name, "")  # so that they are unset again after the test
    assert database_url() == "./agentcore.db"
    monkeypatch.setenv("AGENTCORE_DB", "postgresql://db/app")
    assert database_url() == "postgresql://db/app"
    export_to_children("other.db", rate_limit_backend="store", max_top_k="7")
    assert database_url() == "other.db"
    settings = Settings()
    assert (settings.rate_limit_backend, settings.max_top_k) == ("store", 7)
    with pytest.raises(ValueError, match="no_such_setting"):
        export_to_children("other.db", no_such_setting="1")
