"""Where a case runs: a private directory of its own, with a copy of its fixture, and what
is kept of it after the run.

Each run of a case gets a new directory (`open`), removed when the run and its scoring are
over, however they end. A case with a fixture works on a private copy of it
(`copy_fixture`: cloned where the filesystem allows) inside that directory; a case without
one, in the directory itself, empty. A fixture that is not a directory fails that run
(`FixtureNotFound`, saying which case and which path), not the eval.

What is kept (`keep`) reuses the fleet's snapshot workspaces rather than a format of its
own: the directory as the run left it is snapshotted into the store
(`tiller.fleet.snapshot_workspace`: content-addressed, so what the run did not change
costs nothing beyond its fixture's own snapshot), and its diff against the fixture's
snapshot is stored (`tiller.fleet.workspace_diff`). A rescore materializes the kept
snapshot (`tiller.fleet.materialize`) for scorers that look at files; a report shows the
diff. A directory past a snapshot's caps is not kept, and the record says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from ..fleet import (
    FixtureNotFound,
    SnapshotWorkspace,
    WorkspaceError,
    snapshot_workspace,
    workspace_diff,
)
from ..store import Bus
from ._case import Case
from ._fixture_copy import copy_fixture, remove_copy

__all__ = ["CaseWorkspaces", "KeptWorkspace"]

_WORKSPACE = "workspace"


@dataclass(frozen=True, slots=True)
class KeptWorkspace:
    """What was kept of a run's directory: its snapshot's manifest, its diff against the
    fixture, and why either is missing (None: nothing to say)."""

    manifest: str | None = None
    diff_ref: str | None = None
    note: str | None = None


class CaseWorkspaces:
    """The directories of an eval's runs (see the module docstring). `root` is where they
    are made (by default the system's temporary directory); `keep` stores what each run
    left (False: nothing is kept, and a rescore's scorers see no workspace)."""

    def __init__(self, bus: Bus, *, root: Path | None = None, keep: bool = True) -> None:
        self.bus = bus
        self.root = root
        self.keep_files = keep
        self._fixtures: dict[Path, SnapshotWorkspace | str] = {}
        self._locks: dict[Path, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def open(self, case: Case, run_id: str) -> AsyncIterator[Path]:
        """The directory run `run_id` of `case` works in, for the length of the block."""
        fixture = None if case.fixture is None else await asyncio.to_thread(_fixture_of, case)
        parent = Path(await asyncio.to_thread(_private_dir, self.root, run_id))
        try:
            if fixture is None:
                # The private directory itself: one directory fewer to make and remove per
                # case (on ext4 an rmdir is a good share of a one-turn case's cost).
                workspace = parent
            else:
                workspace = parent / _WORKSPACE
                await asyncio.to_thread(copy_fixture, fixture, workspace)
            yield workspace
        finally:
            await asyncio.to_thread(remove_copy, parent)

    async def keep(self, case: Case, workspace: Path) -> KeptWorkspace:
        """Store what the run left in `workspace` (see the module docstring)."""
        if not self.keep_files:
            return KeptWorkspace()
        if case.fixture is None and not await asyncio.to_thread(_has_entries, workspace):
            return KeptWorkspace()  # empty, as it started: nothing to keep
        notes: list[str] = []
        manifest = diff_ref = None
        try:
            manifest = (await snapshot_workspace(self.bus, workspace)).manifest
        except WorkspaceError as exc:
            notes.append(f"the workspace was not kept: {exc}")
        if case.fixture is not None:
            base = await self._fixture_snapshot(case.fixture)
            if isinstance(base, str):
                notes.append(f"no diff: {base}")
            else:
                try:
                    diff_ref = (await workspace_diff(self.bus, base, workspace)).diff_ref
                except WorkspaceError as exc:
                    notes.append(f"no diff: {exc}")
        return KeptWorkspace(manifest, diff_ref, "; ".join(notes) or None)

    async def _fixture_snapshot(self, fixture: Path) -> SnapshotWorkspace | str:
        """The fixture's snapshot, taken once per eval run (a note if it cannot be)."""
        key = fixture  # as the case names it: two spellings are two (deduplicated) snapshots
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self._fixtures:
                try:
                    self._fixtures[key] = await snapshot_workspace(self.bus, key)
                except WorkspaceError as exc:
                    self._fixtures[key] = str(exc)
            return self._fixtures[key]


def _fixture_of(case: Case) -> Path:
    fixture = case.fixture
    assert fixture is not None
    if not fixture.is_dir():
        what = "does not exist" if not fixture.exists() else "is not a directory"
        raise FixtureNotFound(
            f"case {case.id!r}: its fixture {str(fixture)!r} {what}; give the case a "
            "directory to copy (or no fixture, for an empty one)"
        )
    return fixture


def _private_dir(root: Path | None, run_id: str) -> str:
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in run_id)[:80]
    return tempfile.mkdtemp(prefix=f"tiller-eval-{safe}-", dir=root)  # 0o700, unique


def _has_entries(path: Path) -> bool:
    """Whether the run left anything in its directory besides the runtime's own `.tiller/`
    (the jail makes it; the model cannot write there, law 11)."""
    with os.scandir(path) as entries:
        return any(entry.name != ".tiller" for entry in entries)
