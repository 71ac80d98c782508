"""Shell snapshots (`FileCheckpoints.snapshot_workspace`) and the rewind that undoes them,
on real files: incremental reads, caps, unsaved large files, and confinement — a link
planted in the workspace never lets a restore write or delete outside it."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path

import orjson
import pytest

from tiller.conversation import ToolCall
from tiller.store import (
    FILE_BLOBS_BUCKET,
    FILE_CHECKPOINTS_BUCKET,
    FileCheckpoints,
    FileRestoreFailed,
    MemoryBus,
)
from tiller.store._file_manifest import FileRecord, encode_records
from tiller.store._workspace_fs import MAX_DEPTH, walk_workspace
from tiller.tools import (
    DEFAULT_SANDBOX,
    MAX_SAVED_FILE_BYTES,
    CheckpointOrigin,
    ExecContext,
    Registry,
)
from tiller.tools._file_snapshots import snapshot_before_command
from tiller.tools.builtin import execute_command

SESSION = "thread-ws"


def at(index: int) -> CheckpointOrigin:
    return CheckpointOrigin(session_id=SESSION, message_index=index)


def later_clock() -> float:
    """A wall clock a minute ahead, so files made by the test are not "racily" recent."""
    return time.time() + 60.0


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def test_unchanged_files_are_not_read_again(ws: Path) -> None:
    for n in range(5):
        (ws / f"f{n}.txt").write_bytes(b"x" * n)
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "dep.js").write_bytes(b"skipped")
    files = FileCheckpoints(MemoryBus(clock=later_clock))
    await files.snapshot_workspace(at(1), ws, command="make", background=False)
    assert files.workspace.files_read == 5  # node_modules is excluded
    await files.snapshot_workspace(at(3), ws, command="make", background=False)
    assert files.workspace.files_read == 5  # nothing changed: nothing read
    (ws / "f2.txt").write_bytes(b"changed")
    os.utime(ws / "f3.txt", ns=(0, 0))  # a new mtime (and ctime): read again
    await files.snapshot_workspace(at(5), ws, command="make", background=False)
    assert files.workspace.files_read == 7
    # What the reused records say is still right: a rewind to 3 restores f2 and f3.
    (ws / "f2.txt").write_bytes(b"changed again")
    report = await files.restore_to(SESSION, 3, ws)
    assert (ws / "f2.txt").read_bytes() == b"xx"
    assert report.commands == ("make", "make")


async def test_a_racily_recent_file_is_read_again(ws: Path) -> None:
    (ws / "f.txt").write_bytes(b"x")
    files = FileCheckpoints(MemoryBus())  # the real clock: f.txt changed just now
    await files.snapshot_workspace(at(1), ws, command="make", background=False)
    await files.snapshot_workspace(at(3), ws, command="make", background=False)
    assert files.workspace.files_read == 2


async def test_a_large_file_is_recorded_unsaved_and_reported(ws: Path) -> None:
    with (ws / "big.bin").open("wb") as big:
        big.truncate(MAX_SAVED_FILE_BYTES + 1)
    files = FileCheckpoints(MemoryBus(clock=later_clock))
    await files.snapshot_workspace(at(1), ws, command="gen", background=False)
    assert files.workspace.bytes_read == 0  # never read
    (manifest,) = await files.list(SESSION)
    (record,) = await files.workspace_files(manifest)
    assert record.unsaved and record.sha256 is None
    (ws / "big.bin").write_bytes(b"small now")
    report = await files.restore_to(SESSION, 1, ws)
    assert report.unsaved == (
        (
            "big.bin",
            f"not restored: it was {MAX_SAVED_FILE_BYTES + 1} bytes, over the "
            f"{MAX_SAVED_FILE_BYTES} a snapshot saves",
        ),
    )
    assert (ws / "big.bin").read_bytes() == b"small now"


async def test_a_file_tool_snapshot_of_a_large_file_is_unsaved_too(ws: Path) -> None:
    with (ws / "big.bin").open("wb") as big:
        big.truncate(MAX_SAVED_FILE_BYTES + 1)
    files = FileCheckpoints(MemoryBus())
    await files.snapshot(at(1), ws, [ws / "big.bin"], reason="write")
    (manifest,) = await files.list(SESSION)
    assert manifest.files[0].unsaved
    (ws / "big.bin").write_bytes(b"small")
    report = await files.restore_to(SESSION, 1, ws)
    assert [path for path, _ in report.unsaved] == ["big.bin"]
    assert (ws / "big.bin").read_bytes() == b"small"


async def test_a_file_larger_than_a_chunk_round_trips(ws: Path) -> None:
    data = os.urandom(1_300_000)
    (ws / "blob.bin").write_bytes(data)
    files = FileCheckpoints(MemoryBus())
    await files.snapshot_workspace(at(1), ws, command="x", background=False)
    (manifest,) = await files.list(SESSION)
    assert len((await files.workspace_files(manifest))[0].chunks) == 3
    assert manifest.files == ()  # the records live in a blob
    (ws / "blob.bin").write_bytes(b"gone")
    await files.restore_to(SESSION, 1, ws)
    assert (ws / "blob.bin").read_bytes() == data


def chain(root: Path, depth: int) -> Path:
    path = root
    for _ in range(depth):
        path = path / "d"
    path.mkdir(parents=True)
    return path


async def test_a_deep_tree_is_walked_to_the_cap_and_the_rewind_says_so(ws: Path) -> None:
    deep = chain(ws, 100)
    (deep / "bottom.txt").write_bytes(b"bottom")
    middle = ws.joinpath(*["d"] * 50)
    (middle / "middle.txt").write_bytes(b"middle")
    files = FileCheckpoints(MemoryBus())
    await files.snapshot_workspace(at(1), ws, command="x", background=False)
    (manifest,) = await files.list(SESSION)
    assert not manifest.complete
    assert f"more than {MAX_DEPTH} directories deep" in str(manifest.note)
    (middle / "middle.txt").write_bytes(b"changed")
    (deep / "bottom.txt").write_bytes(b"changed")
    report = await files.restore_to(SESSION, 1, ws)
    assert (middle / "middle.txt").read_bytes() == b"middle"  # within the cap: restored
    assert (deep / "bottom.txt").read_bytes() == b"changed"  # past it: left as it is
    assert report.partial and "was partial" in report.partial[0]


def test_the_entry_cap_stops_the_walk_with_a_note(ws: Path) -> None:
    for n in range(30):
        (ws / f"{n:02d}.txt").write_bytes(b"")
    walked = walk_workspace(ws, max_entries=10)
    assert len(walked.entries) == 10
    assert not walked.complete and walked.note == "the workspace has more than 10 entries"


async def test_new_files_behind_a_link_out_of_the_workspace_are_never_deleted(
    ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "out").symlink_to(outside, target_is_directory=True)
    files = FileCheckpoints(MemoryBus())
    await files.snapshot_workspace(at(1), ws, command="x", background=False)
    (outside / "made-later.txt").write_bytes(b"not the workspace's")
    (ws / "made-later.txt").write_bytes(b"the run's")
    report = await files.restore_to(SESSION, 1, ws)
    assert report.deleted == ("made-later.txt",)
    assert (outside / "made-later.txt").read_bytes() == b"not the workspace's"
    assert (ws / "out").is_symlink()


async def test_a_directory_swapped_for_a_link_out_is_put_back_without_following_it(
    ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "app.py").write_bytes(b"theirs")
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_bytes(b"mine")
    files = FileCheckpoints(MemoryBus())
    await files.snapshot_workspace(at(1), ws, command="x", background=False)
    (ws / "src" / "app.py").unlink()
    (ws / "src").rmdir()
    (ws / "src").symlink_to(outside, target_is_directory=True)
    await files.restore_to(SESSION, 1, ws)
    assert not (ws / "src").is_symlink()
    assert (ws / "src" / "app.py").read_bytes() == b"mine"
    assert (outside / "app.py").read_bytes() == b"theirs"
    assert sorted(p.name for p in outside.iterdir()) == ["app.py"]


async def test_a_forged_record_through_a_link_is_refused(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_bytes(b"not yours")
    (ws / "out").symlink_to(outside, target_is_directory=True)
    (ws / "empty.txt").write_bytes(b"")  # so the empty blob is in the store
    bus = MemoryBus()
    files = FileCheckpoints(bus)
    await files.snapshot_workspace(at(1), ws, command="x", background=False)
    (manifest,) = await files.list(SESSION)
    records = await files.workspace_files(manifest)
    empty = next(r for r in records if r.path == "empty.txt")
    # A record that would write through the link, and one calling the link a directory.
    forged = [
        *records,
        dataclasses.replace(empty, path="out/victim.txt", signature=None),
        FileRecord("out", "directory", mode=0o755),
    ]
    blob = encode_records(forged)
    sha = hashlib.sha256(blob).hexdigest()
    await (await bus.kv(FILE_BLOBS_BUCKET)).put(f"sha256/{sha}", blob)
    kv = await bus.kv(FILE_CHECKPOINTS_BUCKET)
    (key,) = [k for k in await kv.keys("session/") if k[-1].isdigit()]
    entry = await kv.get(key)
    assert entry is not None
    record = orjson.loads(entry.value)
    record["files_blob"] = sha
    await kv.put(key, orjson.dumps(record))
    with pytest.raises(FileRestoreFailed) as failed:
        await files.restore_to(SESSION, 1, ws)
    assert "out/victim.txt" in dict(failed.value.report.failed)
    assert (outside / "victim.txt").read_bytes() == b"not yours"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]


async def test_a_read_only_command_takes_no_snapshot(ws: Path) -> None:
    from tiller.loop._services import shell_may_write

    files = FileCheckpoints(MemoryBus(), command_may_write=shell_may_write)
    ctx = ExecContext.for_test(ws, snapshots=files, session_id=SESSION, message_index=1)
    assert await snapshot_before_command(ctx, "ls -la", background=False) is None
    assert await snapshot_before_command(ctx, "rm -f x", background=False) is not None
    assert await snapshot_before_command(ctx, "$(echo rm) x", background=True) is not None
    assert [m.command for m in await files.list(SESSION)] == ["rm -f x", "$(echo rm) x"]


@pytest.mark.skipif(not DEFAULT_SANDBOX.probe().available, reason="no sandbox")
async def test_the_shell_snapshots_before_the_command_runs(ws: Path) -> None:
    (ws / "a.txt").write_bytes(b"before")
    files = FileCheckpoints(MemoryBus())
    ctx = ExecContext.for_test(ws, snapshots=files, session_id=SESSION, message_index=1)
    call = ToolCall(
        id="call-1", name="execute_command", arguments='{"command": "echo after > a.txt"}'
    )
    done = await Registry([execute_command]).execute(call, ctx)
    assert not done.result.is_error, done.result
    (manifest,) = await files.list(SESSION)
    assert manifest.kind == "workspace" and manifest.command == "echo after > a.txt"
    await files.restore_to(SESSION, 1, ws)
    assert (ws / "a.txt").read_bytes() == b"before"


async def test_excluded_directories_are_never_touched(ws: Path) -> None:
    (ws / ".tiller").mkdir()
    (ws / "node_modules").mkdir()
    (ws / "newdir").mkdir()
    files = FileCheckpoints(MemoryBus())
    await files.snapshot_workspace(at(1), ws, command="npm i", background=False)
    (ws / ".tiller" / "state.db").write_bytes(b"tiller's")
    (ws / "node_modules" / "dep.js").write_bytes(b"a dependency")
    (ws / "fresh").mkdir()
    (ws / "fresh" / "node_modules").mkdir()
    (ws / "fresh" / "node_modules" / "x.js").write_bytes(b"x")
    (ws / "fresh" / "made.txt").write_bytes(b"made")
    report = await files.restore_to(SESSION, 1, ws)
    assert (ws / ".tiller" / "state.db").exists()
    assert (ws / "node_modules" / "dep.js").exists()
    assert (ws / "fresh" / "node_modules" / "x.js").exists()
    assert not (ws / "fresh" / "made.txt").exists()
    assert report.deleted == ("fresh/made.txt",)
    assert [path for path, _ in report.unsaved] == ["fresh/"]  # kept: it holds node_modules


async def test_permissions_taken_away_are_given_back(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_bytes(b"app")
    os.chmod(ws / "src" / "app.py", 0o644)
    os.chmod(ws / "src", 0o755)
    files = FileCheckpoints(MemoryBus())
    await files.snapshot_workspace(at(1), ws, command="chmod -R 000 src", background=False)
    os.chmod(ws / "src" / "app.py", 0)
    os.chmod(ws / "src", 0)
    await files.restore_to(SESSION, 1, ws)
    assert (ws / "src").stat().st_mode & 0o777 == 0o755
    assert (ws / "src" / "app.py").stat().st_mode & 0o777 == 0o644
    assert (ws / "src" / "app.py").read_bytes() == b"app"


async def test_old_and_new_manifests_restore_together(ws: Path) -> None:
    """A file tool's checkpoint before a shell snapshot decides its path; the shell
    snapshot decides the rest, and a path it never saw (made later) goes."""
    (ws / "a.txt").write_bytes(b"a0")
    files = FileCheckpoints(MemoryBus())
    await files.snapshot(at(1), ws, [ws / "a.txt", ws / "tool/new.txt"], reason="write")
    (ws / "a.txt").write_bytes(b"a1")
    (ws / "tool").mkdir()
    (ws / "tool" / "new.txt").write_bytes(b"by the tool")
    await files.snapshot_workspace(at(3), ws, command="touch b", background=False)
    (ws / "b").write_bytes(b"")
    (ws / "tool" / "shell.txt").write_bytes(b"by the shell")
    await files.restore_to(SESSION, 1, ws)
    assert sorted(os.listdir(ws)) == ["a.txt"]
    assert (ws / "a.txt").read_bytes() == b"a0"


def test_a_wide_tree_is_walked_whole_under_a_small_descriptor_limit(tmp_path: Path) -> None:
    """The walk once held a descriptor per queued directory: 1,500 sibling directories
    under the usual 1,024-file limit stopped it ("could not be opened"), so every shell
    snapshot was partial. It holds one per level now, in the same name order."""
    import resource

    for n in range(1500):
        (tmp_path / f"d{n:04}").mkdir()
    (tmp_path / "d1499" / "f.txt").write_text("x\n")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        walked = walk_workspace(tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert walked.complete, walked
    paths = [found.path for found in walked.entries]
    assert paths[:2] == ["d0000", "d0001"]
    assert paths[-1] == "d1499/f.txt"
