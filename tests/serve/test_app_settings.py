"""`create_app(agent, AppSettings(...))`; the old keywords work for one release and warn."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.applications import Starlette

from tiller.errors import UsageError
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.serve import AppSettings, create_app


def agent() -> Agent:
    return Agent(ScriptedModel(["hi"]), [])


def test_settings_are_checked_when_made(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="the bearer token is empty"):
        AppSettings(store="memory://", token=" ", workspace=tmp_path)
    with pytest.raises(UsageError, match="interrupt_ttl must be positive"):
        AppSettings(store="memory://", token=None, workspace=tmp_path, interrupt_ttl=0)


def test_the_settings_make_an_app(tmp_path: Path) -> None:
    app = create_app(agent(), AppSettings(store="memory://", token="t", workspace=tmp_path))
    assert isinstance(app, Starlette)
    assert app.state.tiller.settings.workspace == tmp_path.resolve()


def test_the_old_keywords_warn_and_still_work(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match=r"create_app\(agent, AppSettings"):
        app = create_app(agent(), store="memory://", token="t", workspace=tmp_path)
    assert app.state.tiller.settings.workspace == tmp_path.resolve()


def test_settings_and_keywords_together_are_refused(tmp_path: Path) -> None:
    settings = AppSettings(store="memory://", token="t", workspace=tmp_path)
    with pytest.raises(UsageError, match="not both"):
        create_app(agent(), settings, token="t")  # type: ignore[call-arg]


def test_no_settings_is_refused() -> None:
    with pytest.raises(UsageError, match="settings missing"):
        create_app(agent())
