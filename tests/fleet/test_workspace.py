"""Workspace specs (issue 16): a fixture snapshotted into the store, materialized privately
for a run on any worker, diffed after it; or a path every worker shares.

Runs on memory, SQLite (a file) and the real NATS server, each NATS test in its own
namespace, removed afterwards.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import tempfile
from pathlib import Path

import orjson
import pydantic
import pytest

from tests.store import conftest as store_conftest
from tiller.errors import NewerSchemaError, TillerError
from tiller.fleet import (
    WORKSPACES_BUCKET,
    FixtureNotFound,
    FixtureTooLarge,
    MalformedWorkspace,
    MaterializeFailed,
    NoWorkspaceDiff,
    SharedWorkspace,
    SnapshotWorkspace,
    WorkspaceFromNewerTiller,
    WorkspaceNotStored,
    WorkspacePathMissing,
    WorkspaceSpec,
    load_diff,
    materialize,
    snapshot_workspace,
    workspace_diff,
)
from tiller.store import FILE_BLOBS_BUCKET, Bus, open_bus

MiB = 1024 * 1024


# The store's `bus` fixture (memory, SQLite, NATS; a namespace per NATS test, deleted
# afterwards) and the clock it takes, used here as they are.
bus = store_conftest.bus
clock = store_conftest.clock
namespace = store_conftest.namespace

#: Only on NATS: its object store holds records over the server's payload limit.
on_nats = pytest.mark.parametrize("bus", ["nats"], indirect=True)


def make_fixture(root: Path) -> Path:
    """A small project: text and binary files with their modes, nesting, an empty file and
    directory, a read-only directory, a link inside, and directories a snapshot excludes."""
    root.mkdir()
    (root / "README.md").write_text("# demo\n\nhello\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "secret.env").write_text("TOKEN=x\n")
    (root / "secret.env").chmod(0o600)
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "app.py").write_text("def main():\n    return 1\n")
    (root / "src" / "logo.bin").write_bytes(bytes(range(256)) * 4)
    (root / "empty.txt").write_bytes(b"")
    (root / "empty_dir").mkdir()
    (root / "locked").mkdir()
    (root / "locked" / "data.txt").write_text("frozen\n")
    (root / "locked").chmod(0o555)
    (root / "link_to_app").symlink_to("src/pkg/app.py")
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "objects" / "ab").write_bytes(b"heavy object")
    (root / "node_modules" / "left-pad").mkdir(parents=True)
    (root / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1\n")
    return root


def tree(root: Path) -> dict[str, tuple[str, int, bytes | str | None]]:
    """Every path under `root` (links not followed): kind, permission bits, content."""
    found: dict[str, tuple[str, int, bytes | str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", mode, None)
            else:
                found[rel] = ("file", mode, path.read_bytes())
    return found


def without_excluded(found: dict[str, tuple[str, int, bytes | str | None]]) -> dict[str, object]:
    heavy = ("node_modules", ".git/objects")
    return {
        p: v for p, v in found.items() if not any(p == h or p.startswith(f"{h}/") for h in heavy)
    }


async def count(bus: Bus, bucket: str, prefix: str = "") -> int:
    return len(await (await bus.kv(bucket)).keys(prefix))


# ── round trip ───────────────────────────────────────────────────────────────────────


async def test_a_materialized_snapshot_equals_the_fixture_byte_for_byte(
    bus: Bus, tmp_path: Path
) -> None:
    fixture = make_fixture(tmp_path / "fixture")
    spec = await snapshot_workspace(bus, fixture)
    work = tmp_path / "work"
    async with materialize(bus, spec, "run-1", root=work) as path:
        assert path.parent == work
        assert tree(path) == without_excluded(tree(fixture))
        assert "node_modules" not in tree(path)
        assert (path / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
        assert os.readlink(path / "link_to_app") == "src/pkg/app.py"
    assert not path.exists()  # removed on exit, the read-only directory too
    assert list(work.iterdir()) == []


async def test_the_spec_is_json_and_the_same_fixture_gives_the_same_spec(
    bus: Bus, tmp_path: Path
) -> None:
    fixture = make_fixture(tmp_path / "fixture")
    spec = await snapshot_workspace(bus, fixture)
    adapter: pydantic.TypeAdapter[WorkspaceSpec] = pydantic.TypeAdapter(WorkspaceSpec)
    data = adapter.dump_json(spec)
    assert orjson.loads(data) == {"kind": "snapshot", "manifest": spec.manifest}
    assert adapter.validate_json(data) == spec
    shared = SharedWorkspace(path=str(tmp_path))
    assert adapter.validate_json(adapter.dump_json(shared)) == shared
    assert await snapshot_workspace(bus, fixture) == spec
    with pytest.raises(pydantic.ValidationError, match="absolute"):
        SharedWorkspace(path="relative/dir")
    with pytest.raises(pydantic.ValidationError):
        SnapshotWorkspace(manifest="not-a-hash")


async def test_two_runs_get_private_copies(bus: Bus, tmp_path: Path) -> None:
    spec = await snapshot_workspace(bus, make_fixture(tmp_path / "fixture"))
    work = tmp_path / "work"
    async with (
        materialize(bus, spec, "run/a", root=work) as a,
        materialize(bus, spec, "run/a", root=work) as b,
    ):
        assert a != b
        (a / "README.md").write_text("changed by a\n")
        (a / "new.txt").write_text("a's file\n")
        assert (b / "README.md").read_text() == "# demo\n\nhello\n"
        assert not (b / "new.txt").exists()
        assert stat.S_IMODE(a.stat().st_mode) == 0o700  # private to the worker's user
    assert not a.exists() and not b.exists()


async def test_a_kept_copy_stays_after_the_block(bus: Bus, tmp_path: Path) -> None:
    spec = await snapshot_workspace(bus, make_fixture(tmp_path / "fixture"))
    async with materialize(bus, spec, "run-k", root=tmp_path / "work", keep=True) as path:
        pass
    assert (path / "README.md").read_text() == "# demo\n\nhello\n"


async def test_the_copy_is_removed_when_the_run_fails(bus: Bus, tmp_path: Path) -> None:
    spec = await snapshot_workspace(bus, make_fixture(tmp_path / "fixture"))
    with pytest.raises(RuntimeError, match="boom"):
        async with materialize(bus, spec, "run-f", root=tmp_path / "work") as path:
            (path / "locked").chmod(0o500)
            raise RuntimeError("boom")
    assert not path.exists()


# ── content addressing ───────────────────────────────────────────────────────────────


async def revisions(bus: Bus, bucket: str) -> dict[str, int]:
    """Every key of a bucket with its revision: a rewrite of the same bytes shows too."""
    kv = await bus.kv(bucket)
    found: dict[str, int] = {}
    for key in await kv.keys():
        entry = await kv.get(key)
        assert entry is not None
        found[key] = entry.revision
    return found


async def test_a_second_snapshot_stores_nothing_new_and_fixtures_share_blobs(
    bus: Bus, tmp_path: Path
) -> None:
    fixture = make_fixture(tmp_path / "fixture")
    first = await snapshot_workspace(bus, fixture)
    blobs = await revisions(bus, FILE_BLOBS_BUCKET)
    manifests = await revisions(bus, WORKSPACES_BUCKET)
    assert list(manifests) == [f"manifest/{first.manifest}"]
    assert await snapshot_workspace(bus, fixture) == first
    assert await revisions(bus, FILE_BLOBS_BUCKET) == blobs  # nothing written again
    assert await revisions(bus, WORKSPACES_BUCKET) == manifests

    other = tmp_path / "other"
    other.mkdir()
    (other / "copy.md").write_text("# demo\n\nhello\n")  # the same content as README.md
    (other / "fresh.txt").write_text("only here\n")
    second = await snapshot_workspace(bus, other)
    assert second != first
    fresh = "sha256/" + hashlib.sha256(b"only here\n").hexdigest()
    after = await revisions(bus, FILE_BLOBS_BUCKET)
    assert set(after) - set(blobs) == {fresh}  # only fresh.txt's content
    assert {key: after[key] for key in blobs} == blobs
    assert await count(bus, WORKSPACES_BUCKET) == 2


# ── diff ─────────────────────────────────────────────────────────────────────────────


async def test_the_diff_says_what_the_run_changed(bus: Bus, tmp_path: Path) -> None:
    spec = await snapshot_workspace(bus, make_fixture(tmp_path / "fixture"))
    async with materialize(bus, spec, "run-d", root=tmp_path / "work") as path:
        assert (await workspace_diff(bus, spec, path)).changes == ()
        (path / "src" / "pkg" / "app.py").write_text("def main():\n    return 2\n")
        (path / "README.md").unlink()
        (path / "notes.txt").write_text("new\nfile")
        (path / "src" / "logo.bin").write_bytes(b"\x00\x01" * 10)
        (path / "run.sh").chmod(0o644)
        (path / "link_to_app").unlink()
        (path / "link_to_app").symlink_to("README.md")
        (path / "node_modules").mkdir()
        (path / "node_modules" / "x.js").write_text("ignored\n")
        diff = await workspace_diff(bus, spec, path)

    assert diff.added == ("notes.txt",)
    assert diff.deleted == ("README.md",)
    assert diff.modified == ("link_to_app", "run.sh", "src/logo.bin", "src/pkg/app.py")
    by_path = {change.path: change for change in diff.changes}
    assert by_path["src/pkg/app.py"].text_diff == (
        "--- a/src/pkg/app.py\n"
        "+++ b/src/pkg/app.py\n"
        "@@ -1,2 +1,2 @@\n"
        " def main():\n"
        "-    return 1\n"
        "+    return 2\n"
    )
    assert by_path["README.md"].text_diff == (
        "--- a/README.md\n+++ /dev/null\n@@ -1,3 +0,0 @@\n-# demo\n-\n-hello\n"
    )
    assert by_path["notes.txt"].text_diff == (
        "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1,2 @@\n+new\n+file\n"
        "\\ No newline at end of file\n"
    )
    logo = by_path["src/logo.bin"]
    assert (logo.binary, logo.text_diff, logo.size_before, logo.size_after) == (
        True,
        None,
        1024,
        20,
    )
    run_sh = by_path["run.sh"]
    assert (run_sh.mode_before, run_sh.mode_after, run_sh.text_diff) == (0o755, 0o644, None)
    link = by_path["link_to_app"]
    assert (link.target_before, link.target_after) == ("src/pkg/app.py", "README.md")

    assert diff.diff_ref is not None
    assert await load_diff(bus, diff.diff_ref) == diff


@on_nats
async def test_a_diff_over_the_nats_payload_limit_is_stored_and_loaded(
    bus: Bus, tmp_path: Path
) -> None:
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    big = b"".join(f"line {n:07d} of the original text\n".encode() for n in range(60_000))
    assert len(big) > MiB
    (fixture / "big.txt").write_bytes(big)
    (fixture / "big.bin").write_bytes(os.urandom(3 * MiB))  # a file over 1 MiB
    spec = await snapshot_workspace(bus, fixture)
    async with materialize(bus, spec, "run-big", root=tmp_path / "work") as path:
        assert (path / "big.bin").read_bytes() == (fixture / "big.bin").read_bytes()
        assert (path / "big.txt").read_bytes() == big
        (path / "big.txt").write_bytes(big.replace(b"original", b"modified"))
        diff = await workspace_diff(bus, spec, path)
    assert diff.modified == ("big.txt",)
    text = diff.changes[0].text_diff
    assert text is not None and len(text) > MiB
    assert diff.diff_ref is not None
    stored = await (await bus.kv(WORKSPACES_BUCKET)).get(f"diff/{diff.diff_ref}")
    assert stored is not None and len(stored.value) > MiB
    assert await load_diff(bus, diff.diff_ref) == diff


# ── links ────────────────────────────────────────────────────────────────────────────


async def test_a_link_pointing_outside_is_kept_as_a_link_and_never_followed(
    bus: Bus, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"the host's secret")
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "a.txt").write_text("a\n")
    (fixture / "escape").symlink_to(outside / "secret.txt")
    (fixture / "escape_dir").symlink_to(outside)

    spec = await snapshot_workspace(bus, fixture)
    blobs = await bus.kv(FILE_BLOBS_BUCKET)
    secret_key = "sha256/" + hashlib.sha256(b"the host's secret").hexdigest()
    assert await blobs.get(secret_key) is None  # its content was never read
    async with materialize(bus, spec, "run-l", root=tmp_path / "work") as path:
        assert os.readlink(path / "escape") == str(outside / "secret.txt")
        assert os.readlink(path / "escape_dir") == str(outside)
        assert (await workspace_diff(bus, spec, path)).changes == ()
    assert (outside / "secret.txt").read_bytes() == b"the host's secret"  # not removed


async def test_a_forged_manifest_cannot_write_through_a_link(bus: Bus, tmp_path: Path) -> None:
    """A manifest whose link `d` is followed by a file `d/x` would write outside: the
    confined writer refuses it."""
    from tiller.store import FileRecord, encode_records

    outside = tmp_path / "outside"
    outside.mkdir()
    blobs = await bus.kv(FILE_BLOBS_BUCKET)
    sha = hashlib.sha256(b"planted").hexdigest()
    await blobs.put(f"sha256/{sha}", b"planted")
    records = [
        FileRecord("d", "symlink", target=str(outside)),
        FileRecord("d/x", "file", sha256=sha, size=7, mode=0o644),
    ]
    data = encode_records(records)
    manifest = hashlib.sha256(data).hexdigest()
    await (await bus.kv(WORKSPACES_BUCKET)).put(f"manifest/{manifest}", data)
    with pytest.raises(MaterializeFailed, match="d/x"):
        async with materialize(bus, SnapshotWorkspace(manifest=manifest), "r", root=tmp_path / "w"):
            pass
    assert list(outside.iterdir()) == []
    assert list((tmp_path / "w").iterdir()) == []


# ── shared paths ─────────────────────────────────────────────────────────────────────


async def test_a_shared_path_is_used_as_it_is_and_never_removed(bus: Bus, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "keep.txt").write_text("kept\n")
    spec = SharedWorkspace(path=str(shared))
    async with materialize(bus, spec, "run-s", root=tmp_path / "work") as path:
        assert path == shared
    assert (shared / "keep.txt").read_text() == "kept\n"
    with pytest.raises(NoWorkspaceDiff, match="version control"):
        await workspace_diff(bus, spec, shared)


async def test_a_shared_path_that_is_missing_or_a_file_is_refused(bus: Bus, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for missing in (tmp_path / "nowhere", tmp_path / "file"):
        with pytest.raises(WorkspacePathMissing, match="mount it at the same path"):
            async with materialize(bus, SharedWorkspace(path=str(missing)), "r"):
                pass


# ── errors ───────────────────────────────────────────────────────────────────────────


async def test_a_missing_fixture_is_refused(bus: Bus, tmp_path: Path) -> None:
    with pytest.raises(FixtureNotFound, match="does not exist"):
        await snapshot_workspace(bus, tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FixtureNotFound, match="not a directory"):
        await snapshot_workspace(bus, tmp_path / "file")


async def test_a_fixture_past_the_caps_is_refused_whole(bus: Bus, tmp_path: Path) -> None:
    from tiller.tools import MAX_SAVED_FILE_BYTES

    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "small.txt").write_text("small\n")
    with (fixture / "huge.img").open("wb") as f:
        f.truncate(MAX_SAVED_FILE_BYTES + 1)  # sparse: never read
    with pytest.raises(FixtureTooLarge, match=r"huge\.img is 16777217 bytes, over the"):
        await snapshot_workspace(bus, fixture)
    assert await count(bus, WORKSPACES_BUCKET) == 0  # no partial manifest


async def test_a_manifest_from_another_store_is_not_found(bus: Bus, tmp_path: Path) -> None:
    spec = await snapshot_workspace(bus, make_fixture(tmp_path / "fixture"))
    other = await open_bus("memory://")
    try:
        with pytest.raises(WorkspaceNotStored, match="another store"):
            async with materialize(other, spec, "r", root=tmp_path / "work"):
                pass
        with pytest.raises(WorkspaceNotStored):
            await workspace_diff(other, spec, tmp_path)
        with pytest.raises(WorkspaceNotStored, match="another store"):
            await load_diff(other, "0" * 64)
        with pytest.raises(WorkspaceNotStored, match="64 hex digits"):
            await load_diff(other, "../../etc")
    finally:
        await other.aclose()
    assert not (tmp_path / "work").exists() or list((tmp_path / "work").iterdir()) == []


async def test_a_malformed_manifest_or_diff_is_refused(bus: Bus, tmp_path: Path) -> None:
    kv = await bus.kv(WORKSPACES_BUCKET)
    garbage = b"not a manifest"
    sha = hashlib.sha256(garbage).hexdigest()
    await kv.put(f"manifest/{sha}", garbage)
    with pytest.raises(MalformedWorkspace, match="not a snapshot manifest"):
        async with materialize(bus, SnapshotWorkspace(manifest=sha), "r", root=tmp_path):
            pass
    # Stored under a hash that is not its own: damaged or planted.
    spec = await snapshot_workspace(bus, make_fixture(tmp_path / "fixture"))
    entry = await kv.get(f"manifest/{spec.manifest}")
    assert entry is not None
    await kv.put(f"manifest/{sha}", entry.value)
    with pytest.raises(MalformedWorkspace, match="does not match its sha256"):
        async with materialize(bus, SnapshotWorkspace(manifest=sha), "r", root=tmp_path):
            pass

    diff_bad = orjson.dumps({"schema_version": 1, "manifest": 5})
    bad_ref = hashlib.sha256(diff_bad).hexdigest()
    await kv.put(f"diff/{bad_ref}", diff_bad)
    with pytest.raises(MalformedWorkspace, match="not a workspace diff"):
        await load_diff(bus, bad_ref)
    newer = orjson.dumps({"schema_version": 99, "written_by": "9.0.0", "manifest": "x"})
    newer_ref = hashlib.sha256(newer).hexdigest()
    await kv.put(f"diff/{newer_ref}", newer)
    with pytest.raises(WorkspaceFromNewerTiller, match="upgrade tiller") as caught:
        await load_diff(bus, newer_ref)
    assert isinstance(caught.value, NewerSchemaError)
    assert caught.value.written_by == "9.0.0"


async def test_a_missing_blob_fails_the_materialization_and_leaves_nothing(
    bus: Bus, tmp_path: Path
) -> None:
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "a.txt").write_text("lost content\n")
    spec = await snapshot_workspace(bus, fixture)
    blobs = await bus.kv(FILE_BLOBS_BUCKET)
    await blobs.delete("sha256/" + hashlib.sha256(b"lost content\n").hexdigest())
    work = tmp_path / "work"
    with pytest.raises(MaterializeFailed, match=r"a\.txt: .*missing") as caught:
        async with materialize(bus, spec, "r", root=work):
            pass
    assert isinstance(caught.value, TillerError)
    assert list(work.iterdir()) == []


async def test_concurrent_snapshots_of_one_fixture_agree(bus: Bus, tmp_path: Path) -> None:
    fixture = make_fixture(tmp_path / "fixture")
    specs = await asyncio.gather(*(snapshot_workspace(bus, fixture) for _ in range(3)))
    assert len(set(specs)) == 1
    assert await count(bus, WORKSPACES_BUCKET) == 1


on_memory = pytest.mark.parametrize("bus", ["memory"], indirect=True)


@on_memory
async def test_a_file_too_large_for_a_text_diff_gets_its_sizes(bus: Bus, tmp_path: Path) -> None:
    from tiller.fleet import MAX_TEXT_DIFF_BYTES

    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "log.txt").write_bytes(b"x\n" * (MAX_TEXT_DIFF_BYTES // 2 + 1))
    spec = await snapshot_workspace(bus, fixture)
    async with materialize(bus, spec, "run-t", root=tmp_path / "work") as path:
        (path / "log.txt").write_bytes(b"y\n")
        diff = await workspace_diff(bus, spec, path)
    (change,) = diff.changes
    assert (change.too_large, change.binary, change.text_diff) == (True, False, None)
    assert (change.size_before, change.size_after) == (MAX_TEXT_DIFF_BYTES + 2, 2)


@on_memory
async def test_paths_a_capped_walk_did_not_see_are_not_reported_deleted(
    bus: Bus, tmp_path: Path
) -> None:
    from tiller.store import walk_workspace

    fixture = tmp_path / "fixture"
    (fixture / "zzz").mkdir(parents=True)
    (fixture / "zzz" / "keep.txt").write_text("kept\n")
    spec = await snapshot_workspace(bus, fixture)
    async with materialize(bus, spec, "run-c", root=tmp_path / "work") as path:
        many = path / "aaa"
        many.mkdir()
        for n in range(20_001):
            (many / f"{n}").touch()
        assert not walk_workspace(path).complete
        diff = await workspace_diff(bus, spec, path)
    assert diff.complete is False
    assert diff.note is not None and "deletions are not reported" in diff.note
    assert diff.deleted == ()
    assert len(diff.added) > 19_000


@on_memory
async def test_a_diff_of_a_directory_that_is_gone_says_so(bus: Bus, tmp_path: Path) -> None:
    spec = await snapshot_workspace(bus, make_fixture(tmp_path / "fixture"))
    async with materialize(bus, spec, "run-g", root=tmp_path / "work") as path:
        pass
    with pytest.raises(WorkspacePathMissing, match="inside its block"):
        await workspace_diff(bus, spec, path)


@on_memory
async def test_the_default_work_directory_is_under_the_temporary_directory(
    bus: Bus, tmp_path: Path
) -> None:
    spec = await snapshot_workspace(bus, make_fixture(tmp_path / "fixture"))
    async with materialize(bus, spec, "run-tmp") as path:
        assert path.parent == Path(tempfile.gettempdir()) / "tiller-workspaces"
        assert path.name.startswith("run-tmp-")
    assert not path.exists()
