"""The invoice eval's approver: who answers the calls an eval case's run must ask about.

An eval runs its cases in the default safety mode, `ask`: every edit and every shell
command needs approval, and no person is there to give it (without an approver the calls
are blocked, and no case could pass). `InvoiceCaseApprover` answers for them with a narrow
policy, declared here rather than by turning the safety mode off, so what a case may do
is written down:

- **reads and edits inside the jail are allowed**: a call of a tool that is not sandboxed
  is approved only if the tool declares it a read or a file mutation (`risk_of`, or
  `read_only`; one that declares no risk is external access, as the policy engine has
  it), runs no command (`command_of`), and names paths (`paths_of`) that are all
  relative and stay below the workspace (the file tools resolve them inside the jail
  anyway; this also refuses what they would refuse, so the refusal says who refused);
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
- **nothing unsandboxed that sends is allowed**: a tool outside the sandbox that
  declares it can send data out of the machine (`Capability.EXTERNAL_SEND`, its
  `sends`) is blocked, whatever it declares of its risk and paths;
- **anything else is blocked**: a network fetch, a tool that is not sandboxed and
  declares more than file access (`network`, `external_access`, ...), whatever its paths.

It decides from what tools declare (`sandboxed`, `capabilities`, `risk_of`, `read_only`,
`command_of`, `paths_of`, read by `PolicyEngine.assess`), never from their names (DESIGN
§4 law 12).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Final

import orjson

from ...conversation import ToolCall
from ...policy import Decision, PolicyEngine
from ...tools import Capability, RiskClass

__all__ = ["InvoiceCaseApprover"]

#: What a tool outside the sandbox may declare of a call to be approved here: a read or
#: an edit of files (each named by `paths_of`, and checked below).
_FILE_RISKS: Final = frozenset({RiskClass.READ_ONLY, RiskClass.FILE_MUTATION})


def _is_test_file(path: PurePosixPath) -> bool:
    return path.name.startswith("test_") or path.name.endswith("_test.py")


class InvoiceCaseApprover:
    """Answers an invoice case's approvals (see the module docstring). One instance may
    serve every case: it keeps no state."""

    __slots__ = ("_engine",)

    def __init__(self) -> None:
        # Read only for `assess`: what a tool declares of a call, as the policy engine
        # reads it everywhere (a declaration that is invalid or raises is external access).
        self._engine = PolicyEngine()

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        try:
            arguments = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            return Decision.blocked(f"{call.name}'s arguments are not JSON")
        if not isinstance(arguments, dict):
            return Decision.blocked(f"{call.name}'s arguments are not an object")
        if getattr(tool, "sandboxed", False) is True:
            # Its sandbox is what holds it: the copy only, no network (the shell declares
            # that it may send, which it can only where a run turns the network on).
            return Decision.allow()
        capabilities = getattr(tool, "capabilities", None)
        if not isinstance(capabilities, Capability) or Capability.EXTERNAL_SEND in capabilities:
            return Decision.blocked(
                f"{call.name} is not sandboxed and declares that it can send data out of the "
                "machine (or does not declare its capabilities); an invoice case may only "
                "read and edit its copy's files and run sandboxed commands"
            )
        assessed = self._engine.assess(call.name, arguments, tool)
        if assessed.shell is not None or assessed.risk not in _FILE_RISKS:
            does = "runs a command outside the sandbox" if assessed.shell else assessed.reason
            return Decision.blocked(
                f"{call.name} is not sandboxed and {does.rstrip('.')}; an invoice case may "
                "only read and edit its copy's files and run sandboxed commands"
            )
        if not assessed.paths:
            return Decision.blocked(
                f"{call.name} is neither a sandboxed command nor an edit of a file in the "
                "case's workspace, and an invoice case may do only those"
            )
        for raw in assessed.paths:
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
