"""`Jail`: the jail's path resolution, builders, and private fixture copies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tiller import TillerError, UsageError
from tiller.tools import Jail, PathOutsideJail, private_copy


@pytest.fixture
def jail(tmp_path: Path) -> Jail:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (tmp_path / "secret.txt").write_text("top secret\n")
    return Jail(root)


def test_defaults(jail: Jail, tmp_path: Path) -> None:
    assert jail.root == (tmp_path / "ws").resolve()
    assert jail.spill_dir == jail.root / ".tiller" / "spill"
    assert not jail.spill_dir.exists()  # created lazily, by the first spill
    assert jail.output_budget_bytes == 64 * 1024
    assert jail.shell_timeout == 120.0


def test_root_must_be_an_existing_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        Jail(tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="not a directory"):
        Jail(tmp_path / "file")
    with pytest.raises(UsageError, match="shell_timeout"):
        Jail(tmp_path, shell_timeout=0)
    with pytest.raises(UsageError, match="output_budget_bytes"):
        Jail(tmp_path, output_budget_bytes=-1)


def test_relative_and_absolute_paths_inside_resolve(jail: Jail) -> None:
    app = jail.root / "src" / "app.py"
    assert jail.resolve("src/app.py") == app
    assert jail.resolve("./src/../src/app.py") == app
    assert jail.resolve(str(app)) == app
    assert jail.resolve(".") == jail.root
    assert jail.resolve("") == jail.root
    assert jail.resolve("new/dir/file.txt") == jail.root / "new" / "dir" / "file.txt"


@pytest.mark.parametrize("path", ["..", "../secret.txt", "src/../../secret.txt", "/etc/passwd"])
def test_escapes_are_refused(jail: Jail, path: str) -> None:
    with pytest.raises(PathOutsideJail) as caught:
        jail.resolve(path)
    assert isinstance(caught.value, TillerError)
    assert caught.value.path == path
    assert f"path {path!r} is outside the workspace" in str(caught.value)
    assert not jail.contains(path)


def test_a_symlink_pointing_out_is_refused(jail: Jail, tmp_path: Path) -> None:
    (jail.root / "leak").symlink_to(tmp_path / "secret.txt")
    (jail.root / "up").symlink_to(tmp_path)
    for path in ("leak", "up/secret.txt", "up/ws/src/app.py/../../../secret.txt"):
        with pytest.raises(PathOutsideJail):
            jail.resolve(path)


def test_a_symlink_to_a_file_inside_is_fine(jail: Jail) -> None:
    (jail.root / "alias.py").symlink_to(jail.root / "src" / "app.py")
    (jail.root / "rel").symlink_to("src")
    assert jail.resolve("alias.py") == jail.root / "src" / "app.py"
    assert jail.resolve("rel/app.py") == jail.root / "src" / "app.py"


def test_a_root_reached_through_a_symlink_still_contains_its_files(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    jail = Jail(tmp_path / "link")
    assert jail.root == real.resolve()
    assert jail.resolve(str(tmp_path / "link" / "f.txt")) == real.resolve() / "f.txt"


def test_symlink_loops_and_nul_bytes_are_refused(jail: Jail) -> None:
    (jail.root / "a").symlink_to(jail.root / "b")
    (jail.root / "b").symlink_to(jail.root / "a")
    with pytest.raises(PathOutsideJail, match="cannot be resolved"):
        jail.resolve("a/x")
    with pytest.raises(PathOutsideJail, match="NUL"):
        jail.resolve("src/a\x00b")


def test_relative(jail: Jail) -> None:
    assert jail.relative(jail.root / "src" / "app.py") == "src/app.py"
    assert jail.relative(jail.root) == "."
    assert jail.relative("/elsewhere") == "/elsewhere"


def test_builders_return_new_contexts(jail: Jail, tmp_path: Path) -> None:
    tuned = jail.with_shell_timeout(5).with_output_budget(100)
    assert (tuned.shell_timeout, tuned.output_budget_bytes) == (5.0, 100)
    assert (jail.shell_timeout, jail.output_budget_bytes) == (120.0, 64 * 1024)
    other = tmp_path / "other"
    other.mkdir()
    moved = tuned.with_spill_dir(tmp_path / "spills").sandboxed(other)
    assert moved.root == other.resolve()
    assert moved.spill_dir == other.resolve() / ".tiller" / "spill"  # never shared
    assert (moved.shell_timeout, moved.output_budget_bytes) == (5.0, 100)
    assert tuned.with_spill_dir(tmp_path / "spills").spill_dir == tmp_path / "spills"
    assert jail == Jail(jail.root)


def test_private_copy_is_fresh_and_private(jail: Jail, tmp_path: Path) -> None:
    (jail.root / ".tiller" / "spill").mkdir(parents=True)
    (jail.root / ".tiller" / "spill" / "old.txt").write_text("old output")
    (jail.root / "leak").symlink_to(tmp_path / "secret.txt")
    into = tmp_path / "runs"
    into.mkdir()

    first = private_copy(jail.root, into=into)
    second = private_copy(jail.root, into=into)

    assert first.root != second.root
    assert first.root.parent == into.resolve()
    assert (first.root / "src" / "app.py").read_text() == "print('hi')\n"
    assert not (first.root / ".tiller").exists()
    assert os.readlink(first.root / "leak") == str(tmp_path / "secret.txt")
    with pytest.raises(PathOutsideJail):
        first.resolve("leak")
    (first.root / "src" / "app.py").write_text("changed")
    assert (second.root / "src" / "app.py").read_text() == "print('hi')\n"
    assert (jail.root / "src" / "app.py").read_text() == "print('hi')\n"


def test_private_copy_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a directory"):
        private_copy(tmp_path / "missing")


# ── protected paths (law 11) ─────────────────────────────────────────────────────────


def test_protected_paths_cover_themselves_and_what_lies_under_them(tmp_path: Path) -> None:
    tools = Jail(tmp_path)
    assert tools.protects("tiller.toml") == "tiller.toml"
    assert tools.protects(tmp_path.resolve() / ".git" / "hooks" / "pre-commit") == ".git/hooks"
    assert tools.protects(".tiller/taint.json") == ".tiller"
    assert tools.protects("src/app.py") is None
    # The rest of .git is git's too: no file tool writes it (a .git file could redirect git).
    assert tools.protects(".git/objects/ab/cdef") == ".git"
    assert tools.protects(".git") == ".git"
    assert tools.protects(".gitignore") is None
    assert tools.protects("/etc/passwd") is None


def test_with_protected_adds_paths_inside_the_jail_and_changes_nothing_it_was_given(
    tmp_path: Path,
) -> None:
    tools = Jail(tmp_path)
    more = tools.with_protected("./check.sh", tmp_path.resolve() / "hooks" / "gate.py", "/etc/x")
    assert more.protects("check.sh") == "check.sh"
    assert more.protects("hooks/gate.py") == "hooks/gate.py"
    assert tools.protects("check.sh") is None
    assert more.sandboxed(tmp_path).protected == more.protected


@pytest.mark.parametrize("bad", ["../outside", "/abs/path", ""])
def test_a_protected_path_must_be_relative_and_inside(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UsageError, match="relative to the workspace root"):
        Jail(tmp_path, protected=(bad,))
