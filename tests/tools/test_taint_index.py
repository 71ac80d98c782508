"""The taint index (`.tiller/taint.json`): what files carry from one run to the next."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import orjson
import pytest

from tiller.conversation import Taint
from tiller.tools import IndexHealth, TaintIndex, TaintIndexError
from tiller.tools._file_stamps import changed_files, stamp_workspace
from tiller.tools._taint_index import MAX_ENTRIES

BOTH = Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT


def test_a_missing_index_lists_nothing(tmp_path: Path) -> None:
    index = TaintIndex(tmp_path).load()
    assert index.health is IndexHealth.OK
    assert index.taint_of("TODO.md") == Taint.NONE
    assert not index.holds_untrusted()
    assert not (tmp_path / ".tiller").exists()  # reading creates nothing


def test_marked_files_carry_their_taint_merged_and_hashed(tmp_path: Path) -> None:
    (tmp_path / "TODO.md").write_text("fetched")
    TaintIndex(tmp_path).mark(["TODO.md"], Taint.UNTRUSTED_INPUT, run="r1")
    TaintIndex(tmp_path).mark(["TODO.md"], Taint.PRIVATE_DATA, run="r2")
    index = TaintIndex(tmp_path).load()
    assert index.taint_of("TODO.md") == BOTH
    assert index.taint_of("other.md") == Taint.NONE
    document = orjson.loads((tmp_path / ".tiller" / "taint.json").read_bytes())
    entry = document["files"]["TODO.md"]
    assert entry["taint"] == ["private", "untrusted"] and entry["run"] == "r2"
    assert len(entry["sha256"]) == 64


def test_a_persons_edit_keeps_the_taint_until_they_clear_it(tmp_path: Path) -> None:
    (tmp_path / "TODO.md").write_text("fetched")
    index = TaintIndex(tmp_path)
    index.mark(["TODO.md"], Taint.UNTRUSTED_INPUT, run="r1")
    (tmp_path / "TODO.md").write_text("rewritten by a person")
    index.load()
    assert index.changed("TODO.md") is True
    assert index.taint_of("TODO.md") == Taint.UNTRUSTED_INPUT
    assert index.clear(["TODO.md"]) == ["TODO.md"]
    assert TaintIndex(tmp_path).load().taint_of("TODO.md") == Taint.NONE


@pytest.mark.parametrize("content", [b"{not json", b'{"schema_version": 9, "files": {}}', b"[]"])
def test_a_corrupt_index_makes_every_read_untrusted_and_says_so(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / ".tiller").mkdir()
    (tmp_path / ".tiller" / "taint.json").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="tiller.taint"):
        index = TaintIndex(tmp_path).load()
    assert index.health is IndexHealth.CORRUPT
    assert index.taint_of("anything.txt") == Taint.UNTRUSTED_INPUT
    assert index.holds_untrusted()
    assert "corrupt" in caplog.text and "tiller taint clear" in caplog.text
    # An update leaves it for the person: rewriting it would launder what it listed.
    index.mark(["a.txt"], BOTH, run="r1")
    assert (tmp_path / ".tiller" / "taint.json").read_bytes() == content
    index.clear()
    assert TaintIndex(tmp_path).load().health is IndexHealth.OK


def test_a_full_index_drops_nothing_and_makes_every_read_untrusted(tmp_path: Path) -> None:
    index = TaintIndex(tmp_path)
    index.mark([f"f{n}" for n in range(MAX_ENTRIES)], Taint.UNTRUSTED_INPUT, run="r1")
    index.mark(["one-more"], Taint.UNTRUSTED_INPUT, run="r2")
    reloaded = TaintIndex(tmp_path).load()
    assert reloaded.health is IndexHealth.FULL
    assert reloaded.taint_of("one-more") == Taint.UNTRUSTED_INPUT
    assert reloaded.taint_of("never-written") == Taint.UNTRUSTED_INPUT
    assert len(reloaded.entries) == MAX_ENTRIES


def test_a_walk_that_could_not_see_everything_fails_closed(tmp_path: Path) -> None:
    TaintIndex(tmp_path).mark([], Taint.UNTRUSTED_INPUT, run="r1", complete=False)
    assert TaintIndex(tmp_path).load().health is IndexHealth.FULL


def test_concurrent_runs_lose_no_entry(tmp_path: Path) -> None:
    """Each writer holds the lock for its read-modify-write: all entries survive."""

    def writer(n: int) -> None:
        for k in range(20):
            TaintIndex(tmp_path).mark([f"w{n}-{k}"], Taint.UNTRUSTED_INPUT, run=f"r{n}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    index = TaintIndex(tmp_path).load()
    assert index.health is IndexHealth.OK
    assert len(index.entries) == 80
    assert not [p for p in (tmp_path / ".tiller").iterdir() if p.name.endswith(".tmp")]


def test_a_symlink_planted_at_dot_tiller_is_refused_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".tiller").symlink_to(outside)
    with pytest.raises(TaintIndexError, match="plain directory"):
        TaintIndex(workspace).mark(["a"], Taint.UNTRUSTED_INPUT, run="r1")
    assert list(outside.iterdir()) == []
    # And reading through it counts as unknown taint: untrusted.
    assert TaintIndex(workspace).load().health is IndexHealth.CORRUPT


def test_stamps_find_what_changed_without_following_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("x")
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("a")
    (ws / "link").symlink_to(outside)
    (ws / ".git").mkdir()
    before = stamp_workspace(ws)
    assert set(before.files) == {"src/a.py"} and before.complete
    (ws / "src" / "a.py").write_text("changed")
    (ws / "new.txt").write_text("n")
    (ws / ".git" / "HEAD").write_text("ref")
    (outside / "secret").write_text("y")
    assert changed_files(before, stamp_workspace(ws)) == [".git/HEAD", "new.txt", "src/a.py"]


def test_stamps_walk_a_deep_chain_iteratively_and_stop_at_the_cap(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    fds = [fd]
    try:
        for _ in range(600):
            os.mkdir("d", dir_fd=fds[-1])
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        stamps = stamp_workspace(ws)
        assert not stamps.complete  # past MAX_STAMP_DEPTH: said, not crashed
    finally:
        # Remove the chain from the bottom up, by descriptors (pytest's cleanup recurses).
        for parent in reversed(fds[:-1]):
            os.close(fds.pop())
            os.rmdir("d", dir_fd=parent)
        os.close(fds.pop())


def test_a_write_that_crashed_halfway_leaves_the_index_valid(tmp_path: Path) -> None:
    """A writer that died before `os.replace` leaves only its temporary file behind: the
    index is the previous one, and the next writer goes on."""
    TaintIndex(tmp_path).mark(["a"], Taint.UNTRUSTED_INPUT, run="r1")
    (tmp_path / ".tiller" / "taint.json.99999.tmp").write_bytes(b'{"schema_version": 1, "fi')
    index = TaintIndex(tmp_path).load()
    assert index.health is IndexHealth.OK and set(index.entries) == {"a"}
    index.mark(["b"], Taint.UNTRUSTED_INPUT, run="r2")
    assert set(TaintIndex(tmp_path).load().entries) == {"a", "b"}


def test_a_wide_tree_is_stamped_whole_under_a_small_descriptor_limit(tmp_path: Path) -> None:
    """The walk once held a descriptor per queued directory: 1,500 sibling directories
    under the usual 1,024-file limit made every later scan incomplete (every read then
    untrusted). It holds one per level now."""
    import resource

    for n in range(1500):
        (tmp_path / f"d{n}").mkdir()
    (tmp_path / "d1499" / "f.txt").write_text("x\n")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        stamps = stamp_workspace(tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert stamps.complete
    assert "d1499/f.txt" in stamps.files
