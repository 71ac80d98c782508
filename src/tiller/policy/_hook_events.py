"""What hooks are told and what they answer: the events (`PreToolEvent`,
`PostToolEvent`, `SessionEndEvent`, each with the JSON `payload()` a shell hook reads on
stdin), a `pre_tool` hook's `HookVerdict`, the `HookOutcome` of the whole set, and the
checks every kind of hook applies to its settings."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, TypeAlias

import orjson

from ..errors import UsageError
from ._risk import RiskClass

__all__ = [
    "DEFAULT_HOOK_TIMEOUT",
    "HookEvent",
    "HookKind",
    "HookOutcome",
    "HookVerdict",
    "PostToolEvent",
    "PreToolEvent",
    "SessionEndEvent",
]

HookKind = Literal["pre_tool", "post_tool", "session_end"]

#: Seconds a hook may run unless its configuration says otherwise.
DEFAULT_HOOK_TIMEOUT: Final = 10.0

#: How many characters of a hook's output (or an exception's text) go into a reason.
_REASON_LIMIT: Final = 2000


def _jsonable(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, default=str))


@dataclass(frozen=True, slots=True)
class PreToolEvent:
    """A call about to run. `taint` is what the conversation holds (`private`,
    `untrusted`); `risk` the call's class, when the gate has worked it out."""

    kind: ClassVar[HookKind] = "pre_tool"

    tool: str
    arguments: Mapping[str, Any]
    call_id: str
    run_id: str
    thread_id: str
    workspace: Path
    taint: tuple[str, ...] = ()
    risk: RiskClass | None = None

    def payload(self) -> dict[str, Any]:
        """What a shell hook reads on stdin, as a dict."""
        return {
            "hook": self.kind,
            "tool": self.tool,
            "arguments": _jsonable(self.arguments),
            "call_id": self.call_id,
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "workspace": str(self.workspace),
            "taint": list(self.taint),
            "risk": None if self.risk is None else self.risk.value,
        }


@dataclass(frozen=True, slots=True)
class PostToolEvent:
    """A call that ran: its result's content and whether it was an error."""

    kind: ClassVar[HookKind] = "post_tool"

    tool: str
    arguments: Mapping[str, Any]
    call_id: str
    run_id: str
    thread_id: str
    workspace: Path
    result: str
    is_error: bool
    taint: tuple[str, ...] = ()

    def payload(self) -> dict[str, Any]:
        return {
            "hook": self.kind,
            "tool": self.tool,
            "arguments": _jsonable(self.arguments),
            "call_id": self.call_id,
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "workspace": str(self.workspace),
            "taint": list(self.taint),
            "result": self.result,
            "is_error": self.is_error,
        }


@dataclass(frozen=True, slots=True)
class SessionEndEvent:
    """A run that stopped, and why (a `StopCause` value such as `completed`)."""

    kind: ClassVar[HookKind] = "session_end"

    run_id: str
    thread_id: str
    workspace: Path
    stop_cause: str

    def payload(self) -> dict[str, Any]:
        return {
            "hook": self.kind,
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "workspace": str(self.workspace),
            "stop_cause": self.stop_cause,
        }


HookEvent: TypeAlias = PreToolEvent | PostToolEvent | SessionEndEvent


# ── what hooks answer ───────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class HookVerdict:
    """A `pre_tool` hook's answer. Build with `HookVerdict.allow()` or `.deny(reason)`."""

    allowed: bool
    reason: str = ""

    @property
    def kind(self) -> Literal["allow", "deny"]:
        """The verdicts' vocabulary (`tiller.policy._verdict`): a hook allows or denies."""
        return "allow" if self.allowed else "deny"

    @property
    def by(self) -> str:
        """Who decided: a hook (the set names which one, on its `HookOutcome`)."""
        return "hook"

    @classmethod
    def allow(cls) -> HookVerdict:
        return cls(True)

    @classmethod
    def deny(cls, reason: str) -> HookVerdict:
        return cls(False, reason)


@dataclass(frozen=True, slots=True)
class HookOutcome:
    """What the `pre_tool` hooks concluded, and, for a denial, which hook refused (`hook`,
    its name) and why; the gate writes "Refused by hook <hook>: <reason>"."""

    allowed: bool
    reason: str = ""
    hook: str = ""

    @property
    def kind(self) -> Literal["allow", "deny"]:
        """The verdicts' vocabulary (`tiller.policy._verdict`): the hooks allow or deny."""
        return "allow" if self.allowed else "deny"

    @property
    def by(self) -> str:
        """Who decided: `hook:<name>` for the hook that denied; `hook` when all allowed."""
        return f"hook:{self.hook}" if self.hook else "hook"

    @classmethod
    def allow(cls) -> HookOutcome:
        return cls(True)


# ── settings every hook checks ──────────────────────────────────────────────────


def check_globs(tools: Sequence[str] | None) -> tuple[str, ...] | None:
    if tools is None:
        return None
    if isinstance(tools, str):
        raise UsageError("tools must be a list of tool-name globs, not a single string")
    globs = tuple(tools)
    if not globs or not all(isinstance(each, str) and each for each in globs):
        raise UsageError(
            "tools must list at least one non-empty tool-name glob; leave it out to watch "
            "every tool"
        )
    return globs


def check_timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise UsageError(f"a hook's timeout is a number of seconds, not {timeout!r}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"a hook's timeout must be a positive number of seconds, not {timeout}")
    return float(timeout)


def watches_tool(globs: tuple[str, ...] | None, tool: str | None) -> bool:
    if globs is None:
        return True
    return tool is not None and any(fnmatch.fnmatchcase(tool, glob) for glob in globs)


def clip_output(text: str) -> str:
    text = text.strip()
    if len(text) <= _REASON_LIMIT:
        return text
    return text[:_REASON_LIMIT].rstrip() + " … (clipped)"
