"""Every file tool's memory is bounded in bytes as it reads (issue 13, item 8): a sparse
2 GiB file whose first line is text, and a directory chain deeper than Python's recursion
limit, cost a tool call no more than a fixed peak RSS, measured in a child process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .memory_support import RSS_BOUND_MIB, make_chain, remove_tree, run_in_child

SPARSE_SIZE = 2 * 1024**3
FIRST_LINE = "a" * 10_000 + "\n"  # past the binary sniff, so the zeros after it are "text"


@pytest.fixture(scope="module")
def sparse_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sparse")
    big = root / "big.txt"
    big.write_text(FIRST_LINE)
    os.truncate(big, SPARSE_SIZE)
    return root


def test_read_file_of_one_line_of_a_sparse_file_stays_small(sparse_root: Path) -> None:
    done = run_in_child(sparse_root, "read_file", path="big.txt", limit=1)
    assert done["peak_mib"] < RSS_BOUND_MIB
    assert not done["is_error"]
    assert done["text"].startswith("     1\taaaa")
    assert "offset=1" in done["text"]


def test_read_file_of_the_whole_sparse_file_is_capped_with_a_note(sparse_root: Path) -> None:
    done = run_in_child(sparse_root, "read_file", path="big.txt", offset=1)
    assert done["peak_mib"] < RSS_BOUND_MIB
    assert "line cut" in done["text"]
    assert len(done["text"]) < 1024 * 1024


def test_grep_of_a_sparse_file_stays_small(sparse_root: Path) -> None:
    done = run_in_child(sparse_root, "grep", pattern="b")
    assert done["peak_mib"] < RSS_BOUND_MIB
    assert not done["is_error"]
    assert "searched only the first" in done["text"]


def test_edit_file_refuses_a_file_over_the_edit_cap(sparse_root: Path) -> None:
    done = run_in_child(sparse_root, "edit_file", path="big.txt", old="aaa", new="b")
    assert done["peak_mib"] < RSS_BOUND_MIB
    assert done["is_error"]
    assert "too large to edit" in done["text"]
    assert (sparse_root / "big.txt").stat().st_size == SPARSE_SIZE


def test_apply_patch_refuses_a_file_over_the_edit_cap(sparse_root: Path) -> None:
    patch = "--- a/big.txt\n+++ b/big.txt\n@@ -1 +1 @@\n-aaa\n+b\n"
    done = run_in_child(sparse_root, "apply_patch", patch=patch)
    assert done["peak_mib"] < RSS_BOUND_MIB
    assert done["is_error"]
    assert "too large to edit" in done["text"]


@pytest.fixture
def deep_root(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "deep"
    root.mkdir()
    (root / "top.txt").write_text("needle at the top\n")
    make_chain(root, 1500)
    yield root
    remove_tree(root)


@pytest.mark.parametrize("name", ["grep", "glob"])
def test_a_1500_deep_chain_stops_the_walk_with_a_note(deep_root: Path, name: str) -> None:
    args = {"pattern": "needle"} if name == "grep" else {"pattern": "**/*.txt"}
    done = run_in_child(deep_root, name, **args)
    assert not done["is_error"], done["text"]
    assert "top.txt" in done["text"]
    assert "deeper than" in done["text"]


def test_grep_output_is_capped_in_bytes(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    block = "match\n" + ("z" * 5000 + "\n") * 10  # each match brings 10 wide lines after it
    (root / "wide.txt").write_text(block * 150)
    done = run_in_child(root, "grep", pattern="match", context=10)
    assert len(done["text"].encode()) < 200 * 1024
    assert "bytes of output" in done["text"]


def test_a_catastrophic_pattern_is_an_error_not_a_hang(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a" * 60 + "!\n")
    done = run_in_child(root, "grep", pattern="^(a|aa)+$")
    assert done["is_error"]
    assert "backtracks catastrophically" in done["text"]
