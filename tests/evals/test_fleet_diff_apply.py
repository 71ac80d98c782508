"""A fleet run's workspace rebuilt from its fixture and its stored diff: the same files,
modes and links as the run left them, and a note for what a diff cannot carry."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiller.evals._diff_apply import apply_diff, patched
from tiller.fleet import load_diff, materialize, snapshot_workspace, workspace_diff
from tiller.store import MemoryBus

_PIECES = st.sampled_from(["a", "b", "x y", "\n", "\r", "\r\n", "\x0c", "é"])
_TEXT = st.lists(_PIECES, max_size=30).map("".join)


def _files(root: Path) -> dict[str, object]:
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_file():
            found[rel] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return found


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=_TEXT, after=_TEXT)
def test_a_text_diff_applied_to_the_text_before_gives_the_text_after(
    tmp_path_factory: pytest.TempPathFactory, before: str, after: str
) -> None:
    fixture = tmp_path_factory.mktemp("fixture")
    (fixture / "f.txt").write_bytes(before.encode())

    async def diffed() -> str | None:
        async with MemoryBus() as bus:
            spec = await snapshot_workspace(bus, fixture)
            async with materialize(bus, spec, "run") as run:
                (run / "f.txt").write_bytes(after.encode())
                diff = await workspace_diff(bus, spec, run)
        return diff.changes[0].text_diff if diff.changes else None

    text_diff = asyncio.run(diffed())
    old = before.splitlines(keepends=True)
    assert (before if text_diff is None else patched(old, text_diff)) == after


async def test_the_fixture_with_the_runs_diff_is_the_directory_the_run_left(
    tmp_path: Path,
) -> None:
    fixture = tmp_path / "fixture"
    (fixture / "src").mkdir(parents=True)
    (fixture / "src" / "lib.py").write_text("a\nb\nc\n" * 20)
    (fixture / "gone.txt").write_text("bye")
    (fixture / "mode.sh").write_text("echo\n")
    (fixture / "link").symlink_to("src/lib.py")
    (fixture / "blob.bin").write_bytes(b"\x00\x01")
    async with MemoryBus() as bus:
        spec = await snapshot_workspace(bus, fixture)
        async with materialize(bus, spec, "run") as run:
            lib = run / "src" / "lib.py"
            lib.write_text(lib.read_text().replace("b\n", "B\n", 3) + "tail")
            (run / "gone.txt").unlink()
            (run / "mode.sh").chmod(0o755)
            (run / "link").unlink()
            (run / "link").symlink_to("elsewhere")
            (run / "new" / "deep").mkdir(parents=True)
            (run / "new" / "deep" / "file.md").write_text("added\n")
            left = _files(run)
            diff = await workspace_diff(bus, spec, run)
        stored = await load_diff(bus, diff.diff_ref or "")
        async with materialize(bus, spec, "rebuilt") as rebuilt:
            assert apply_diff(rebuilt, stored) == []
            assert _files(rebuilt) == left
            again = await workspace_diff(bus, spec, rebuilt)
        assert again.diff_ref == diff.diff_ref


async def test_what_a_diff_cannot_carry_is_said_and_a_path_through_a_link_refused(
    tmp_path: Path,
) -> None:
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "blob.bin").write_bytes(b"\x00\x01")
    (fixture / "out").symlink_to(tmp_path)
    async with MemoryBus() as bus:
        spec = await snapshot_workspace(bus, fixture)
        async with materialize(bus, spec, "run") as run:
            (run / "blob.bin").write_bytes(b"\x00\x02")
            diff = await workspace_diff(bus, spec, run)
        hostile = diff.model_copy(
            update={
                "changes": (
                    *diff.changes,
                    diff.changes[0].model_copy(
                        update={
                            "path": "out/escaped.txt",
                            "change": "added",
                            "binary": False,
                            "text_diff": "",
                        }
                    ),
                )
            }
        )
        async with materialize(bus, spec, "rebuilt") as rebuilt:
            notes = apply_diff(rebuilt, hostile)
            assert (rebuilt / "blob.bin").read_bytes() == b"\x00\x01"  # the fixture's
    assert len(notes) == 2
    assert "blob.bin: binary" in notes[0]
    assert "passes through the link" in notes[1]
    assert not (tmp_path / "escaped.txt").exists()
