"""What the web console learns from its server: `GET /console/settings.json` (whether a token
is wanted, which of the app's scripts to import), the scripts themselves, and the runs
list's thread titles. Real servers on loopback (`serve`), spoken to over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tiller.errors import UsageError
from tiller.examples.console_agent import make_agent
from tiller.serve import AppSettings

from .conftest import AUTH, post_run, run_input


def test_a_server_with_a_token_says_so_and_one_without_says_none(
    serve: Callable[..., str], tmp_path: Path
) -> None:
    with_token = serve(make_agent(step_delay=0))
    without = serve(make_agent(step_delay=0), token=None, store=f"sqlite:///{tmp_path / 'b.db'}")
    # Public, like the page: it asks before it has a token.
    assert httpx.get(f"{with_token}/console/settings.json").json() == {
        "auth": "bearer",
        "scripts": [],
    }
    assert httpx.get(f"{without}/console/settings.json").json() == {"auth": "none", "scripts": []}


def test_console_scripts_are_listed_and_served(serve: Callable[..., str], tmp_path: Path) -> None:
    script = tmp_path / "renderers.js"
    script.write_text("window.tillerConsole.registerToolRenderer('x', {});\n")
    url = serve(make_agent(step_delay=0), console_scripts=[script])
    settings = httpx.get(f"{url}/console/settings.json").json()
    assert settings["scripts"] == ["console/app/0/renderers.js"]
    served = httpx.get(f"{url}/console/app/0/renderers.js")
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("text/javascript")
    assert served.text == script.read_text()
    # Only the listed file, under its own name: no path reaches anything else.
    assert httpx.get(f"{url}/console/app/0/other.js").status_code == 404
    assert httpx.get(f"{url}/console/app/1/renderers.js").status_code == 404


def test_a_console_script_that_is_not_a_js_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not a JavaScript file"):
        AppSettings(store="memory://", token="t", console_scripts=[tmp_path / "missing.js"])
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(UsageError, match="is not a JavaScript file"):
        AppSettings(store="memory://", token="t", console_scripts=[tmp_path / "notes.txt"])


def test_the_runs_list_names_each_thread_by_its_first_message(serve: Callable[..., str]) -> None:
    url = serve(make_agent(step_delay=0))
    long = "please " * 30
    post_run(url, run_input("t1", "r1", [{"id": "m1", "role": "user", "content": "hello  there"}]))
    post_run(url, run_input("t2", "r2", [{"id": "m2", "role": "user", "content": long}]))
    runs = {run["runId"]: run for run in httpx.get(f"{url}/runs", headers=AUTH).json()["runs"]}
    assert runs["r1"]["title"] == "hello there"  # on one line, spaces folded
    assert len(runs["r2"]["title"]) == 80 and runs["r2"]["title"].endswith("…")
