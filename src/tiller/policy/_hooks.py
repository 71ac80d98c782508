"""Hooks: the user's own checks around tool calls, which can narrow policy, never widen it.

A run has one `HookSet` with three kinds of hook:

- `pre_tool` decides. It runs after the interlock and before the policy engine, so it can
  refuse a call the engine would allow, but never allow one the engine or a person would
  refuse. It fails closed (law 3): a shell hook allows only by exiting 0; exit 2 denies
  with its output as the reason; any other exit, a hook that cannot start, a timeout or a
  signal denies too. A Python hook allows by returning `None` or `True`; `False`,
  `HookVerdict.deny(reason)`, any other value, or an exception denies. Hooks run in order
  and the first denial wins: the later ones are not run. The gate reports *who* refused
  (`HookOutcome.hook`) and writes the "Refused by hook <name>: ..." prefix itself (law 4).
- `post_tool` and `session_end` observe. Every failure of theirs is logged on the
  `tiller.hooks` logger and swallowed: a broken notifier must not break a run.

Hooks are `ShellHook`s (a `bash -c` command with the event as JSON on stdin, in its own
process group, killed when done, timed out or cancelled; see `_shell_hook.py`) or Python
callables (`FunctionHook`). `HookSet.from_config` reads the `[hooks]` section of
`tiller.toml`; `merge` adds the hooks made in code. A cancelled run kills its running
hook and the cancellation goes on propagating; a cancellation a Python hook raised by
itself (its task was not cancelled) counts as that hook's failure.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeAlias

from ..conversation import Taint
from ..errors import UsageError
from ._hook_events import (
    DEFAULT_HOOK_TIMEOUT,
    HookEvent,
    HookKind,
    HookOutcome,
    HookVerdict,
    PostToolEvent,
    PreToolEvent,
    SessionEndEvent,
    check_globs,
    check_timeout,
    clip_output,
    watches_tool,
)
from ._interlock import taint_names
from ._risk import RiskClass
from ._shell_hook import ShellHook

__all__ = ["FunctionHook", "HookConfigError", "HookLike", "HookSet"]

_KINDS: Final[tuple[HookKind, ...]] = ("pre_tool", "post_tool", "session_end")
_ENTRY_KEYS: Final = ("command", "name", "timeout", "tools")

_logger: Final = logging.getLogger("tiller.hooks")


class HookConfigError(UsageError):
    """The `[hooks]` section of `tiller.toml` is wrong; `key` names the bad entry (for
    example `hooks.pre_tool[1].timeout`) and the message says what is allowed."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def _taint_names(taint: Taint | Iterable[str]) -> tuple[str, ...]:
    return tuple(taint_names(taint)) if isinstance(taint, Taint) else tuple(taint)


def _name_of(fn: Callable[..., object]) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


@dataclass(frozen=True, slots=True)
class FunctionHook:
    """A Python callable, sync or async, given the event (`PreToolEvent`, ...).

    For `pre_tool` it returns `None`/`True` (allow), `False` or `HookVerdict.deny(...)`
    (deny); raising denies. A sync callable runs on the event loop, so keep it quick; an
    async one is given `timeout` seconds (10 unless set; None: no limit). A bare callable
    passed to `HookSet` becomes a `FunctionHook` watching every tool.
    """

    fn: Callable[[Any], object]
    timeout: float | None = DEFAULT_HOOK_TIMEOUT
    tools: tuple[str, ...] | None = None
    name: str = ""

    def __init__(
        self,
        fn: Callable[[Any], object],
        *,
        timeout: float | None = DEFAULT_HOOK_TIMEOUT,
        tools: Sequence[str] | None = None,
        name: str = "",
    ) -> None:
        if not callable(fn):
            raise UsageError(f"a function hook needs a callable, not {fn!r}")
        object.__setattr__(self, "fn", fn)
        object.__setattr__(self, "timeout", None if timeout is None else check_timeout(timeout))
        object.__setattr__(self, "tools", check_globs(tools))
        object.__setattr__(self, "name", name or _name_of(fn))

    def watches(self, tool: str | None) -> bool:
        return watches_tool(self.tools, tool)

    async def decide(self, event: PreToolEvent) -> HookVerdict:
        try:
            answer = await self._call(event)
        except _HookFailed as failed:
            return HookVerdict.deny(
                f"hook {self.name} {failed}; a pre_tool hook that fails denies the call"
            )
        if answer is None or answer is True:
            return HookVerdict.allow()
        if answer is False:
            return HookVerdict.deny("the hook denied the call")
        if isinstance(answer, HookVerdict):
            if answer.allowed:
                return answer
            return HookVerdict.deny(answer.reason.strip() or "the hook denied the call")
        return HookVerdict.deny(
            f"hook {self.name} returned {type(answer).__name__}, which is no answer (a "
            "pre_tool hook returns a HookVerdict, True, False or None), so it denies"
        )

    async def observe(self, event: PostToolEvent | SessionEndEvent) -> str | None:
        try:
            await self._call(event)
        except _HookFailed as failed:
            return str(failed)
        return None

    async def _call(self, event: HookEvent) -> object:
        """The callable's answer, awaited if it is awaitable; `_HookFailed` for an
        exception, a timeout or a cancellation that did not come from our caller."""
        deadline = asyncio.timeout(self.timeout)
        try:
            answer = self.fn(event)
            if not inspect.isawaitable(answer):
                return answer
            async with deadline:
                return await _awaited(answer)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the run was cancelled: let it go on
            raise _HookFailed("was cancelled from inside") from None
        except TimeoutError as exc:
            if deadline.expired():
                raise _HookFailed(f"timed out after {self.timeout:g} s") from None
            raise _HookFailed(f"raised {_exception_text(exc)}") from exc
        except Exception as exc:
            raise _HookFailed(f"raised {_exception_text(exc)}") from exc


async def _awaited(answer: Awaitable[object]) -> object:
    return await answer


def _exception_text(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {clip_output(text)}" if text else type(exc).__name__


class _HookFailed(Exception):
    """A Python hook failed (the message says how, after "hook <name> ...")."""


# ── the run's hooks ─────────────────────────────────────────────────────────────

#: What a `HookSet` takes for each kind: hooks, or bare callables (which become
#: `FunctionHook`s watching every tool).
HookLike: TypeAlias = ShellHook | FunctionHook | Callable[[Any], object]


def _as_hook(each: HookLike) -> ShellHook | FunctionHook:
    if isinstance(each, ShellHook | FunctionHook):
        return each
    if callable(each):
        return FunctionHook(each)
    raise UsageError(f"a hook is a ShellHook, a FunctionHook or a callable, not {each!r}")


@dataclass(frozen=True, slots=True)
class HookSet:
    """The run's hooks, by kind, in the order they run. Immutable; `merge` combines
    the hooks of `tiller.toml` (`from_config`) with those made in code."""

    pre_tool_hooks: tuple[ShellHook | FunctionHook, ...] = ()
    post_tool_hooks: tuple[ShellHook | FunctionHook, ...] = ()
    session_end_hooks: tuple[ShellHook | FunctionHook, ...] = ()

    def __init__(
        self,
        *,
        pre_tool: Iterable[HookLike] = (),
        post_tool: Iterable[HookLike] = (),
        session_end: Iterable[HookLike] = (),
    ) -> None:
        ended = tuple(_as_hook(each) for each in session_end)
        if any(hook.tools is not None for hook in ended):
            raise UsageError("session_end hooks watch no tool; drop their `tools`")
        object.__setattr__(self, "pre_tool_hooks", tuple(_as_hook(each) for each in pre_tool))
        object.__setattr__(self, "post_tool_hooks", tuple(_as_hook(each) for each in post_tool))
        object.__setattr__(self, "session_end_hooks", ended)

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> HookSet:
        """The `[hooks]` section of `tiller.toml`:

        ```toml
        [hooks]
        pre_tool = [{ command = "./check.sh", timeout = 5, tools = ["execute_command"] }]
        post_tool = [{ command = "logger -t tiller", name = "syslog" }]
        session_end = [{ command = "notify-send done" }]
        ```

        Raises `HookConfigError` naming the bad entry.
        """
        if not isinstance(section, Mapping):
            raise HookConfigError("hooks", "must be a table of pre_tool, post_tool, session_end")
        unknown = sorted(str(key) for key in section if key not in _KINDS)
        if unknown:
            raise HookConfigError(
                f"hooks.{unknown[0]}",
                f"is not a kind of hook; the kinds are: {', '.join(_KINDS)}",
            )
        parsed: dict[str, list[HookLike]] = {}
        for kind in _KINDS:
            entries = section.get(kind, [])
            if not isinstance(entries, list):
                raise HookConfigError(
                    f"hooks.{kind}", 'must be a list of tables like [{ command = "..." }]'
                )
            parsed[kind] = [
                _parse_entry(kind, f"hooks.{kind}[{index}]", entry)
                for index, entry in enumerate(entries)
            ]
        return cls(
            pre_tool=parsed["pre_tool"],
            post_tool=parsed["post_tool"],
            session_end=parsed["session_end"],
        )

    def merge(self, other: HookSet) -> HookSet:
        """This set's hooks, then `other`'s, kind by kind."""
        return HookSet(
            pre_tool=self.pre_tool_hooks + other.pre_tool_hooks,
            post_tool=self.post_tool_hooks + other.post_tool_hooks,
            session_end=self.session_end_hooks + other.session_end_hooks,
        )

    def hooks(self, kind: HookKind) -> tuple[ShellHook | FunctionHook, ...]:
        return {
            "pre_tool": self.pre_tool_hooks,
            "post_tool": self.post_tool_hooks,
            "session_end": self.session_end_hooks,
        }[kind]

    def watches(self, kind: HookKind, tool: str | None = None) -> bool:
        """Whether any hook of `kind` would run (for `tool`), so the gate can skip
        building an event nobody reads."""
        return any(hook.watches(tool) for hook in self.hooks(kind))

    def __bool__(self) -> bool:
        return bool(self.pre_tool_hooks or self.post_tool_hooks or self.session_end_hooks)

    async def pre_tool(
        self,
        *,
        tool: str,
        arguments: Mapping[str, Any],
        call_id: str,
        run_id: str,
        thread_id: str,
        workspace: str | Path,
        taint: Taint | Iterable[str] = (),
        risk: RiskClass | None = None,
    ) -> HookOutcome:
        """Run the `pre_tool` hooks watching `tool`, in order, until one denies."""
        event = PreToolEvent(
            tool=tool,
            arguments=arguments,
            call_id=call_id,
            run_id=run_id,
            thread_id=thread_id,
            workspace=Path(workspace),
            taint=_taint_names(taint),
            risk=risk,
        )
        for hook in self.pre_tool_hooks:
            if not hook.watches(tool):
                continue
            try:
                verdict = await hook.decide(event)
            except Exception as exc:  # a bug of ours: still fail closed
                _logger.exception("pre_tool hook %s could not be run", hook.name)
                verdict = HookVerdict.deny(
                    f"hook {hook.name} could not be run ({_exception_text(exc)}); a pre_tool "
                    "hook that fails denies the call"
                )
            if not verdict.allowed:
                return HookOutcome(False, verdict.reason, hook.name)
        return HookOutcome.allow()

    async def post_tool(  # noqa: PLR0913 (the post_tool hook event: each field is one the hook reads)
        self,
        *,
        tool: str,
        arguments: Mapping[str, Any],
        call_id: str,
        run_id: str,
        thread_id: str,
        workspace: str | Path,
        result: str,
        is_error: bool,
        taint: Taint | Iterable[str] = (),
    ) -> None:
        """Tell the `post_tool` hooks watching `tool` how the call went. Never raises
        for a hook's failure (it is logged); a cancellation propagates."""
        event = PostToolEvent(
            tool=tool,
            arguments=arguments,
            call_id=call_id,
            run_id=run_id,
            thread_id=thread_id,
            workspace=Path(workspace),
            result=result,
            is_error=is_error,
            taint=_taint_names(taint),
        )
        await self._observe(self.post_tool_hooks, event, tool)

    async def session_end(
        self, *, run_id: str, thread_id: str, workspace: str | Path, stop_cause: object
    ) -> None:
        """Tell the `session_end` hooks the run stopped (`stop_cause`: a `StopCause` or
        its value). Never raises for a hook's failure; a cancellation propagates."""
        cause = getattr(stop_cause, "value", stop_cause)
        event = SessionEndEvent(
            run_id=run_id, thread_id=thread_id, workspace=Path(workspace), stop_cause=str(cause)
        )
        await self._observe(self.session_end_hooks, event, None)

    @staticmethod
    async def _observe(
        hooks: Sequence[ShellHook | FunctionHook],
        event: PostToolEvent | SessionEndEvent,
        tool: str | None,
    ) -> None:
        for hook in hooks:
            if tool is not None and not hook.watches(tool):
                continue
            try:
                failure = await hook.observe(event)
            except Exception:  # a bug of ours must not break the run either
                _logger.warning("%s hook %s failed", event.kind, hook.name, exc_info=True)
                continue
            if failure is not None:
                _logger.warning("%s hook %s %s (ignored)", event.kind, hook.name, failure)


def _parse_entry(kind: HookKind, key: str, entry: object) -> ShellHook:
    if not isinstance(entry, Mapping):
        raise HookConfigError(key, 'must be a table like { command = "..." }')
    unknown = sorted(str(name) for name in entry if name not in _ENTRY_KEYS)
    if unknown:
        allowed = [name for name in _ENTRY_KEYS if not (kind == "session_end" and name == "tools")]
        raise HookConfigError(
            f"{key}.{unknown[0]}", f"is not a hook setting; the settings are: {', '.join(allowed)}"
        )
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise HookConfigError(f"{key}.command", "is required: the shell command to run")
    name = entry.get("name", "")
    if not isinstance(name, str):
        raise HookConfigError(f"{key}.name", "must be a string")
    timeout = entry.get("timeout", DEFAULT_HOOK_TIMEOUT)
    try:
        checked = check_timeout(timeout)
    except UsageError:
        raise HookConfigError(
            f"{key}.timeout", f"must be a positive number of seconds, not {timeout!r}"
        ) from None
    tools = entry.get("tools")
    if tools is not None:
        if kind == "session_end":
            raise HookConfigError(f"{key}.tools", "session_end hooks watch no tool; drop it")
        if not isinstance(tools, list) or not tools:
            raise HookConfigError(
                f"{key}.tools",
                'must be a non-empty list of tool-name globs, like ["execute_command", "web_*"]',
            )
        for index, glob in enumerate(tools):
            if not isinstance(glob, str) or not glob:
                raise HookConfigError(f"{key}.tools[{index}]", "must be a non-empty string")
    return ShellHook(command, timeout=checked, tools=tools, name=name.strip())
