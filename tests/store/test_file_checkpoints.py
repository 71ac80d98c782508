"""`FileCheckpoints`: snapshots of files before tools change them, and the rewind.

Every test works on real files in `tmp_path` and a real store: memory and a SQLite file
for all of them, the NATS server on 127.0.0.1:4222 for one round trip with a file over its
1 MiB payload limit. A workspace is compared as a whole — every path, its kind, bytes,
permission bits and link target — so "restored" means byte for byte.
"""

from __future__ import annotations

import asyncio
import os
import stat
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import orjson
import pytest

from tiller.store import (
    FILE_BLOBS_BUCKET,
    FILE_CHECKPOINTS_BUCKET,
    Bus,
    FileCheckpoints,
    FileRestoreFailed,
    MalformedFileCheckpoint,
)
from tiller.tools import CheckpointOrigin, ExecContext, FileSnapshotter, PathOutsideJail, ToolError
from tiller.tools.builtin import edit_file, write_file

from .conftest import _NATS_MISSING, NATS_URL, FakeClock, make_bus

SESSION = "thread-7"

Tree = dict[str, tuple[str, bytes | str, int]]


@pytest.fixture(params=["memory", "sqlite"])
async def bus(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[Bus]:
    opened = await make_bus(request.param, clock, tmp_path, "")
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


def tree(root: Path) -> Tree:
    """Everything under `root`: kind, content (bytes or link target) and permission bits."""
    found: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", os.readlink(path), 0)
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ("dir", b"", stat.S_IMODE(info.st_mode))
            else:
                found[rel] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
    return found


def at(index: int, session: str = SESSION) -> CheckpointOrigin:
    return CheckpointOrigin(task_id=None, session_id=session, message_index=index)


def write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


BINARY = bytes(range(256)) * 64 + b"\x00\r\n\xff tail"


# ── the round trip ───────────────────────────────────────────────────────────────────


async def test_a_rewind_puts_the_workspace_back_byte_for_byte(bus: Bus, ws: Path) -> None:
    write(ws / "bin.dat", BINARY, 0o640)
    write(ws / "run.sh", b"#!/bin/sh\necho hi\n", 0o755)
    write(ws / "old.txt", b"the run deletes me\n", 0o600)
    write(ws / "keep.txt", b"untouched\n")
    write(ws / "empty", b"", 0o644)
    (ws / "link").symlink_to("bin.dat")
    before = tree(ws)
    files = FileCheckpoints(bus, run_id="run-1")
    paths = ["bin.dat", "run.sh", "old.txt", "empty", "link", "new/deep/er/made.txt"]
    await files.snapshot(at(3), ws, [ws / p for p in paths], reason="edit")

    # What the run did after the snapshot.
    write(ws / "bin.dat", b"overwritten", 0o600)
    (ws / "run.sh").chmod(0o644)
    (ws / "old.txt").unlink()
    write(ws / "empty", b"no longer empty")
    (ws / "link").unlink()
    write(ws / "link", b"a file where the link was")
    write(ws / "new/deep/er/made.txt", b"created by the run")
    assert tree(ws) != before

    report = await files.restore_to(SESSION, 3, ws)

    assert tree(ws) == before
    assert sorted(report.restored) == ["bin.dat", "empty", "link", "old.txt", "run.sh"]
    assert report.deleted == ("new/deep/er/made.txt",)
    assert report.removed_dirs == ("new/deep/er", "new/deep", "new")
    assert report.failed == ()
    assert report.dropped == (f"{SESSION}-fc-1",)
    # The checkpoint described a future that no longer exists: it is gone.
    assert await files.list(SESSION) == []


async def test_the_manifest_records_the_anchor_and_each_path(
    bus: Bus, ws: Path, clock: FakeClock
) -> None:
    write(ws / "a.txt", b"alpha", 0o600)
    (ws / "ln").symlink_to("a.txt")
    files = FileCheckpoints(bus, run_id="run-9")
    origin = CheckpointOrigin(task_id="task-2", session_id=SESSION, message_index=4)
    checkpoint_id = await files.snapshot(
        origin, ws, [ws / "a.txt", ws / "ln", ws / "gone/x.txt", ws / "a.txt"], reason="write"
    )
    assert checkpoint_id == f"{SESSION}-fc-1"
    (manifest,) = await files.list(SESSION)
    assert (manifest.id, manifest.seq, manifest.run_id, manifest.task_id) == (
        checkpoint_id,
        1,
        "run-9",
        "task-2",
    )
    assert (manifest.session_id, manifest.message_index, manifest.reason) == (SESSION, 4, "write")
    assert manifest.root == str(ws)
    assert manifest.created_at == clock.now
    first, link, missing = manifest.files  # the repeated path is recorded once
    assert first.to_data() == {
        "path": "a.txt",
        "existed": True,
        "kind": "file",
        "sha256": "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8",
        "size": 5,
        "mode": 0o600,
    }
    assert link.to_data() == {"path": "ln", "existed": True, "kind": "symlink", "target": "a.txt"}
    assert missing.to_data() == {"path": "gone/x.txt", "existed": False, "absent_parents": ["gone"]}


def test_file_checkpoints_are_what_tools_snapshot_through(bus: Bus) -> None:
    assert isinstance(FileCheckpoints(bus), FileSnapshotter)


async def test_tools_snapshot_through_the_exec_context(bus: Bus, ws: Path) -> None:
    """The real file tools, in their worker threads, snapshot before they write."""
    write(ws / "app.py", b"print('v1')\n")
    before = tree(ws)
    files = FileCheckpoints(bus)
    ctx = ExecContext.for_test(ws, snapshots=files, session_id=SESSION, message_index=2)
    out = await edit_file.call({"path": "app.py", "old": "v1", "new": "v2"}, ctx)
    assert not out.is_error, out.content
    out = await write_file.call({"path": "pkg/new.py", "content": "x = 1\n"}, ctx)
    assert not out.is_error, out.content
    assert (ws / "app.py").read_text() == "print('v2')\n"

    assert [m.message_index for m in await files.list(SESSION)] == [2, 2]
    await files.restore_to(SESSION, 2, ws)
    assert tree(ws) == before


# ── several points of a conversation ─────────────────────────────────────────────────


async def conversation(files: FileCheckpoints, ws: Path) -> dict[str, Tree]:
    """A run that changes the workspace at messages 1, 3 and 5; returns the workspace as
    it was before each of those points, and at the end."""
    states = {"before 1": tree(ws)}
    await files.snapshot(at(1), ws, [ws / "a.txt"], reason="write")
    write(ws / "a.txt", b"v1")
    states["before 3"] = tree(ws)
    await files.snapshot(at(3), ws, [ws / "a.txt"], reason="edit")
    write(ws / "a.txt", b"v2", 0o600)
    await files.snapshot(at(3), ws, [ws / "b/b.txt"], reason="write")  # a parallel call
    write(ws / "b/b.txt", BINARY)
    states["before 5"] = tree(ws)
    await files.snapshot(at(5), ws, [ws / "a.txt", ws / "b/b.txt"], reason="edit")
    write(ws / "a.txt", b"v3")
    (ws / "b/b.txt").unlink()
    states["end"] = tree(ws)
    return states


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (0, "before 1"),
        (1, "before 1"),
        (2, "before 3"),
        (3, "before 3"),
        (4, "before 5"),
        (5, "before 5"),
        (6, "end"),
    ],
)
async def test_restore_to_each_point(bus: Bus, ws: Path, index: int, expected: str) -> None:
    files = FileCheckpoints(bus)
    states = await conversation(files, ws)
    await files.restore_to(SESSION, index, ws)
    assert tree(ws) == states[expected]
    kept = [m.message_index for m in await files.list(SESSION)]
    assert kept == [i for i in (1, 3, 3, 5) if i < index]


async def test_rewinds_one_after_another(bus: Bus, ws: Path) -> None:
    files = FileCheckpoints(bus)
    states = await conversation(files, ws)
    for index, expected in ((5, "before 5"), (3, "before 3"), (1, "before 1")):
        await files.restore_to(SESSION, index, ws)
        assert tree(ws) == states[expected]


async def test_a_dry_run_changes_nothing(bus: Bus, ws: Path) -> None:
    files = FileCheckpoints(bus)
    await conversation(files, ws)
    end = tree(ws)
    report = await files.restore_to(SESSION, 3, ws, dry_run=True)
    assert tree(ws) == end
    assert (report.restored, report.deleted, report.unchanged) == (("a.txt",), (), ("b/b.txt",))
    assert report.dry_run
    assert report.dropped == (f"{SESSION}-fc-2", f"{SESSION}-fc-3", f"{SESSION}-fc-4")
    assert len(await files.list(SESSION)) == 4


async def test_files_already_as_they_were_are_left_alone(bus: Bus, ws: Path) -> None:
    write(ws / "same.txt", b"same", 0o640)
    files = FileCheckpoints(bus)
    await files.snapshot(at(1), ws, [ws / "same.txt", ws / "never.txt"], reason="edit")
    report = await files.restore_to(SESSION, 1, ws)
    assert (report.restored, report.deleted) == ((), ())
    assert sorted(report.unchanged) == ["never.txt", "same.txt"]


# ── fork ─────────────────────────────────────────────────────────────────────────────


async def test_fork_drops_only_the_checkpoints_after_the_index(bus: Bus, ws: Path) -> None:
    files = FileCheckpoints(bus)
    await conversation(files, ws)
    other = FileCheckpoints(bus)
    await other.snapshot(at(9, "another-thread"), ws, [ws / "a.txt"], reason="edit")

    assert await files.fork_at(SESSION, 3) == [f"{SESSION}-fc-4"]
    assert [m.message_index for m in await files.list(SESSION)] == [1, 3, 3]
    assert len(await files.list("another-thread")) == 1
    # Numbers are never reused: an id seen before a fork names one checkpoint only.
    assert await files.snapshot(at(4), ws, [ws / "a.txt"], reason="edit") == f"{SESSION}-fc-5"


async def test_sessions_whose_ids_extend_each_other_stay_apart(bus: Bus, ws: Path) -> None:
    files = FileCheckpoints(bus)
    await files.snapshot(at(1, "a"), ws, [ws / "x"], reason="write")
    await files.snapshot(at(1, "a/0000000001"), ws, [ws / "y"], reason="write")
    assert [m.files[0].path for m in await files.list("a")] == ["x"]
    assert [m.files[0].path for m in await files.list("a/0000000001")] == ["y"]


async def test_unanchored_snapshots_are_kept_apart(bus: Bus, ws: Path) -> None:
    files = FileCheckpoints(bus)
    assert await files.snapshot(CheckpointOrigin(), ws, [ws / "x"], reason="manual") == (
        "fc-manual-1"
    )
    assert [m.id for m in await files.list(None)] == ["fc-manual-1"]
    assert await files.list(SESSION) == []


# ── blobs ────────────────────────────────────────────────────────────────────────────


async def test_identical_contents_are_stored_once(bus: Bus, ws: Path) -> None:
    write(ws / "one.txt", BINARY)
    write(ws / "two.txt", BINARY)
    await FileCheckpoints(bus).snapshot(at(1), ws, [ws / "one.txt"], reason="edit")
    await FileCheckpoints(bus).snapshot(at(2), ws, [ws / "two.txt", ws / "one.txt"], reason="x")
    blobs = await bus.kv(FILE_BLOBS_BUCKET)
    assert len(await blobs.keys()) == 1


async def test_a_missing_blob_fails_the_file_and_keeps_the_checkpoints(bus: Bus, ws: Path) -> None:
    write(ws / "a.txt", b"first")
    write(ws / "b.txt", b"second")
    files = FileCheckpoints(bus)
    await files.snapshot(at(1), ws, [ws / "a.txt", ws / "b.txt"], reason="edit")
    write(ws / "a.txt", b"changed")
    write(ws / "b.txt", b"changed")
    blobs = await bus.kv(FILE_BLOBS_BUCKET)
    await blobs.delete(f"sha256/{(await files.list(SESSION))[0].files[0].sha256}")

    with pytest.raises(FileRestoreFailed) as failed:
        await files.restore_to(SESSION, 1, ws)
    assert [path for path, _ in failed.value.report.failed] == ["a.txt"]
    assert "missing from the store" in str(failed.value)
    assert failed.value.report.restored == ("b.txt",)
    assert (ws / "b.txt").read_bytes() == b"second"
    assert len(await files.list(SESSION)) == 1  # kept: the rewind can be run again


# ── safety ───────────────────────────────────────────────────────────────────────────


async def test_a_symlink_is_recorded_as_a_link_not_followed(
    bus: Bus, ws: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"outside the jail")
    (ws / "sneaky").symlink_to(secret)
    files = FileCheckpoints(bus)
    await files.snapshot(at(1), ws, [ws / "sneaky"], reason="write")
    (record,) = (await files.list(SESSION))[0].files
    assert (record.kind, record.target) == ("symlink", str(secret))
    assert await (await bus.kv(FILE_BLOBS_BUCKET)).keys() == []  # the secret was not read

    (ws / "sneaky").unlink()
    write(ws / "sneaky", b"replaced by the run")
    await files.restore_to(SESSION, 1, ws)
    assert os.readlink(ws / "sneaky") == str(secret)
    assert secret.read_bytes() == b"outside the jail"


async def test_snapshots_refuse_directories_and_paths_outside(
    bus: Bus, ws: Path, tmp_path: Path
) -> None:
    (ws / "dir").mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (ws / "door").symlink_to(outside)
    files = FileCheckpoints(bus)
    with pytest.raises(ToolError, match="is a directory"):
        await files.snapshot(at(1), ws, [ws / "dir"], reason="write")
    with pytest.raises(PathOutsideJail):
        await files.snapshot(at(1), ws, [tmp_path / "other.txt"], reason="write")
    with pytest.raises(PathOutsideJail):
        await files.snapshot(at(1), ws, [ws / "door" / "x.txt"], reason="write")
    with pytest.raises(ToolError, match="not a directory"):
        write(ws / "plain", b"a file")
        await files.snapshot(at(1), ws, [ws / "plain" / "x.txt"], reason="write")
    assert await files.list(SESSION) == []


async def put_manifest(bus: Bus, files: list[dict[str, object]], seq: int = 1) -> None:
    kv = await bus.kv(FILE_CHECKPOINTS_BUCKET)
    record = {
        "schema_version": 1,
        "id": f"{SESSION}-fc-{seq}",
        "seq": seq,
        "run_id": None,
        "session_id": SESSION,
        "message_index": 1,
        "task_id": None,
        "root": "/nowhere",
        "created_at": 0.0,
        "reason": "forged",
        "files": files,
    }
    await kv.put(f"session/{SESSION}/{seq:010d}", orjson.dumps(record))


async def test_a_record_escaping_the_jail_is_refused_before_anything_changes(
    bus: Bus, ws: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"not yours")
    write(ws / "inside.txt", b"made by the run")
    await put_manifest(
        bus,
        [
            {"path": "inside.txt", "existed": False, "absent_parents": []},
            {"path": "../victim.txt", "existed": False, "absent_parents": []},
        ],
    )
    with pytest.raises(PathOutsideJail):
        await FileCheckpoints(bus).restore_to(SESSION, 0, ws)
    assert victim.read_bytes() == b"not yours"
    assert (ws / "inside.txt").exists()


MALFORMED: list[tuple[bytes | Callable[[dict[str, object]], object], str]] = [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "expected an object"),
    (lambda r: r.pop("files"), "field 'files' is missing"),
    (lambda r: r.update(schema_version=7), "schema version 7"),
    (lambda r: r.update(seq="one"), "field 'seq' is 'one', not an integer"),
    (lambda r: r.update(files=[{"path": "a", "existed": True, "kind": "file"}]), "'sha256'"),
    (lambda r: r.update(files=[{"path": "/etc/passwd", "existed": False}]), "not a relative"),
    (lambda r: r.update(files=[{"path": "a", "existed": True, "kind": "fifo"}]), "'fifo'"),
    (lambda r: r.update(files=["a.txt"]), "files[0]: expected an object"),
]


@pytest.mark.parametrize(("damage", "problem"), MALFORMED)
async def test_a_malformed_manifest_is_a_typed_error_naming_its_key(
    bus: Bus, ws: Path, damage: bytes | Callable[[dict[str, object]], object], problem: str
) -> None:
    files = FileCheckpoints(bus)
    write(ws / "a.txt", b"a")
    await files.snapshot(at(1), ws, [ws / "a.txt"], reason="edit")
    kv = await bus.kv(FILE_CHECKPOINTS_BUCKET)
    key = f"session/{SESSION}/0000000001"
    entry = await kv.get(key)
    assert entry is not None
    if isinstance(damage, bytes):
        value = damage
    else:
        record = orjson.loads(entry.value)
        damage(record)
        value = orjson.dumps(record)
    await kv.put(key, value)

    for attempt in (lambda: files.list(SESSION), lambda: files.restore_to(SESSION, 1, ws)):
        with pytest.raises(MalformedFileCheckpoint) as raised:
            await attempt()
        assert raised.value.key == key
        assert raised.value.bucket == FILE_CHECKPOINTS_BUCKET
        assert problem in str(raised.value)


async def test_a_malformed_counter_is_a_typed_error(bus: Bus, ws: Path) -> None:
    kv = await bus.kv(FILE_CHECKPOINTS_BUCKET)
    await kv.put(f"counter/session/{SESSION}", b'{"schema_version": 1}')
    with pytest.raises(MalformedFileCheckpoint, match="field 'last' is missing") as raised:
        await FileCheckpoints(bus).snapshot(at(1), ws, [ws / "a"], reason="write")
    assert raised.value.key == f"counter/session/{SESSION}"


async def test_concurrent_snapshots_get_distinct_numbers(bus: Bus, ws: Path) -> None:
    files = [FileCheckpoints(bus) for _ in range(8)]
    ids = await asyncio.gather(
        *(f.snapshot(at(1), ws, [ws / f"f{i}"], reason="write") for i, f in enumerate(files))
    )
    assert sorted(ids) == sorted(f"{SESSION}-fc-{n}" for n in range(1, 9))


# ── NATS ─────────────────────────────────────────────────────────────────────────────


@pytest.mark.skipif(_NATS_MISSING is not None, reason=_NATS_MISSING or "")
async def test_a_round_trip_on_nats_with_a_file_over_the_payload_limit(
    clock: FakeClock, tmp_path: Path, ws: Path
) -> None:
    namespace = f"t{uuid.uuid4().hex[:16]}"
    nats_bus = await make_bus("nats", clock, tmp_path, namespace)
    try:
        big = os.urandom(3 * 1024 * 1024 + 17)
        write(ws / "big.bin", big, 0o600)
        write(ws / "empty", b"")
        write(ws / "twin.bin", big, 0o644)
        before = tree(ws)
        files = FileCheckpoints(nats_bus, run_id="run-nats")
        paths = [ws / "big.bin", ws / "empty", ws / "twin.bin", ws / "new/made.txt"]
        await files.snapshot(at(2), ws, paths, reason="edit")
        write(ws / "big.bin", b"small now")
        write(ws / "empty", b"filled")
        (ws / "twin.bin").unlink()
        write(ws / "new/made.txt", b"new")

        report = await files.restore_to(SESSION, 2, ws)

        assert tree(ws) == before
        assert report.deleted == ("new/made.txt",)
        blobs = await nats_bus.kv(FILE_BLOBS_BUCKET)
        assert len(await blobs.keys()) == 2  # the big content once, the empty one
        assert await files.list(SESSION) == []
    finally:
        await nats_bus.aclose()
        # The server is shared and lives on: leave none of this test's streams there.
        from tiller.store._nats import NatsBus

        cleaner = await NatsBus.connect(NATS_URL, namespace=namespace)
        try:
            await cleaner.delete_namespace()
        finally:
            await cleaner.aclose()
