"""The invoice eval's `tests` scorer: the pristine tests, run against the copy's
`invoice.py` in the case's sandbox, by a runner the agent cannot change, ending with a
marker the agent cannot predict (see `_pristine_runner` for why each of these)."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import secrets
import shlex
import sys
from pathlib import Path
from typing import Final

from ...errors import UsageError
from ...evals import CaseOutcome, Score, WorkspaceCheck
from ...tools import Sandbox
from . import _pristine_runner

__all__ = ["PristineTestsScorer"]

_TESTS: Final = "test_invoice.py"
#: The runner script (a file of this package: outside every copy, bound read-only).
_RUNNER: Final = Path(_pristine_runner.__file__).resolve()


class PristineTestsScorer:
    """Scores a case by the pristine `test_invoice.py` (in `pristine`, outside the copy),
    run against the copy's `invoice.py` in the sandbox: a pass needs every one of the
    pristine tests to have run and passed, and the runner's end marker with this
    scoring's nonce. Nothing else in the copy is imported: a `unittest.py`, an extra
    `test_*.py`, a `sitecustomize.py` or `.pth` the agent left there changes nothing.

    What it still trusts: `invoice.py` itself. It is the code under test and runs in
    the runner's process, so one written to cheat (patching `unittest`, reading the
    nonce from the runner's memory) could fake a pass; exiting early, even with
    `os._exit(0)`, does not (no marker). The case's diff shows what the agent wrote."""

    __slots__ = ("_expected", "_tests", "name", "sandbox", "timeout")

    def __init__(self, pristine: Path, *, timeout: float = 120.0, name: str = "tests") -> None:
        self._tests = Path(pristine).resolve() / _TESTS
        self._expected = _count_tests(self._tests)
        self.timeout = timeout
        self.name = name
        self.sandbox = Sandbox(
            ro_binds=(*Sandbox.python_paths(), self._tests.parent, _RUNNER.parent)
        )

    async def score(self, outcome: CaseOutcome) -> Score:
        nonce = secrets.token_hex(16)
        nonce_file = f".tiller-tests-nonce-{secrets.token_hex(8)}"
        written = await asyncio.to_thread(_write_nonce, outcome.workspace, nonce_file, nonce)
        try:
            # Without a workspace, WorkspaceCheck's error score says what is missing.
            score = await self._check(nonce_file).score(outcome)
        finally:
            if written is not None:
                await asyncio.to_thread(_remove, written)
        if not score.passed:
            return score
        marker = f"{_pristine_runner.END_MARKER} {nonce}"
        if marker not in (line.strip() for line in score.explanation.splitlines()):
            return Score.of(
                False,
                "the test run did not finish: the runner's end marker is missing, so the "
                "process ended before the tests did (the code under test exited early); "
                + score.explanation,
            )
        return score

    def _check(self, nonce_file: str) -> WorkspaceCheck:
        argv = [sys.executable, "-I", "-B", str(_RUNNER), nonce_file, str(self._tests)]
        return WorkspaceCheck(
            command=shlex.join([*argv, str(self._expected)]),
            timeout=self.timeout,
            sandbox=self.sandbox,
            name=self.name,
        )


def _write_nonce(workspace: Path | None, name: str, nonce: str) -> Path | None:
    """Write `nonce` to a new file `name` in the workspace (its real directory), for the
    runner to read and remove; None where there is no workspace directory to write to."""
    if workspace is None or not os.path.isdir(workspace):
        return None
    path = Path(os.path.realpath(workspace)) / name
    # A fresh random name, created exclusively and never through a link.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(nonce)
    return path


def _remove(path: Path) -> None:
    """The nonce file, if the runner did not get to remove it: the diff shows only what
    the agent left."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _count_tests(tests: Path) -> int:
    """How many tests the pristine module has: `test*` methods of its classes (it has
    no other kind), so a run that ran fewer was cut short or filtered."""
    try:
        tree = ast.parse(tests.read_text(encoding="utf-8"), filename=str(tests))
    except (OSError, SyntaxError) as exc:
        raise UsageError(f"the pristine tests {tests} cannot be read: {exc}") from exc
    count = sum(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
    )
    if count == 0:
        raise UsageError(f"the pristine tests {tests} define no test methods")
    return count
