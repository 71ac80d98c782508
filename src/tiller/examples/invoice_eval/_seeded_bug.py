"""A seeded bug: one exact text replacement in one file of the invoice project.

A case's row says what it breaks (`old` → `new` in `file`), not what the broken project
looks like, so twenty cases cost twenty short rows instead of twenty copies of the
project. The replacement is checked against the project it is seeded into: `old` must
occur exactly once, or the row names a bug that is not where it says (the project moved
on and the row did not), which is the dataset's error, said with the case's id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ...errors import UsageError

__all__ = ["SeededBug", "SeededBugError"]


class SeededBugError(UsageError):
    """A seeded bug that cannot be seeded: its file is missing, its `old` text occurs
    zero or several times there, or it changes nothing."""


@dataclass(frozen=True, slots=True)
class SeededBug:
    """`old` replaced by `new` in `file` (a path relative to the project)."""

    case_id: str
    file: str
    old: str
    new: str

    def __post_init__(self) -> None:
        pure = PurePosixPath(self.file)
        if not self.file or pure.is_absolute() or ".." in pure.parts:
            raise SeededBugError(
                f"case {self.case_id!r}: its bug's file {self.file!r} must be a path inside "
                "the project, relative to it"
            )
        if not self.old or self.old == self.new:
            raise SeededBugError(
                f"case {self.case_id!r}: its bug replaces {self.old!r} with {self.new!r}, "
                "which changes nothing; give the exact text to break and what it becomes"
            )

    @classmethod
    def of_metadata(cls, case_id: str, metadata: Mapping[str, Any]) -> SeededBug:
        """The bug a dataset row's `metadata.bug` describes (`file`, `old`, `new`)."""
        bug = metadata.get("bug")
        if not isinstance(bug, Mapping) or not all(
            isinstance(bug.get(key), str) for key in ("file", "old", "new")
        ):
            raise SeededBugError(
                f"case {case_id!r}: its metadata needs a `bug` with the strings `file`, "
                f"`old` and `new` (the exact replacement that seeds it), not {bug!r}"
            )
        return cls(case_id, bug["file"], bug["old"], bug["new"])

    def seeded(self, text: str) -> str:
        """`text` (the file's pristine content) with the bug in it."""
        count = text.count(self.old)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise SeededBugError(
                f"case {self.case_id!r}: the text its bug replaces, {self.old!r}, {where} "
                f"in {self.file}; it must occur exactly once (has the project changed?)"
            )
        return text.replace(self.old, self.new)

    def seed_into(self, project: Path) -> None:
        """Seed the bug into the project directory `project` (a copy: it is changed)."""
        path = project / self.file
        if not path.is_file():
            raise SeededBugError(
                f"case {self.case_id!r}: its bug's file {self.file!r} is not in the project"
            )
        path.write_text(self.seeded(path.read_text(encoding="utf-8")), encoding="utf-8")
