"""`--store sqlite:///PATH` naming a file that is not a tiller store, and a bad
`$TILLER_STORE` (review of issue 18).

Before: a 0-byte file passed the "a store is there" check of the reading commands, and
SQLite made a store in it (40 KB written into the user's file); a file of another kind
was "file is not a database" from deep inside the store, or a directory "cannot open the
SQLite store"; and a bad `$TILLER_STORE` was reported as a bad `--store`, which the
person never typed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tiller.cli import app

from ..cli_support import tiller


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TILLER_STORE", raising=False)
    (tmp_path / "empty.db").write_bytes(b"")
    (tmp_path / "notes.db").write_text("my notes, not a database\n")
    (tmp_path / "folder.db").mkdir()
    return tmp_path


def _tree(top: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(top)): p.read_bytes() if p.is_file() else None for p in top.rglob("*")
    }


COMMANDS = [
    ["runs", "list"],
    ["approvals", "list"],
    ["approve", "ap-1"],
    ["outbox", "list"],
    ["mail", "list", "--to", "ops"],
    ["run", "x", "-m", "scripted:s.yaml"],
]


@pytest.mark.parametrize("name", ["empty.db", "notes.db", "folder.db"])
@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_a_file_that_is_not_a_store_is_refused_and_left_alone(
    here: Path, command: list[str], name: str
) -> None:
    before = _tree(here)
    result = CliRunner().invoke(app, [*command, "--store", f"sqlite:///{here / name}"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert "is not a tiller store" in line, line
    assert "--store" in line
    assert _tree(here) == before  # nothing written, nothing made beside it


def test_the_real_command_says_it_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty.db").write_bytes(b"")
    done = tiller("runs", "list", "--store", f"sqlite:///{tmp_path / 'empty.db'}", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"tiller runs list: --store: {tmp_path / 'empty.db'} is not a tiller store (it is "
        "empty); give the store the run used, or set $TILLER_STORE (see tiller runs list --help)"
    ]
    assert (tmp_path / "empty.db").read_bytes() == b""


@pytest.mark.parametrize(
    ("command", "value", "says"),
    [
        (["runs", "list"], "sqlite:///{here}/nope.db", "there is no store at"),
        (["runs", "list"], "store.db", "is not a store URL"),
        (["run", "x", "-m", "scripted:s.yaml"], "redis://x", "is not a store URL"),
        (["runs", "list"], "sqlite:///{here}/empty.db", "is not a tiller store"),
    ],
)
def test_a_bad_tiller_store_is_named_as_the_variable(
    here: Path, command: list[str], value: str, says: str
) -> None:
    env = {"TILLER_STORE": value.replace("{here}", str(here))}
    result = CliRunner(env=env).invoke(app, command)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert says in line
    assert "$TILLER_STORE: " in line and "--store" not in line, line


def test_a_real_sqlite_store_still_opens(here: Path) -> None:
    store = f"sqlite:///{here / 'real.db'}"
    made = CliRunner().invoke(
        app, ["mail", "send", "hi", "--to", "ops", "--from", "lead", "--store", store]
    )
    assert made.exit_code == 0, made.output
    listed = CliRunner().invoke(app, ["runs", "list", "--store", store])
    assert listed.exit_code == 0, listed.output
