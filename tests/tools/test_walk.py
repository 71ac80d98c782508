"""The iterative, bounded walk and tree removal: deep chains, caps, and symlinks that are
never followed."""

from __future__ import annotations

import os
from contextlib import closing
from pathlib import Path

from tiller.tools import remove_tree
from tiller.tools._walk import WalkLimits, WalkReport, bounded_fwalk

from .memory_support import make_chain


def _walk(top: Path, report: WalkReport) -> list[tuple[str, ...]]:
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with closing(bounded_fwalk(fd, report)) as steps:
            return [parts for parts, _, _, _ in steps]
    finally:
        os.close(fd)


def test_a_walk_stops_at_the_depth_cap_and_says_where(tmp_path: Path) -> None:
    top = tmp_path / "top"
    top.mkdir()
    make_chain(top, 1500)
    report = WalkReport(WalkLimits(max_depth=64))
    seen = _walk(top, report)
    assert len(seen) == 65  # the top and 64 levels below it
    assert report.too_deep == 1
    assert "deeper than 64 levels" in (report.note() or "")
    remove_tree(top)
    assert not top.exists()


def test_a_walk_stops_after_the_entry_cap(tmp_path: Path) -> None:
    for n in range(30):
        (tmp_path / f"d{n}").mkdir()
        (tmp_path / f"d{n}" / "f").write_text("x")
    report = WalkReport(WalkLimits(max_entries=20))
    _walk(tmp_path, report)
    assert report.entries <= 20
    assert report.entry_capped
    assert "stopped after 20 entries" in (report.note() or "")


def test_remove_tree_unlinks_symlinks_without_following_them(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f.txt").write_text("x")
    (tree / "a" / "out").symlink_to(outside)
    remove_tree(tree)
    assert not tree.exists()
    assert (outside / "keep.txt").read_text() == "keep"


def test_remove_tree_of_a_symlink_leaves_its_target(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    (tmp_path / "link").symlink_to(target)
    remove_tree(tmp_path / "link")
    assert (target / "keep.txt").exists()
