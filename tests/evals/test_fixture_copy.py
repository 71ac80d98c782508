"""Removing a case's copy of its fixture: read-only directories the case left are made
removable, and nothing outside the copy is ever changed, even by a link swapped in while
the copy is removed."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from tiller.evals._fixture_copy import remove_copy


def _copy(root: Path) -> Path:
    copy = root / "copy"
    (copy / "workspace" / "locked" / "deep").mkdir(parents=True)
    (copy / "workspace" / "locked" / "deep" / "file").write_text("x")
    (copy / "workspace" / "locked").chmod(0o500)
    return copy


def test_a_copy_with_read_only_directories_is_removed(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    remove_copy(copy)
    assert not copy.exists()


def test_a_link_out_of_the_copy_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o500)
    copy = _copy(tmp_path)
    (copy / "workspace" / "out").symlink_to(outside)
    remove_copy(copy)
    assert not copy.exists() and outside.is_dir()
    assert stat.S_IMODE(outside.stat().st_mode) == 0o500


def test_a_directory_swapped_for_a_link_as_it_is_looked_at_never_changes_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`remove_copy` looked at each directory (lstat), then changed its mode by name
    (chmod, which follows links): a process the case left running that swapped the
    directory for a link in between had the link's target (outside the copy) made
    writable. The swap is made here right after the look, the moment it would race."""
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o500)
    copy = _copy(tmp_path)
    target = copy / "workspace" / "locked"
    real_lstat = os.lstat
    swapped = False

    def lstat_then_swap(path: object, *args: object, **kwargs: object) -> os.stat_result:
        nonlocal swapped
        result = real_lstat(path, *args, **kwargs)  # type: ignore[arg-type]
        if not swapped and os.fspath(path) == str(target):  # type: ignore[call-overload]
            swapped = True
            target.chmod(0o700)
            (target / "deep" / "file").unlink()
            (target / "deep").rmdir()
            target.rmdir()
            target.symlink_to(outside)
        return result

    monkeypatch.setattr(os, "lstat", lstat_then_swap)
    remove_copy(copy)
    monkeypatch.undo()
    assert stat.S_IMODE(outside.stat().st_mode) == 0o500
    assert not copy.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to an ordinary user needs root")
def test_as_an_ordinary_user_a_tree_with_read_only_directories_is_removed() -> None:
    """As root, a read-only directory never stops a removal, so the tests above cannot
    see the permission pass work: here a forked child drops to `nobody` (65534), which
    owns the copy, and removes it. A first walk leaves the locked directory's contents;
    the permission pass and a second walk take them."""
    top = Path(tempfile.mkdtemp(prefix="tiller-copy-test-", dir="/tmp"))
    try:
        os.chown(top, 65534, 65534)  # its parent too: removing the copy writes there
        copy = _copy(top)
        for root, dirs, files in os.walk(copy):
            for name in [*dirs, *files]:
                os.chown(os.path.join(root, name), 65534, 65534)
        os.chown(copy, 65534, 65534)
        pid = os.fork()
        if pid == 0:  # the child: nothing but the removal, then exit
            code = 2
            try:
                os.setgid(65534)
                os.setuid(65534)
                remove_copy(copy)
                code = 1 if os.path.lexists(copy) else 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert not copy.exists()
    finally:
        shutil.rmtree(top, ignore_errors=True)
