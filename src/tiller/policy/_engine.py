"""`PolicyEngine`: what the safety mode and the user's rules say about one tool call.

The gate (DESIGN §3) asks the engine after the interlock and the `pre_tool` hooks; the
engine answers `Allow`, `Ask` (a person decides), `Classify` (the auto classifier may
turn it into Allow, else Ask) or `Deny`, always with the call's risk class. It is pure
and synchronous: no I/O, no model, no clock.

**1. The call's risk** (`assess`), from what the tool declares (law 12: the name decides
nothing; see `tiller.tools.Tool`):

- a tool that runs a shell command (`command_of` gives one, as `execute_command` does):
  `classify_command(command)` (`_shell_risk`); the risk the tool declares for the call
  (`risk_of`: `process` for a background command) can only raise it;
- a tool declaring a risk for the call (`risk_of`, `@tool(risk="network")`): that class
  (`background_process` declares `read_only` for `list`, `read`, `wait` and `process`
  for `stop`; the file tools `file_mutation`; `web_fetch` `network`; an MCP tool
  `external_access` or more, see `tiller.tools.mcp`);
- any other tool marked `read_only`: `read_only`;
- any other tool, or an object that is no `Tool`: `external_access` (fail closed: what
  declares nothing may do anything, so a person is asked).

A tool declaring a risk that is not a `RiskClass`, or whose declaration fails for the
call's arguments, is denied with a message saying so.

**2. Destructive is denied**, in every mode, before any rule: the reason names the part
of the command that was dangerous. So is a shell command that writes, removes or
changes a **protected path** (`protected`: by default the jail's `PROTECTED_PATHS` —
`tiller.toml`, `.tiller/`, `.git/config`, `.git/hooks/`, ...; a run passes its own,
with its hook scripts), whatever the mode and the rules say (law 11): a redirection, a
`tee`/`cp`/`mv`/`ln`/`install`/`touch`/`sed -i`/`rm`/`chmod` target, a `git config`
write to the repository's config, `git -c core.fsmonitor=...`.

The shell classifier is a risk estimate over a parse of the command, not a boundary:
what it cannot see (a path built when the command runs, a script on disk) the sandbox
(`bwrap`, which binds the protected paths read-only) still stops.

**3. User rules** (`PolicyRules`, `_rules`), first match wins: `deny` denies; `ask` asks
(or keeps the mode's answer if that is stricter: Deny in `read_only` mode); `allow`
allows, except that it never lifts a floor (external access and system installs still
ask) and never widens `read_only` mode (anything but a read-only call is still denied).

**4. The mode's default**:

| risk \\ mode | read_only | ask | auto | full_access |
|---|---|---|---|---|
| read_only | Allow | Allow | Allow | Allow |
| low_mutation | Deny | Ask | Allow | Allow |
| file_mutation | Deny | Ask | Allow | Allow |
| shell_mutation | Deny | Ask | Classify | Allow |
| network | Deny | Ask | Classify | Allow |
| process | Deny | Ask | Classify | Allow |
| external_access | Deny | Ask | Ask | Ask (floor) |
| system_install | Deny | Ask | Ask | Ask (floor) |
| destructive | Deny | Deny | Deny | Deny |

The floors hold in every mode: external access (writes to other systems, MCP tools,
pushes, uploads) and system installs always reach a person.

**5. Uncertain is never allowed.** A shell command the classifier cannot read (a program
name computed when it runs, code given to an interpreter, decoded text run as a script,
text it could not parse; `ShellRisk.uncertain`) is rated the highest risk it could be
(destructive where it could delete, so denied), and where the mode or a rule would
allow it or let the auto classifier vet it, it asks a person instead — in `full_access`
too (law 12: where risk is uncertain, the answer is Ask).
"""

from __future__ import annotations

import functools
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Final

from ..tools import PROTECTED_PATHS, SafetyMode, Tool, ToolDefinitionError
from ._risk import DecisionKind, PolicyDecision, RiskClass
from ._rules import PolicyRule, PolicyRules

if TYPE_CHECKING:  # the shell's parser and tables load with the first shell command
    from ._shell_risk import ShellRisk

__all__ = ["CallRisk", "PolicyEngine", "mode_default"]

R = RiskClass
_A: Final[DecisionKind] = "allow"
_Q: Final[DecisionKind] = "ask"
_C: Final[DecisionKind] = "classify"
_D: Final[DecisionKind] = "deny"

_MODE_TABLE: Final[dict[SafetyMode, dict[RiskClass, DecisionKind]]] = {
    SafetyMode.READ_ONLY: {risk: (_A if risk is R.READ_ONLY else _D) for risk in RiskClass},
    SafetyMode.ASK: {risk: (_A if risk is R.READ_ONLY else _Q) for risk in RiskClass}
    | {R.DESTRUCTIVE: _D},
    SafetyMode.AUTO: {
        R.READ_ONLY: _A,
        R.LOW_MUTATION: _A,
        R.FILE_MUTATION: _A,
        R.SHELL_MUTATION: _C,
        R.NETWORK: _C,
        R.PROCESS: _C,
        R.EXTERNAL_ACCESS: _Q,
        R.SYSTEM_INSTALL: _Q,
        R.DESTRUCTIVE: _D,
    },
    SafetyMode.FULL_ACCESS: {risk: _A for risk in RiskClass}
    | {R.EXTERNAL_ACCESS: _Q, R.SYSTEM_INSTALL: _Q, R.DESTRUCTIVE: _D},
}
#: The same table by the members' values: a member's hash is a Python call, a string's is
#: not, and the engine reads the table for every call.
_BY_VALUE: Final[dict[str, dict[str, DecisionKind]]] = {
    mode._value_: {risk._value_: kind for risk, kind in row.items()}
    for mode, row in _MODE_TABLE.items()
}
#: Risks that reach a person in every mode, whatever a rule says.
_FLOORS: Final = frozenset({R.EXTERNAL_ACCESS, R.SYSTEM_INSTALL})
_STRICTNESS: Final[dict[DecisionKind, int]] = {_A: 0, _C: 1, _Q: 2, _D: 3}


def mode_default(mode: SafetyMode, risk: RiskClass) -> DecisionKind:
    """What `mode` decides for a call of `risk` when no rule matches (the table above)."""
    return _MODE_TABLE[mode][risk]


@dataclass(frozen=True, slots=True)
class CallRisk:
    """A call's risk class and why; `shell` is the classification of the shell command
    the call runs (`Tool.command_of`), `paths` the workspace paths it names
    (`Tool.paths_of`, for path rules)."""

    risk: RiskClass
    reason: str
    shell: ShellRisk | None = None
    paths: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Declared:
    """What a tool declares of one call, read once; `invalid` says why a declaration
    could not be read (the call is then denied)."""

    risk: RiskClass | None = None
    command: str | None = None
    paths: tuple[str, ...] = ()
    read_only: bool = False
    invalid: str | None = None


def _declared(tool_name: str, tool: Tool | None, arguments: Mapping[str, Any]) -> _Declared:
    """The tool's declarations for this call (`Tool.risk_of`, `command_of`, `paths_of`,
    `read_only`). No tool declares nothing. A declaration that is no risk class, or
    that raises (an object lacking a member of `Tool` too), is `invalid`: law 3, policy
    fails closed. (No `isinstance(tool, Tool)`: a runtime protocol check costs more than
    the rest of a read's gate; `Registry.add` checks the members once.)"""
    if tool is None:
        return _Declared()
    try:
        risk: object = tool.risk_of(arguments)
        command = tool.command_of(arguments)
        paths = tuple(tool.paths_of(arguments))
        read_only = tool.read_only is True
    except ToolDefinitionError as error:
        return _Declared(invalid=str(error))
    except Exception as error:  # a declaration that crashes rates nothing: deny
        return _Declared(
            invalid=f"the tool `{tool_name}` could not rate this call "
            f"({type(error).__name__}: {error}); fix its `risk_of`, `command_of` or `paths_of`"
        )
    if risk is not None and not isinstance(risk, RiskClass):
        try:
            risk = RiskClass.parse(str(risk))
        except ValueError as error:
            return _Declared(
                invalid=f"the tool `{tool_name}` declares an invalid risk: {error}; fix its `risk`"
            )
    if command is not None and not isinstance(command, str):
        return _Declared(
            invalid=f"the tool `{tool_name}` names a shell command that is no string "
            f"({command!r}); fix its `command_of`"
        )
    return _Declared(risk, command, tuple(p for p in paths if isinstance(p, str)), read_only)


def _workspace_parts(path: str, workspace: str | None) -> tuple[str, ...] | None:
    """`path` (as a command wrote it) as parts relative to the workspace root, or `None`
    when it lies outside it or is only known when the command runs."""
    if not path or path.startswith(("~", "$")) or "`" in path:
        return None
    norm = posixpath.normpath(path)
    if norm.startswith("/"):
        if workspace is None:
            return None
        root = posixpath.normpath(workspace)
        if norm != root and not norm.startswith(root.rstrip("/") + "/"):
            return None
        norm = posixpath.relpath(norm, root)
    if norm == "." or norm == ".." or norm.startswith("../"):
        return None
    return PurePosixPath(norm).parts


def _never_allow_uncertain(decision: PolicyDecision, why: str) -> PolicyDecision:
    """Law 12: an uncertain command is never allowed, nor left to the auto classifier."""
    if decision.kind == _A or decision.to_classifier:
        return PolicyDecision.ask(
            decision.risk,
            f"uncertain, so a person decides in every mode: {why} ({decision.reason})",
        )
    return decision


@functools.lru_cache(maxsize=64)
def _parts_of(protected: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The protected paths as path components: parsed once per set (a run without an
    engine of its own builds one over its jail's, the same set run after run)."""
    return tuple(PurePosixPath(p).parts for p in protected)


class PolicyEngine:
    """Decides one call at a time from its risk, the live safety mode and the user's
    `rules` (see the module docstring). `workspace`, the directory shell commands run
    in, lets the shell classifier count absolute paths inside it as inside; `protected`
    are the paths (relative to the workspace, as in `Jail.protected`) no shell command
    may write."""

    __slots__ = ("_protected", "_rules", "_workspace")

    def __init__(
        self,
        rules: PolicyRules | None = None,
        *,
        workspace: str | os.PathLike[str] | None = None,
        protected: tuple[str, ...] = PROTECTED_PATHS,
    ) -> None:
        self._rules = rules if rules is not None else PolicyRules()
        self._workspace = os.fspath(workspace) if workspace is not None else None
        self._protected = _parts_of(tuple(protected))

    @property
    def rules(self) -> PolicyRules:
        return self._rules

    def assess(self, tool_name: str, arguments: Mapping[str, Any], tool: Tool | None) -> CallRisk:
        """The call's risk class (step 1 of the module docstring), from what `tool`
        declares. Never raises: a tool whose declaration is invalid is assessed as
        external access (and `decide` denies it)."""
        return self._assess(tool_name, arguments, _declared(tool_name, tool, arguments))

    def _assess(
        self, tool_name: str, arguments: Mapping[str, Any], declared: _Declared
    ) -> CallRisk:
        if declared.invalid is not None:
            return CallRisk(R.EXTERNAL_ACCESS, declared.invalid)
        risk, paths = declared.risk, declared.paths
        if declared.command is not None:
            call = self._shell(declared.command)
            if risk is not None and risk.rank > call.risk.rank:
                return CallRisk(
                    risk,
                    f"`{tool_name}` rates this call {risk.value}: {call.reason}",
                    shell=call.shell,
                )
            return call
        if risk is not None:
            if risk is R.FILE_MUTATION:
                shown = ", ".join(f"`{p}`" for p in paths) or "files"
                return CallRisk(risk, f"`{tool_name}` writes {shown}", paths=paths)
            return CallRisk(risk, f"`{tool_name}` declares the risk {risk.value}", paths=paths)
        if declared.read_only:
            return CallRisk(R.READ_ONLY, f"`{tool_name}` is read-only", paths=paths)
        return CallRisk(
            R.EXTERNAL_ACCESS,
            f"`{tool_name}` declares no risk class, so it is treated as external access",
            paths=paths,
        )

    def decide(
        self, tool_name: str, arguments: Mapping[str, Any], tool: Tool | None, mode: SafetyMode
    ) -> PolicyDecision:
        """Allow, Ask, Classify or Deny the call in `mode` (the live mode, read when the
        call is gated). Never raises: a tool with an invalid declaration is denied."""
        declared = _declared(tool_name, tool, arguments)
        if declared.invalid is not None:
            return PolicyDecision.deny(R.EXTERNAL_ACCESS, declared.invalid)
        call = self._assess(tool_name, arguments, declared)
        if call.risk is R.DESTRUCTIVE:
            uncertain = "" if call.shell is None or call.shell.uncertain is None else "uncertain, "
            return PolicyDecision.deny(
                call.risk, f"{uncertain}destructive, so denied in every mode: {call.reason}"
            )
        if call.shell is not None:
            hit = self._protected_write(call.shell)
            if hit is not None:
                return PolicyDecision.deny(
                    call.risk,
                    f"writes `{hit}`, a protected path no command may change in any mode: "
                    f"{call.reason}",
                )
        match = self._rules.first_match(
            tool_name, command=declared.command, shell=call.shell, paths=call.paths
        )
        if match is not None:
            decision = self._by_rule(match[0], match[1], call, mode)
        else:
            decision = self._by_mode(call, mode)
        if call.shell is not None and call.shell.uncertain is not None:
            return _never_allow_uncertain(decision, call.shell.uncertain)
        return decision

    # ── internals ────────────────────────────────────────────────────────────────

    def _shell(self, command: str) -> CallRisk:
        from ._shell_risk import classify_command

        shell = classify_command(command, workspace=self._workspace)
        return CallRisk(shell.risk, shell.reason, shell=shell)

    def _protected_write(self, shell: ShellRisk) -> str | None:
        """The first path the command writes that a protected path covers (or that holds
        one: `mv .git x`), or `None`."""
        for written in shell.writes:
            parts = _workspace_parts(written, self._workspace)
            if parts is None:
                continue
            for protected in self._protected:
                size = min(len(parts), len(protected))
                if size and all(fnmatchcase(protected[i], parts[i]) for i in range(size)):
                    return written
        return None

    def _by_mode(self, call: CallRisk, mode: SafetyMode) -> PolicyDecision:
        mode_name, risk = mode._value_, call.risk._value_
        kind = _BY_VALUE[mode_name][risk]
        if kind == _A:
            return PolicyDecision.allow(call.risk, f"{mode_name} mode allows {risk}: {call.reason}")
        if kind == _C:
            return PolicyDecision.classify(call.risk, f"auto mode vets {risk}: {call.reason}")
        if kind == _Q:
            if mode is SafetyMode.ASK:
                why = f"ask mode asks before {risk}"
            else:
                why = f"{risk} needs approval in every mode"
            return PolicyDecision.ask(call.risk, f"{why}: {call.reason}")
        return PolicyDecision.deny(
            call.risk,
            f"read-only mode allows no {risk}: {call.reason}; switch to another mode to allow it",
        )

    def _by_rule(
        self, index: int, rule: PolicyRule, call: CallRisk, mode: SafetyMode
    ) -> PolicyDecision:
        named = f"the rule policy.rules[{index}] ({rule.describe()})"
        why = f": {rule.reason}" if rule.reason else ""
        if rule.action == "deny":
            return PolicyDecision.deny(call.risk, f"denied by {named}{why}")
        default = self._by_mode(call, mode)
        if rule.action == "ask":
            if _STRICTNESS[default.kind] > _STRICTNESS[_Q]:
                return default
            return PolicyDecision.ask(call.risk, f"{named} asks{why}: {call.reason}")
        if mode is SafetyMode.READ_ONLY and call.risk is not R.READ_ONLY:
            return PolicyDecision.deny(
                call.risk, f"read-only mode allows no {call.risk.value}, whatever {named} says"
            )
        if call.risk in _FLOORS:
            return PolicyDecision.ask(
                call.risk, f"{call.risk.value} needs approval in every mode, even with {named}"
            )
        return PolicyDecision.allow(call.risk, f"allowed by {named}{why}")
