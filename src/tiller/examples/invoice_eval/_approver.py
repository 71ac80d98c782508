"""The invoice eval's approver: who answers the calls an eval case's run must ask about.

An eval runs its cases in the default safety mode, `ask`: every edit and every shell
command needs approval, and no person is there to give it (without an approver the calls
are blocked, and no case could pass). `InvoiceCaseApprover` answers for them with a narrow
policy, declared here rather than by turning the safety mode off, so what a case may do
is written down:

- **edits inside the jail are allowed**: a file tool's call whose paths are all relative
  and stay below the workspace (the file tools resolve them inside the jail anyway; this
  also refuses what they would refuse, so the refusal says who refused);
- **edits of the tests are blocked**: the case is scored by running them, and an agent
  that rewrote them would grade itself. This is a courtesy, not the guard: the shell
  below can write any file of the copy, tests included. What keeps the score honest is
  the scorer (`PristineTestsScorer`): it runs the pristine tests from outside the copy
  and imports nothing of the copy but `invoice.py`, so a test rewritten through the
  shell, a planted `unittest.py` or `test_zz.py`, changes nothing. `invoice.py` is the
  code under test and is trusted: a cheating one could still fake a pass (an early
  `os._exit(0)` does not; see the scorer);
- **commands in the bubblewrap sandbox are allowed**: a sandboxed tool (the shell) sees
  only the case's copy, read-write, and no network; what the policy engine calls
  destructive is denied before it gets here, in every mode;
- **anything else is blocked**: a network fetch, a tool that is not sandboxed.

It decides from what tools declare (`sandboxed`, `paths_of`), never from their names.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import orjson

from ...conversation import ToolCall
from ...policy import Decision

__all__ = ["InvoiceCaseApprover"]


def _is_test_file(path: PurePosixPath) -> bool:
    return path.name.startswith("test_") or path.name.endswith("_test.py")


class InvoiceCaseApprover:
    """Answers an invoice case's approvals (see the module docstring). One instance may
    serve every case: it keeps no state."""

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        try:
            arguments = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            return Decision.blocked(f"{call.name}'s arguments are not JSON")
        if not isinstance(arguments, dict):
            return Decision.blocked(f"{call.name}'s arguments are not an object")
        if getattr(tool, "sandboxed", False):
            return Decision.allow()
        paths = tuple(tool.paths_of(arguments)) if hasattr(tool, "paths_of") else ()
        if not paths:
            return Decision.blocked(
                f"{call.name} is neither a sandboxed command nor an edit of a file in the "
                "case's workspace, and an invoice case may do only those"
            )
        for raw in paths:
            path = PurePosixPath(raw)
            if path.is_absolute() or ".." in path.parts:
                return Decision.blocked(
                    f"{raw!r} is not a path inside the case's workspace; give it relative to "
                    "the workspace, without '..'"
                )
            if _is_test_file(path):
                return Decision.blocked(
                    f"{raw} is a test file, and the case is scored by running the tests: "
                    "fix the code, not the tests"
                )
        return Decision.allow()
