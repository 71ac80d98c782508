"""`RunServices`: what a run gives its tool calls, opened with the run and closed with it.

The loop builds every call's `ExecContext` from three bundles (`ExecContext.assemble`):
the step's signals (cancel token, background token, web byte budget), where the call was
dispatched (the jail, the phase, the live safety mode, the transcript's length), and the
run's services, which live here: the notify channel detached work reports through, the
background jobs, the task checklist, the file snapshots, the scratchpad, the user's goal,
and the taint flow (what the interlock watches beyond one call). A call's context is
assembled only if its tool reads one (`pending_context`): most calls' tools take none.

The first call whose tool reads its context creates the session's scratchpad (a run whose
tools take no context makes no directory); closing kills whatever background work is left
(a run never leaves a process behind, whether it finished, failed, suspended or was
cancelled).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..conversation import UserMessage
from ..tools import (
    BackgroundJobs,
    CallSite,
    ExecContext,
    Notice,
    Notifier,
    PendingContext,
    StepSignals,
    TaskBroker,
    ToolServices,
    UserGoal,
    WebBudget,
)
from ._run_parts import weakly
from ._summary import SUMMARY_HEAD
from ._taint_flow import TaintFlow, shell_holds_network

if TYPE_CHECKING:
    from ..events import AgUiContext
    from ..state import RunState
    from ..store import FileCheckpoints
    from ._agent import Agent
    from ._context import RunContext
    from ._mailbox_route import RunMailbox

__all__ = ["SCRATCH_SUBDIR", "RunServices"]

_log = logging.getLogger("tiller.taint")

#: Where sessions' scratchpads live, relative to the jail root.
SCRATCH_SUBDIR: Final = Path(".tiller") / "scratch"

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def shell_may_write(command: str, root: Path) -> bool:
    """Whether a shell command needs a workspace snapshot first: unless the policy's
    classification is sure it only reads (a command it could not parse may write)."""
    from ..policy import RiskClass, classify_command

    rated = classify_command(command, workspace=root)
    return not (rated.parsed and rated.risk is RiskClass.READ_ONLY)


def _directory_name(session_id: str) -> str:
    """A thread id (it comes from clients) as one safe directory name."""
    name = _UNSAFE.sub("_", session_id)[:100].strip(".")
    return name or "session"


class RunServices:
    """One run's tool services (see the module docstring)."""

    def __init__(
        self, agent: Agent, run_ctx: RunContext, agui: AgUiContext[Any], state: RunState
    ) -> None:
        self._agent = agent
        self._run_ctx = run_ctx
        self._agui = agui
        self._state = state
        self.notifier = Notifier()
        # Commands sent to the background live as long as the run, no longer; when one
        # exits it posts a note through the notifier, read at the next step.
        self.jobs = BackgroundJobs(self.notifier)
        # What the interlock watches beyond one call: the jobs that hold the network, the
        # files this run reads and writes (their taint outlives the run).
        self.taint_flow = TaintFlow(
            run_ctx.jail.root,
            run_ctx.interlock,
            self.jobs,
            run_id=state.run_id,
            # (An unsandboxed shell, accepted where bwrap cannot run, holds the network.)
            network=shell_holds_network(run_ctx.jail),
        )
        # With a store, every file mutation is snapshotted first, so `tiller rewind` can
        # put the workspace back; a shell command, unless the policy rates it read-only.
        self.snapshots: FileCheckpoints | None = None
        if run_ctx.store is not None:
            from ..store import FileCheckpoints  # loaded by the first run that has a store

            self.snapshots = FileCheckpoints(
                run_ctx.store, run_id=state.run_id, command_may_write=shell_may_write
            )
        self.scratchpad: Path | None = None
        self._pad_tried = False
        self._event_loop: asyncio.AbstractEventLoop | None = None
        # The checklist lives in the state, so a resumed run (another process, maybe)
        # goes on with it; the broker is its one writer and tells observers each change.
        self.tasks = TaskBroker(publish=weakly(self._keep_tasks), emit=agui.emit)
        self.tasks.seed(state.tasks)
        self._goal = UserGoal()
        self._goal_seen = 0
        self._cached_services: ToolServices | None = None
        # The gate's classifier and approval broker, for tools that vet or ask themselves
        # (set by the loop once its gate exists: `attach_policy`).
        self._classifier: Any = None
        self._approval: Any = None
        # What starts the run's subagents (set by the loop when its agent can).
        self._subagents: Any = None
        #: The run's mailbox (its identity; delivery into its steps), if it has one.
        self.mail: RunMailbox | None = (
            run_ctx.mailbox.attach(state) if run_ctx.mailbox is not None else None
        )

    def attach_policy(self, *, classifier: Any, approval: Any) -> None:
        """Give the run's tool calls the gate's classifier and approval broker."""
        self._classifier = classifier
        self._approval = approval
        self._cached_services = None

    def attach_subagents(self, subagents: Any) -> None:
        """Give the run's tool calls what starts its subagents (the `agent` tool's)."""
        self._subagents = subagents
        self._cached_services = None

    def _keep_tasks(self, snapshot: list[dict[str, Any]]) -> None:
        """The broker changed the checklist: keep it in the state (it is checkpointed with
        the run) and publish it in the AG-UI state document, on the run's loop (the
        broker may be called from another thread; the state stream belongs to the loop)."""
        self._state.record_checklist(snapshot)  # with its place, for `tiller rewind`
        event_loop = self._event_loop
        if event_loop is None or _running_loop() is event_loop:
            self._agui.set_runtime_state("tasks", snapshot)
        else:
            event_loop.call_soon_threadsafe(self._agui.set_runtime_state, "tasks", snapshot)

    async def open(self) -> None:
        """Show a resumed run's checklist. (The session's scratchpad is made when the
        run's first tool call runs: a run that calls no tool makes no directory.)"""
        self._event_loop = asyncio.get_running_loop()
        if self._state.tasks:
            self._agui.set_runtime_state("tasks", self._state.tasks)

    async def close(self) -> None:
        """Stop what the run started and did not finish: every background job is killed
        with its process tree. Shielded: a cancelled run must still leave nothing behind."""
        if self.jobs.list():
            await asyncio.shield(self.jobs.close())
        else:
            await self.jobs.close()  # nothing to kill: no task to shield
        # What the jobs wrote until they were killed carries the run's taint too. A
        # failure to list it must not stop the run's cleanup: it is logged.
        try:
            await asyncio.shield(self.taint_flow.close(self._state.taint_flags))
        except Exception:
            _log.exception("listing the files this run wrote in the taint index failed")

    def _make_scratchpad(self) -> Path | None:
        # The root is already real and the name has no separators or dots to resolve, so
        # the path is final; one stat when it exists (most runs of a thread after the first).
        root = self._run_ctx.jail.root
        pad = root / SCRATCH_SUBDIR / _directory_name(self._state.thread_id)
        if os.path.isdir(pad):
            return pad
        try:
            pad.mkdir(parents=True, exist_ok=True)
            ignore = root / SCRATCH_SUBDIR.parts[0] / ".gitignore"
            if not ignore.exists():
                # The runtime's own files are never part of the user's project.
                ignore.write_text("*\n", encoding="utf-8")
        except OSError:
            return None  # a read-only workspace: the run goes on without a scratchpad
        return pad

    # ── per call ─────────────────────────────────────────────────────────────────

    def begin_step(self) -> None:
        """A step's calls are about to be gated: a detach from now on is this step's."""
        self._run_ctx.detach.begin_turn()

    def signals_for_step(self) -> StepSignals:
        """The signals one step's calls share (made when its first call's context is)."""
        return StepSignals(
            token=self._agui.cancel_token,
            background=self._run_ctx.detach.token(),
            web_bytes=WebBudget(),
        )

    def _tool_services(self) -> ToolServices:
        """The run's services for its calls: built once, again only when the goal moved."""
        goal = self.goal()
        cached = self._cached_services
        if cached is not None and cached.goal is goal and self._pad_tried:
            return cached
        run_ctx = self._run_ctx
        if not self._pad_tried and not run_ctx.jail.root_pending:
            # The first call that can reach the workspace: now it may need its scratchpad.
            self._pad_tried = True
            self.scratchpad = self._make_scratchpad()
            cached = None
        cached = self._cached_services = ToolServices(
            emit=self._agui.emit,
            state_access=self._agui,
            notify=self.notifier,
            config=self._agent.config,
            model_id=getattr(self._agent.model, "name", None),
            session_id=self._state.thread_id,
            scratchpad=self.scratchpad,
            goal=goal,
            classifier=self._classifier,
            approval=self._approval,
            questions=run_ctx.questions,
            tasks=self.tasks,
            jobs=self.jobs,
            snapshots=self.snapshots,
            mailbox=(
                self.mail.mailer(self._agent.registry, network=run_ctx.jail.network)
                if self.mail is not None
                else None
            ),
            subagents=self._subagents,
        )
        return cached

    def context_for(
        self, call_id: str, step: int, signals: StepSignals, tool: Any = None
    ) -> ExecContext:
        """The `ExecContext` of one call to `tool`, assembled now (so it reads the live
        mode now). A scratch jail's root is made here, before the first call that can
        reach it: a function not given its context cannot."""
        run_ctx = self._run_ctx
        if getattr(tool, "takes_context", True):
            run_ctx.jail.materialize()
        state = self._state
        services = self._tool_services()
        site = CallSite(
            jail=run_ctx.jail,
            phase=run_ctx.phase,
            safety_mode=run_ctx.jail.safety.mode,
            message_index=len(state.messages),
        )
        return ExecContext.assemble(
            step=step, call_id=call_id, signals=signals, dispatch=site, services=services
        )

    def pending_context(
        self, call_id: str, step: int, signals: Callable[[], StepSignals]
    ) -> PendingContext:
        """The call's `ExecContext`, assembled (`context_for`) only if its tool reads it,
        with `signals()`, the step's, then."""
        return PendingContext(
            self._agui.cancel_token, lambda: self.context_for(call_id, step, signals())
        )

    def goal(self) -> UserGoal:
        """The user's goal, recomputed only when a person's text arrived since: most
        turns add only tool results, and a step's cost must not grow with history."""
        messages = self._state.messages
        if len(messages) < self._goal_seen:  # history was rewritten (compaction, rewind)
            self._goal_seen = 0
        if any(
            isinstance(message, UserMessage) and message.text
            for message in messages[self._goal_seen :]
        ):
            state = self._state
            summary = next(
                (t for t in reversed(state.not_from_person) if t.startswith(SUMMARY_HEAD)), ""
            )
            self._goal = UserGoal.from_messages(
                messages, summary=summary, not_from_person=state.not_from_person
            )
        self._goal_seen = len(messages)
        return self._goal

    def take_notices(self) -> list[Notice]:
        """Notes from detached work, for the top of the next step."""
        return self.notifier.drain()
