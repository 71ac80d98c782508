"""`apply_patch`: unified diffs over several files, exact hunks found by context, all or
nothing, with messages that say which hunk failed and why."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tiller.phase import Phase
from tiller.tools import CheckpointOrigin, ExecContext, Outcome, ToolError
from tiller.tools.builtin import apply_patch
from tiller.tools.builtin._diff import parse_patch

from .file_tools_support import RecordingSnapshots, run


@pytest.fixture
def root(ctx: ExecContext) -> Path:
    root = ctx.jail.root
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    (root / "README.md").write_text("# Title\n\nSome text.\n")
    (root / "old.txt").write_text("bye\nnow\n")
    return root


async def patched(ctx: ExecContext, patch: str) -> str:
    done = await run(ctx, "apply_patch", patch=patch)
    assert done.outcome is Outcome.OK, done.result.content
    return done.result.content


async def refused(ctx: ExecContext, patch: str) -> str:
    done = await run(ctx, "apply_patch", patch=patch)
    assert done.outcome is Outcome.ERROR, done.result.content
    return done.result.content


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


MULTI = """\
diff --git a/src/app.py b/src/app.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/app.py
@@ -2,3 +2,3 @@
 line 2
-line 3
+LINE 3
 line 4
@@ -15,3 +15,4 @@ def somewhere():
 line 17
-line 18
+LINE 18
+line 18.5
 line 19
--- /dev/null
+++ b/docs/new.md
@@ -0,0 +1,2 @@
+# New
+text
--- a/old.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-bye
-now
"""


async def test_a_patch_over_several_files(ctx: ExecContext, root: Path) -> None:
    summary = await patched(ctx, MULTI)
    assert summary == (
        "patched src/app.py: 2 hunks, +3 -2; hunk 2 at line 17 (offset +2)\n"
        "created docs/new.md (+2)\n"
        "deleted old.txt"
    )
    lines = (root / "src" / "app.py").read_text().splitlines()
    assert lines[1:4] == ["line 2", "LINE 3", "line 4"]
    assert lines[16:20] == ["line 17", "LINE 18", "line 18.5", "line 19"]
    assert len(lines) == 21
    assert (root / "docs" / "new.md").read_text() == "# New\ntext\n"
    assert not (root / "old.txt").exists()


async def test_all_or_nothing(ctx: ExecContext, root: Path) -> None:
    before = tree(root)
    bad = MULTI.replace("-bye\n-now\n", "-bye\n-later\n")
    message = await refused(ctx, bad)
    assert message == (
        "hunk 1 of old.txt (@@ -1,2 +0,0 @@) does not apply: its lines are not in the file "
        "at line 1 (where its header puts it) nor anywhere else; line 2 of the file is 'now' "
        "where the hunk expects 'later'. Nothing was changed. Read the file again and rebuild "
        "the hunk from its current content (context lines must match exactly)."
    )
    assert tree(root) == before
    assert not (root / "docs").exists()


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            "--- a/src/app.py\n+++ b/src/app.py\n@@ -3,2 +3,2 @@\n line 3\n-no such line\n+x\n",
            "hunk 1 of src/app.py (@@ -3,2 +3,2 @@) does not apply: its lines are not in the "
            "file at line 3 (where its header puts it) nor anywhere else; line 4 of the file is "
            "'line 4' where the hunk expects 'no such line'.",
        ),
        (
            "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,1 +1,1 @@\n-nowhere\n+x\n",
            "hunk 1 of src/app.py (@@ -1,1 +1,1 @@) does not apply: its first context or "
            "removed line 'nowhere' occurs nowhere in the file.",
        ),
        (
            # No fuzz: trailing whitespace in the context is a difference.
            "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n line 1 \n-line 2\n+x\n",
            "hunk 1 of src/app.py (@@ -1,2 +1,2 @@) does not apply: its first context or "
            "removed line 'line 1 ' occurs nowhere in the file.",
        ),
        (
            "--- a/src/app.py\n+++ b/src/app.py\n"
            "@@ -10,1 +10,1 @@\n-line 10\n+ten\n@@ -5,1 +5,1 @@\n-line 5\n+five\n",
            "hunk 2 of src/app.py (@@ -5,1 +5,1 @@) does not apply: its lines are not in the "
            "file at line 5 (where its header puts it) nor anywhere else; they only occur above "
            "line 11, before the previous hunk.",
        ),
        (
            "--- a/src/app.py\n+++ b/src/app.py\n"
            "@@ -19,3 +19,3 @@\n line 19\n line 20\n-line 21\n+x\n",
            "hunk 1 of src/app.py (@@ -19,3 +19,3 @@) does not apply: its lines are not "
            "in the file at line 19 (where its header puts it) nor anywhere else; the file ends "
            "at line 20, the hunk needs 3 lines.",
        ),
        (
            "--- a/missing.py\n+++ b/missing.py\n@@ -1 +1 @@\n-a\n+b\n",
            "no such file: missing.py (the patch changes it; to create a file, use "
            "'--- /dev/null')",
        ),
        (
            "--- /dev/null\n+++ b/README.md\n@@ -0,0 +1 @@\n+again\n",
            "README.md already exists, but the patch creates it ('--- /dev/null'); to change it, "
            "use '--- a/README.md' and hunks against its content",
        ),
        (
            "--- a/README.md\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-# Title\n",
            "the patch deletes README.md ('+++ /dev/null') but its hunks leave 2 lines of it; a "
            "deletion removes every line (each as a '-' line)",
        ),
        (
            "--- a/README.md\n+++ b/old.txt\n@@ -1 +1 @@\n-# Title\n+# T\n",
            "cannot rename README.md to old.txt: old.txt already exists",
        ),
    ],
)
async def test_hunks_that_do_not_apply(
    ctx: ExecContext, root: Path, patch: str, message: str
) -> None:
    before = tree(root)
    assert (await refused(ctx, patch)).startswith(message)
    assert tree(root) == before


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ("just some prose\n", "the patch holds no file changes"),
        ("@@ -1 +1 @@\n-a\n+b\n", "the patch is malformed at line 1: a hunk with no"),
        ("--- a/x\n+++ b/x\n@@ bad @@\n", "the patch is malformed at line 3: '@@ bad @@' is not"),
        ("--- a/x\n+++ b/x\nno hunks\n", "the patch is malformed at line 1: the file header"),
        ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", "malformed at line 1: both sides"),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n a\n", "hunk 1 of x (@@ -1 +1 @@) changes nothing"),
        ("diff --git a/i.png b/i.png\nBinary files a/i.png and b/i.png differ\n", "binary"),
        ('--- "a/unterminated\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n', "has no closing quote"),
    ],
)
async def test_malformed_patches(ctx: ExecContext, root: Path, patch: str, message: str) -> None:
    assert message in await refused(ctx, patch)


async def test_hunks_are_found_by_context_nearest_first(ctx: ExecContext, root: Path) -> None:
    (root / "rep.txt").write_text("x\nsame\nx\nx\nx\nx\nsame\nx\n")
    # The header says line 6; "same" at line 7 is nearer than at line 2.
    summary = await patched(ctx, "--- a/rep.txt\n+++ b/rep.txt\n@@ -6 +6 @@\n-same\n+SAME\n")
    assert summary == "patched rep.txt: 1 hunk, +1 -1; hunk 1 at line 7 (offset +1)"
    assert (root / "rep.txt").read_text() == "x\nsame\nx\nx\nx\nx\nSAME\nx\n"


async def test_two_sections_for_one_file_apply_in_turn(ctx: ExecContext, root: Path) -> None:
    patch = (
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# Title\n+# Better\n"
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# Better\n+# Best\n"
    )
    await patched(ctx, patch)
    assert (root / "README.md").read_text() == "# Best\n\nSome text.\n"


async def test_line_endings_and_missing_final_newlines(ctx: ExecContext, root: Path) -> None:
    (root / "dos.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await patched(ctx, "--- a/dos.txt\n+++ b/dos.txt\n@@ -2 +2,2 @@\n-two\n+2\n+2.5\n")
    assert (root / "dos.txt").read_bytes() == b"one\r\n2\r\n2.5\r\nthree\r\n"

    (root / "tail.txt").write_bytes(b"a\nb")  # no newline at the end
    await patched(ctx, "--- a/tail.txt\n+++ b/tail.txt\n@@ -2 +2,2 @@\n b\n+c\n")
    assert (root / "tail.txt").read_bytes() == b"a\nb\nc\n"
    await patched(
        ctx,
        "--- a/tail.txt\n+++ b/tail.txt\n@@ -3 +3 @@\n-c\n+d\n\\ No newline at end of file\n",
    )
    assert (root / "tail.txt").read_bytes() == b"a\nb\nd"


async def test_git_headers_renames_and_empty_files(ctx: ExecContext, root: Path) -> None:
    patch = (
        "From 1234 Mon Sep 17 00:00:00 2001\nSubject: a commit message\n\n"
        "diff --git a/empty.txt b/empty.txt\nnew file mode 100644\nindex 0000000..e69de29\n"
        "diff --git a/old.txt b/moved/old.txt\nsimilarity index 100%\n"
        "rename from old.txt\nrename to moved/old.txt\n"
        "diff --git a/README.md b/README.rst\nsimilarity index 80%\n"
        "rename from README.md\nrename to README.rst\n"
        "--- a/README.md\n+++ b/README.rst\n@@ -1 +1 @@\n-# Title\n+Title\n"
        "diff --git a/src/app.py b/src/app.py\nold mode 100644\nnew mode 100755\n"
    )
    assert await patched(ctx, patch) == (
        "created empty.txt (+0)\n"
        "renamed old.txt to moved/old.txt\n"
        "renamed README.md to README.rst (1 hunk, +1 -1)"
    )
    assert (root / "empty.txt").read_bytes() == b""
    assert (root / "moved" / "old.txt").read_text() == "bye\nnow\n"
    assert (root / "README.rst").read_text() == "Title\n\nSome text.\n"
    assert not (root / "old.txt").exists() and not (root / "README.md").exists()
    deleted = "diff --git a/empty.txt b/empty.txt\ndeleted file mode 100644\n"
    assert await patched(ctx, deleted) == "deleted empty.txt"
    assert not (root / "empty.txt").exists()


async def test_lenient_about_counts_strict_about_content(ctx: ExecContext, root: Path) -> None:
    # Wrong counts, blank separator lines, a fenced block, timestamps after a tab, and a
    # blank line that stands for an empty context line.
    patch = (
        "Here is the change:\n```diff\n"
        "--- README.md\t2024-01-01 00:00:00\n+++ README.md\t2024-01-02 00:00:00\n"
        "@@ -1,9 +1,9 @@\n # Title\n\n-Some text.\n+Other text.\n"
        "```\n\nThat is all.\n"
    )
    assert await patched(ctx, patch) == "patched README.md: 1 hunk, +1 -1"
    assert (root / "README.md").read_text() == "# Title\n\nOther text.\n"


def test_parser_details() -> None:
    (section,) = parse_patch(
        '--- "a/sp ace\\303\\251.txt"\n+++ "b/sp ace\\303\\251.txt"\n@@ -1 +1 @@\n-a\n+b\n'
    )
    assert (section.old_path, section.new_path) == ("sp aceé.txt", "sp aceé.txt")
    # Prefixes are stripped only when both sides carry theirs.
    (section,) = parse_patch("--- a/x\n+++ a/x\n@@ -1 +1 @@\n-a\n+b\n")
    assert section.new_path == "a/x"
    (section,) = parse_patch("--- /dev/null\n+++ b/new\n@@ -0,0 +1 @@\n+a\n")
    assert (section.old_path, section.new_path) == (None, "new")
    (hunk,) = section.hunks
    assert (hunk.old_start, hunk.added, hunk.removed) == (0, 1, 0)


async def test_snapshot_once_before_writing_and_nothing_if_it_fails(root: Path) -> None:
    snapshots = RecordingSnapshots()
    ctx = ExecContext.for_test(root, snapshots=snapshots)
    await apply_patch.call({"patch": MULTI}, ctx)
    ((paths, held, reason),) = snapshots.calls
    app, new, old = root / "src" / "app.py", root / "docs" / "new.md", root / "old.txt"
    assert paths == [app, new, old] and reason == "apply_patch"
    assert held[new] is None and held[old] == b"bye\nnow\n"
    assert held[app] == "".join(f"line {i}\n" for i in range(1, 21)).encode()

    app.write_bytes(held[app])
    (root / "old.txt").write_text("bye\nnow\n")
    (root / "docs" / "new.md").unlink()
    before = tree(root)
    failing = ExecContext.for_test(root, snapshots=RecordingSnapshots(fail=True))
    with pytest.raises(RuntimeError, match="store is down"):
        await apply_patch.call({"patch": MULTI}, failing)
    assert tree(root) == before


async def test_a_failed_write_puts_back_what_was_written(root: Path) -> None:
    class Sabotage(RecordingSnapshots):
        async def snapshot(
            self, origin: CheckpointOrigin, root: Path, paths: Sequence[Path], *, reason: str
        ) -> str:
            (root / "docs").write_text("a file where a directory will be needed")
            return await super().snapshot(origin, root, paths, reason=reason)

    before = tree(root)
    ctx = ExecContext.for_test(root, snapshots=Sabotage())
    with pytest.raises(ToolError) as caught:
        await apply_patch.call({"patch": MULTI}, ctx)
    assert caught.value.message == (
        "cannot write docs/new.md: Not a directory; the files already written were put back"
    )
    (root / "docs").unlink()
    assert tree(root) == before


async def test_planning_patches_only_the_scratchpad(root: Path) -> None:
    pad = root / "scratch"
    pad.mkdir()
    ctx = ExecContext.for_test(root, phase=Phase.PLAN, scratchpad=pad)
    before = tree(root)
    message = await refused(ctx, MULTI)
    assert "is a write outside the scratchpad scratch/ while planning" in message
    assert tree(root) == before
    await patched(ctx, "--- /dev/null\n+++ b/scratch/plan.md\n@@ -0,0 +1 @@\n+# plan\n")
    assert (pad / "plan.md").read_text() == "# plan\n"


async def test_binary_and_non_utf8_files_are_refused(ctx: ExecContext, root: Path) -> None:
    (root / "b.bin").write_bytes(b"a\x00b\n")
    message = await refused(ctx, "--- a/b.bin\n+++ b/b.bin\n@@ -1 +1 @@\n-a\n+b\n")
    assert message == "b.bin looks like a binary file; apply_patch edits text"
    (root / "l1.txt").write_bytes(b"caf\xe9\n")
    message = await refused(ctx, "--- a/l1.txt\n+++ b/l1.txt\n@@ -1 +1 @@\n-a\n+b\n")
    assert message.startswith("l1.txt is not UTF-8 text (byte 3: invalid continuation byte)")


async def test_a_patch_that_undoes_itself_writes_nothing(ctx: ExecContext, root: Path) -> None:
    patch = (
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# Title\n+# X\n"
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# X\n+# Title\n"
    )
    assert await patched(ctx, patch) == "the patch leaves every file as it was; nothing was written"


async def test_a_far_off_hunk_header_neither_hangs_nor_crashes(tmp_path: Path) -> None:
    """Found in review: a header line number far past the end made the search count up
    to it; an over-long number crashed the parser."""
    from tiller.tools import ExecContext, ToolError
    from tiller.tools.builtin import apply_patch as patch_tool

    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    ctx = ExecContext.for_test(tmp_path)
    far = "--- a/a.txt\n+++ b/a.txt\n@@ -100000000000,1 +100000000000,1 @@\n-two\n+TWO\n"
    done = await patch_tool.call({"patch": far.replace("100000000000", "999999999")}, ctx)
    assert not done.is_error and (tmp_path / "a.txt").read_text() == "one\nTWO\nthree\n"
    with pytest.raises(ToolError, match="not a hunk header"):
        await patch_tool.call({"patch": far.replace("100000000000", "9" * 5000)}, ctx)
