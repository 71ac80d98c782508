"""`glob` and `grep`: finding files and lines in the workspace, bounded, skipping .git,
.tiller and binaries, and never walking out of the jail through a symlink."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tiller import CancellationToken, Cancelled
from tiller.tools import ExecContext, Outcome
from tiller.tools.builtin import glob, grep
from tiller.tools.builtin._glob import GlobPattern

from .file_tools_support import run


@pytest.fixture
def root(ctx: ExecContext) -> Path:
    root = ctx.jail.root
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return os.getcwd()\n")
    (root / "src" / "pkg" / "util.py").write_text("def helper():\n    pass  # TODO\n")
    (root / "src" / "pkg" / "notes.txt").write_text("todo: lower case\n")
    (root / "notes.md").write_text("TODO: write docs\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("TODO in git\n")
    (root / ".tiller" / "spill").mkdir(parents=True)
    (root / ".tiller" / "spill" / "call-1.txt").write_text("TODO spilled\n")
    (root / "blob.bin").write_bytes(b"TODO\x00binary")
    return root


# ── the pattern language ─────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.py", "app.py", True),
        ("*.py", "src/app.py", False),
        ("**/*.py", "app.py", True),
        ("**/*.py", "src/pkg/util.py", True),
        ("src/**/*.py", "src/app.py", True),
        ("src/**/*.py", "src/pkg/util.py", True),
        ("src/**/*.py", "tests/app.py", False),
        ("src/*", "src/pkg/util.py", False),
        ("src/**", "src/pkg/util.py", True),
        ("src/?pp.py", "src/app.py", True),
        ("src/[ab]pp.py", "src/app.py", True),
        ("src/[!a]pp.py", "src/app.py", False),
        ("*.{py,md}", "notes.md", True),
        ("*.{py,md}", "notes.txt", False),
        ("{src,lib}/**/{a,u}*.py", "src/pkg/util.py", True),
        ("./src//app.py", "src/app.py", True),
        ("**/**/util.py", "src/pkg/util.py", True),
        ("*", ".hidden", True),
        ("{unclosed", "{unclosed", True),
        ("{single}", "{single}", True),
        ("*.PY", "app.py", False),
    ],
)
def test_glob_patterns(pattern: str, path: str, expected: bool) -> None:
    assert GlobPattern(pattern).matches(path.split("/")) is expected


def test_pruning_knows_which_directories_can_hold_matches() -> None:
    pattern = GlobPattern("src/**/*.py")
    assert pattern.may_match_under(("src",))
    assert pattern.may_match_under(("src", "deep", "er"))
    assert not pattern.may_match_under(("tests",))
    assert not GlobPattern("*.py").may_match_under(("src",))
    assert GlobPattern("{a,b}/x").may_match_under(("b",))


@pytest.mark.parametrize("pattern", ["../*", "src/../../x", "/etc/*"])
def test_patterns_cannot_leave_their_directory(pattern: str) -> None:
    with pytest.raises(ValueError):
        GlobPattern(pattern)


def test_brace_bombs_are_refused() -> None:
    with pytest.raises(ValueError, match="more than 64 alternatives"):
        GlobPattern("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}")


# ── glob ─────────────────────────────────────────────────────────────────────────


async def test_glob_finds_files_sorted_relative_to_the_root(ctx: ExecContext, root: Path) -> None:
    done = await run(ctx, "glob", pattern="**/*.py")
    assert done.outcome is Outcome.OK
    assert done.result.content == "src/app.py\nsrc/pkg/util.py"
    done = await run(ctx, "glob", pattern="*", path="src/pkg")
    assert done.result.content == "src/pkg/notes.txt\nsrc/pkg/util.py"
    done = await run(ctx, "glob", pattern="**/*.{md,txt}")
    assert done.result.content == "notes.md\nsrc/pkg/notes.txt"  # .git, .tiller skipped
    done = await run(ctx, "glob", pattern="*.rs")
    assert done.result.content == "no files match '*.rs' in ."


async def test_glob_errors(ctx: ExecContext, root: Path) -> None:
    assert (await run(ctx, "glob", pattern="*", path="missing")).result.content == (
        "no such directory: missing"
    )
    done = await run(ctx, "glob", pattern="*", path="notes.md")
    assert done.result.content.startswith("notes.md is a file; glob searches a directory")
    done = await run(ctx, "glob", pattern="../*")
    assert done.is_error and "has a '..' segment" in done.result.content


async def test_glob_lists_links_to_files_inside_and_walks_no_linked_directory(
    ctx: ExecContext, root: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret.py").write_text("")
    (root / "leak.py").symlink_to(tmp_path / "secret.py")
    (root / "outdir").symlink_to(tmp_path)
    (root / "loop").symlink_to(".")
    (root / "srclink").symlink_to("src")
    (root / "alias.py").symlink_to("src/app.py")
    done = await run(ctx, "glob", pattern="**/*.py")
    assert done.result.content == "alias.py\nsrc/app.py\nsrc/pkg/util.py"


async def test_glob_is_bounded(ctx: ExecContext, root: Path) -> None:
    (root / "many").mkdir()
    for i in range(1003):
        (root / "many" / f"f{i:04}.log").write_text("")
    lines = (await run(ctx, "glob", pattern="many/*.log")).result.content.splitlines()
    assert len(lines) == 1001
    assert lines[0] == "many/f0000.log"
    assert lines[-1] == "[... and 3 more files; narrow the pattern or path]"


async def test_glob_checks_the_token(root: Path) -> None:
    token = CancellationToken()
    token.cancel()
    with pytest.raises(Cancelled):
        await glob.call({"pattern": "**"}, ExecContext.for_test(root, token=token))


# ── grep ─────────────────────────────────────────────────────────────────────────


async def test_matches_in_file_order(ctx: ExecContext, root: Path) -> None:
    done = await run(ctx, "grep", pattern="TODO")
    assert done.outcome is Outcome.OK
    assert done.result.content == "notes.md:1:TODO: write docs\nsrc/pkg/util.py:2:    pass  # TODO"


async def test_ignore_case(ctx: ExecContext, root: Path) -> None:
    done = await run(ctx, "grep", pattern="todo", ignore_case=True, path="src")
    assert done.result.content == (
        "src/pkg/notes.txt:1:todo: lower case\nsrc/pkg/util.py:2:    pass  # TODO"
    )


async def test_regex_path_and_glob(ctx: ExecContext, root: Path) -> None:
    done = await run(ctx, "grep", pattern=r"^def \w+", path="src")
    assert done.result.content == "src/app.py:3:def main():\nsrc/pkg/util.py:1:def helper():"
    done = await run(ctx, "grep", pattern="TODO", glob="*.md")
    assert done.result.content == "notes.md:1:TODO: write docs"
    done = await run(ctx, "grep", pattern="def", glob="pkg/*.py")
    assert done.result.content == "src/pkg/util.py:1:def helper():"
    done = await run(ctx, "grep", pattern="def", glob="src/**/*.{py,rs}")
    assert done.result.content == "src/app.py:3:def main():\nsrc/pkg/util.py:1:def helper():"
    done = await run(ctx, "grep", pattern="os", path="src/app.py")
    assert done.result.content == "src/app.py:1:import os\nsrc/app.py:4:    return os.getcwd()"
    done = await run(ctx, "grep", pattern="os", path="src/app.py", glob="*.md")
    assert done.result.content == "no matches for 'os' in src/app.py (files matching *.md)"
    # An explicit path into a skipped directory is searched.
    done = await run(ctx, "grep", pattern="TODO", path=".tiller/spill")
    assert done.result.content == ".tiller/spill/call-1.txt:1:TODO spilled"


async def test_context_lines(ctx: ExecContext, root: Path) -> None:
    (root / "c.txt").write_text("".join(f"l{i}\n" for i in range(1, 13)) + "hit\n")
    (root / "c.txt").write_text("a\nhit1\nb\nc\nd\ne\nhit2\nhit3\nf\n")
    (root / "d.txt").write_text("hit4\nz\n")
    done = await run(ctx, "grep", pattern="hit", context=1, glob="[cd].txt")
    assert done.result.content == (
        "c.txt-1-a\nc.txt:2:hit1\nc.txt-3-b\n--\n"
        "c.txt-6-e\nc.txt:7:hit2\nc.txt:8:hit3\nc.txt-9-f\n--\n"
        "d.txt:1:hit4\nd.txt-2-z"
    )


async def test_no_matches_and_errors(ctx: ExecContext, root: Path) -> None:
    done = await run(ctx, "grep", pattern="nothing-like-this")
    assert done.result.content == "no matches for 'nothing-like-this' in ."
    assert not done.is_error
    done = await run(ctx, "grep", pattern="(unclosed")
    assert done.is_error
    assert done.result.content.startswith("invalid regular expression '(unclosed': ")
    done = await run(ctx, "grep", pattern="x", path="missing")
    assert done.result.content == "no such file or directory: missing"
    assert (await run(ctx, "grep", pattern="x", path="..")).is_error
    assert (await run(ctx, "grep", pattern="x", glob="../*")).is_error
    assert (await run(ctx, "grep", pattern="x", context=11)).outcome is Outcome.INVALID_ARGUMENTS


async def test_symlinks_out_of_the_jail_and_hard_links_are_skipped(
    ctx: ExecContext, root: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("TODO secret\n")
    (root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (root / "outdir").symlink_to(tmp_path)
    (root / "alias.md").symlink_to(root / "notes.md")
    os.link(tmp_path / "secret.txt", root / "hard.txt")
    done = await run(ctx, "grep", pattern="TODO")
    assert "secret" not in done.result.content
    assert "alias.md:1:TODO: write docs" in done.result.content


async def test_output_is_bounded(ctx: ExecContext, root: Path) -> None:
    (root / "many.txt").write_text("match " + "z" * 1000 + "\n" + "match\n" * 500)
    content = (await run(ctx, "grep", pattern="match", path="many.txt")).result.content
    lines = content.splitlines()
    assert len(lines) == 201
    assert lines[0] == "many.txt:1:match " + "z" * 294 + " [...]"
    assert lines[-1] == (
        "[stopped after 200 matches; narrow the pattern, path or glob to see the rest]"
    )


async def test_grep_checks_the_token_between_directories(root: Path) -> None:
    token = CancellationToken()
    token.cancel()
    context = ExecContext.for_test(root, token=token)
    with pytest.raises(Cancelled):
        await grep.call({"pattern": "TODO"}, context)
