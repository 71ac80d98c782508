"""`RunContext`: what one run may touch and spend — per run, never fixed on the agent.

Many runs of one agent go side by side, each with its own jail, approver, budget, cancel
token, phase, steering queue and withheld tools. A `RunContext` is immutable: every
`with_*` builder returns a new one (copy-on-write), so a run in flight keeps the policy it
started with. The budget and the steering queue are *shared objects* on purpose: a nested
run spends from its parent's budget, and a person steers a run through its queue.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cancel import CancellationToken
from ..phase import Phase
from ..policy import Approver, AutoClassifier, HookSet, Interlock, PolicyEngine
from ..store import Bus
from ..tools import QuestionBroker, ToolCtx
from ._budget import Budget
from ._detach import DetachSwitch
from ._mailbox_route import MailboxRoute
from ._outbox_route import OutboxRoute
from ._steering import SteeringQueue
from ._subagent_types import SubagentConfig

__all__ = ["RunContext"]

_DEFAULT_SUBAGENTS = SubagentConfig()


@dataclass(slots=True, frozen=True)
class RunContext:
    """Per-run policy. Build with `RunContext.new(tools, approver)` or `.sandboxed(...)`.

    - `tools`: the jail and tool limits (`ToolCtx`).
    - `approver`: answers calls that need approval; None means such calls are `Blocked`
      ("this action needs approval and no approver is attached").
    - `budget`: ceilings and spending, shared by the run tree.
    - `cancel`: a token for this run or shared by a batch; the run works under a child.
    - `phase`: `EXECUTE`, or `PLAN` (writing tools hidden and refused).
    - `queued_input`: the steering queue.
    - `withheld`: tool names this run may not see or call.
    - `compact_at_tokens`: where compaction will trigger (used by the compaction issue).
    - `store`: the `Bus` for durable runs (with `RunOptions.checkpoint_bucket` set, the run
      is checkpointed at every step and each call's start and completion are recorded).
      With a store, file tools also snapshot what they change (`tiller rewind`).
    - `questions`: where `ask_user` questions go (None: "no one is available", DESIGN §3).
    - `detach`: the switch a person uses to send the running turn's long work to the
      background (shared, like the steering queue).
    - `policy`: the policy engine with the user's rules (None: the default engine). The
      live safety mode it reads is `tools.safety`.
    - `classifier`: vets Classify decisions (None: the run's own model, built when first
      needed).
    - `interlock`: the lethal-trifecta settings; `hooks`: the user's pre/post hooks;
      `outbox`: which tools are staged instead of executed.
    - `mailbox`: the run's place in the inter-agent mailbox (its identity, and whether it
      receives); None: no messages in or out.
    - `subagents`: the subagent types the `agent` tool may start, and the limits on them
      (at most 10 children at once, 20 minutes each, by default).
    - `pinned_policy`: the run's configuration as it was read when the run started
      (`tiller.pinned_policy`, JSON-ready), recorded in every checkpoint so approvals,
      resumes and served requests use it unchanged and never re-read the workspace
      (law 11). None: none was pinned; a resume then uses the defaults.
    """

    tools: ToolCtx
    approver: Approver | None = None
    budget: Budget = field(default_factory=Budget)
    cancel: CancellationToken | None = None
    phase: Phase = Phase.EXECUTE
    queued_input: SteeringQueue = field(default_factory=SteeringQueue)
    withheld: frozenset[str] = frozenset()
    compact_at_tokens: int | None = None
    store: Bus | None = None
    questions: QuestionBroker | None = None
    detach: DetachSwitch = field(default_factory=DetachSwitch)
    policy: PolicyEngine | None = None
    classifier: AutoClassifier | None = None
    interlock: Interlock = field(default_factory=Interlock)
    hooks: HookSet = field(default_factory=HookSet)
    outbox: OutboxRoute | None = None
    mailbox: MailboxRoute | None = None
    subagents: SubagentConfig = _DEFAULT_SUBAGENTS
    pinned_policy: Mapping[str, Any] | None = field(default=None, compare=False)

    @classmethod
    def new(cls, tools: ToolCtx, approver: Approver | None = None) -> RunContext:
        return cls(tools=tools, approver=approver)

    @classmethod
    def sandboxed(cls, workspace: str | Path, approver: Approver | None = None) -> RunContext:
        """A context jailed to `workspace` (created if missing)."""
        Path(workspace).mkdir(parents=True, exist_ok=True)
        return cls(tools=ToolCtx(workspace), approver=approver)

    def _with(self, **changes: Any) -> RunContext:
        return dataclasses.replace(self, **changes)

    def with_tools(self, tools: ToolCtx) -> RunContext:
        return self._with(tools=tools)

    def with_approver(self, approver: Approver | None) -> RunContext:
        return self._with(approver=approver)

    def with_budget(self, budget: Budget) -> RunContext:
        return self._with(budget=budget)

    def with_cancel(self, cancel: CancellationToken | None) -> RunContext:
        return self._with(cancel=cancel)

    def with_phase(self, phase: Phase) -> RunContext:
        return self._with(phase=phase)

    def with_queued_input(self, queue: SteeringQueue) -> RunContext:
        return self._with(queued_input=queue)

    def with_withheld(self, names: Iterable[str]) -> RunContext:
        return self._with(withheld=frozenset(names))

    def with_compact_at(self, tokens: int | None) -> RunContext:
        return self._with(compact_at_tokens=tokens)

    def with_store(self, store: Bus | None) -> RunContext:
        return self._with(store=store)

    def with_questions(self, questions: QuestionBroker | None) -> RunContext:
        return self._with(questions=questions)

    def with_detach(self, detach: DetachSwitch) -> RunContext:
        return self._with(detach=detach)

    def with_policy(self, policy: PolicyEngine | None) -> RunContext:
        return self._with(policy=policy)

    def with_classifier(self, classifier: AutoClassifier | None) -> RunContext:
        return self._with(classifier=classifier)

    def with_interlock(self, interlock: Interlock) -> RunContext:
        return self._with(interlock=interlock)

    def with_hooks(self, hooks: HookSet) -> RunContext:
        return self._with(hooks=hooks)

    def with_outbox(self, outbox: OutboxRoute | None) -> RunContext:
        return self._with(outbox=outbox)

    def with_mailbox(self, mailbox: MailboxRoute | None) -> RunContext:
        return self._with(mailbox=mailbox)

    def with_subagents(self, subagents: SubagentConfig) -> RunContext:
        return self._with(subagents=subagents)

    def with_pinned_policy(self, pinned: Mapping[str, Any] | None) -> RunContext:
        return self._with(pinned_policy=pinned)
