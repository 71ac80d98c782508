"""`RunContext`: what one run may touch and spend — per run, never fixed on the agent.

Many runs of one agent go side by side, each with its own jail, approver, budget, cancel
token, phase, steering queue and withheld tools. A `RunContext` is a value (law 13): every
`with_*` builder, `sandboxed()` and `TillerConfig.apply()` return a new one and change
nothing they were given, so a run in flight keeps the policy it started with.

What must stay live while a run works — the steering queue, the safety switch, the detach
switch, the cancel token, the budget — is one explicit `RunControls` (`ctx.controls`),
shared only where a caller passes it on (`tiller.loop._controls` has the rule).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .. import _public
from ..cancel import CancellationToken
from ..errors import UsageError
from ..phase import Phase
from ..policy import Approver, AutoClassifier, HookSet, Interlock, PolicyEngine
from ..store import Bus
from ..tools import Jail, QuestionBroker, SafetyMode
from ._budget import Budget
from ._controls import ControlMember, RunControls
from ._detach import DetachSwitch
from ._mailbox_route import MailboxRoute
from ._model_wrapper import ModelWrapper
from ._outbox_route import OutboxRoute
from ._steering import SteeringQueue
from ._subagent_types import SubagentConfig

__all__ = ["RunContext"]

_DEFAULT_SUBAGENTS = SubagentConfig()


class _SandboxedBuilder(Protocol):
    def __call__(self, workspace: str | Path, approver: Approver | None = None) -> RunContext: ...


class _Sandboxed:
    """`sandboxed(workspace, approver)` on the class or on a context.

    On the class (`RunContext.sandboxed(ws, approver)`) it builds a context with the
    defaults over `ws`, as it always has; on a context (`base.sandboxed(ws, approver)`)
    it keeps everything of `base` (phase, budget ceilings, hooks, rules, interlock, ...)
    with a new jail and approver, as mecha's `sandboxed(&self, ...)` does. One name for
    both, because the fan-out idiom `base.sandboxed(case_dir, approver)` silently dropping
    `base`'s policy was a trap.
    """

    def __get__(self, instance: RunContext | None, owner: type[RunContext]) -> _SandboxedBuilder:
        if instance is None:
            return owner.jailed
        return instance._sandboxed


@dataclass(slots=True, frozen=True, init=False)
class RunContext:
    """Per-run policy. Build with `RunContext.new(jail, approver)` or `.sandboxed(...)`.

    - `jail`: the jail and tool limits (`Jail`); its live safety mode is the
      controls' switch (`ctx.jail.safety is ctx.controls.safety`).
    - `approver`: answers calls that need approval; None means such calls are `Blocked`
      ("this action needs approval and no approver is attached").
    - `controls`: the live parts (`RunControls`): the steering queue, the safety switch,
      the detach switch, the cancel token and the budget; readable here too as
      `queued_input`, `detach`, `cancel` and `budget`.
    - `phase`: `EXECUTE`, or `PLAN` (writing tools hidden and refused).
    - `withheld`: tool names this run may not see or call.
    - `compact_at_tokens`: where compaction will trigger (used by the compaction issue).
    - `store`: the `Bus` for durable runs (with `RunOptions.checkpoint_bucket` set, the run
      is checkpointed at every step and each call's start and completion are recorded).
      With a store, file tools also snapshot what they change (`tiller rewind`).
    - `questions`: where `ask_user` questions go (None: "no one is available", DESIGN §3).
    - `policy`: the policy engine with the user's rules (None: the default engine). The
      live safety mode it reads is `controls.safety`.
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
    - `model_wrapper`: put around every model of the run tree right before it is called
      (the agent's turns, subagents', the classifier's, compaction summaries'; see
      `tiller.loop._model_wrapper`), as a fleet's worker puts each call under the fleet's limits.
      Kept by every derived context and every subagent's. None: models are called as
      they are.

    **Which live controls a run gets** (law 13). A context is a value; its controls are
    shared only where a caller passes them on:

    - `ctx.with_controls(c)` shares all of `c` with every run of `ctx` and of what is
      derived from it; `with_budget`, `with_queued_input`, `with_detach` (and the same
      keywords of the constructor) share that one member, and so does `with_classifier`
      given a classifier that spends from this context's budget. Keep the object you
      passed to steer, switch or detach the run.
    - Every other builder (and `sandboxed`, `TillerConfig.apply`) gives the new context
      fresh controls of its own for the members not shared: an empty steering queue, its
      own detach switch, a safety switch at the current mode, a budget with the same
      ceilings and nothing spent. The cancel token is always kept: a batch token stops
      every run derived from the context. So two siblings derived from one base never
      drain each other's steering, see each other's spending or share a mode switch.
    - A context's own controls serve one run at a time: a run started from a context
      whose own controls another run is using gets fresh ones; one started after that run
      ended (a resume) takes them again.
    - A subagent shares its parent's budget (one budget for the run tree, law 7) and
      works under a child of its cancel token; its steering, detach and safety switches
      are its own (its mode under its type's ceiling).

    Take the live parts from the context you run (`ctx.queued_input`, `ctx.controls`),
    not from one it was derived from.
    """

    jail: Jail
    approver: Approver | None
    controls: RunControls
    phase: Phase
    withheld: frozenset[str]
    compact_at_tokens: int | None
    store: Bus | None
    questions: QuestionBroker | None
    policy: PolicyEngine | None
    classifier: AutoClassifier | None
    interlock: Interlock
    hooks: HookSet
    outbox: OutboxRoute | None
    mailbox: MailboxRoute | None
    subagents: SubagentConfig
    model_wrapper: ModelWrapper | None
    # A record of the configuration, not policy of its own: not compared.
    pinned_policy: Mapping[str, Any] | None = field(compare=False)

    sandboxed = _Sandboxed()

    def __init__(  # noqa: PLR0913 (the public constructor: each keyword is API)
        self,
        jail: Jail,
        approver: Approver | None = None,
        *,
        controls: RunControls | None = None,
        phase: Phase = Phase.EXECUTE,
        withheld: frozenset[str] = frozenset(),
        compact_at_tokens: int | None = None,
        store: Bus | None = None,
        questions: QuestionBroker | None = None,
        policy: PolicyEngine | None = None,
        classifier: AutoClassifier | None = None,
        interlock: Interlock | None = None,
        hooks: HookSet | None = None,
        outbox: OutboxRoute | None = None,
        mailbox: MailboxRoute | None = None,
        subagents: SubagentConfig = _DEFAULT_SUBAGENTS,
        model_wrapper: ModelWrapper | None = None,
        pinned_policy: Mapping[str, Any] | None = None,
        budget: Budget | None = None,
        cancel: CancellationToken | None = None,
        queued_input: SteeringQueue | None = None,
        detach: DetachSwitch | None = None,
    ) -> None:
        if controls is None:
            # The context's own: its Jail's switch, nothing shared.
            controls = RunControls.own(safety=jail.safety)
        else:
            controls = controls.adopting_safety(jail.safety)
        # The older keywords share one member each, as `with_*` does.
        if budget is not None:
            controls = controls.with_member("budget", budget)
        if cancel is not None:
            controls = controls.with_member("cancel", cancel)
        if queued_input is not None:
            controls = controls.with_member("steering", queued_input)
        if detach is not None:
            controls = controls.with_member("detach", detach)
        # One live mode: the jail reads the controls' switch.
        jail = jail.with_safety_mode(controls.safety)
        set_ = object.__setattr__
        set_(self, "jail", jail)
        set_(self, "approver", approver)
        set_(self, "controls", controls)
        set_(self, "phase", phase)
        set_(self, "withheld", frozenset(withheld))
        set_(self, "compact_at_tokens", compact_at_tokens)
        set_(self, "store", store)
        set_(self, "questions", questions)
        set_(self, "policy", policy)
        set_(self, "classifier", classifier)
        set_(self, "interlock", interlock if interlock is not None else Interlock())
        set_(self, "hooks", hooks if hooks is not None else HookSet())
        set_(self, "outbox", outbox)
        set_(self, "mailbox", mailbox)
        set_(self, "subagents", subagents)
        set_(self, "model_wrapper", model_wrapper)
        set_(self, "pinned_policy", pinned_policy)

    # ── the live parts, readable as before ───────────────────────────────────────

    @property
    def tools(self) -> Jail:
        """Deprecated: the run's jail is `jail`; `tools` goes in the next release."""
        warnings.warn(
            "RunContext.tools is now RunContext.jail; tools goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.jail

    @property
    def budget(self) -> Budget:
        """The budget this context's runs spend from (`controls.budget`)."""
        return self.controls.budget

    @property
    def cancel(self) -> CancellationToken | None:
        """The token this context's runs work under a child of (`controls.cancel`)."""
        return self.controls.cancel

    @property
    def queued_input(self) -> SteeringQueue:
        """The steering queue of this context's run (`controls.steering`)."""
        return self.controls.steering

    @property
    def detach(self) -> DetachSwitch:
        """The switch that sends this context's running step's long work to the
        background (`controls.detach`)."""
        return self.controls.detach

    # ── building ─────────────────────────────────────────────────────────────────

    @classmethod
    def new(cls, jail: Jail, approver: Approver | None = None) -> RunContext:
        return cls(jail=jail, approver=approver)

    @classmethod
    def jailed(cls, workspace: str | Path, approver: Approver | None = None) -> RunContext:
        """A context with the defaults, jailed to `workspace` (created if missing): what
        `RunContext.sandboxed(workspace, approver)` on the class builds."""
        Path(workspace).mkdir(parents=True, exist_ok=True)
        return cls(jail=Jail(workspace), approver=approver)

    def _sandboxed(self, workspace: str | Path, approver: Approver | None = None) -> RunContext:
        """Everything of this context over a new jail (created if missing), with
        `approver` (None: none). The tool limits, phase, budget ceilings, hooks, rules,
        interlock, outbox, mailbox and subagent types are kept; the spill dir moves into
        the new jail; the policy engine is rebuilt over the new jail with the same rules
        (an engine judges shell paths against its workspace); the live controls are
        fresh, as for any derived context."""
        Path(workspace).mkdir(parents=True, exist_ok=True)
        jail = self.jail.sandboxed(workspace)
        policy = self.policy
        if type(policy) is PolicyEngine:
            policy = PolicyEngine(policy.rules, workspace=jail.root, protected=jail.protected)
        return self.with_jail(jail)._with(approver=approver, policy=policy)

    def _with(self, **changes: Any) -> RunContext:
        if "controls" not in changes:
            # A derived value: the members nobody shared deliberately are its own.
            changes["controls"] = self.controls.fresh()
        return dataclasses.replace(self, **changes)

    def with_controls(self, controls: RunControls) -> RunContext:
        """This context with `controls` as its live parts: every run of it (and of what is
        derived from it) steers, switches, detaches, cancels and spends through the
        members `controls.shared` names (all of them, for a `RunControls` built with the
        defaults). Its `Jail` reads `controls.safety`. Members not shared are policy
        only: `RunControls(budget=Budget(max_steps=5), shared=frozenset())` sets the
        ceilings every derived context and every run gets a fresh ledger of."""
        return self._with(controls=controls.adopting_safety(self.controls.safety))

    def _with_member(self, name: ControlMember, value: object) -> RunContext:
        return self._with(controls=self.controls.fresh().with_member(name, value))

    def with_jail(self, jail: Jail) -> RunContext:
        """This context over `jail`. A `Jail` with a safety switch of its own brings
        it in as this context's own; otherwise the new context's switch is a fresh one
        at the current mode (or the shared one, if the switch was passed on)."""
        controls = self.controls.fresh()
        if jail.safety is not self.controls.safety and jail.safety is not controls.safety:
            controls = controls.with_member("safety", jail.safety, shared=False)
        return self._with(jail=jail, controls=controls)

    def with_tools(self, jail: Jail) -> RunContext:
        """Deprecated: `with_jail(tools)`; goes in the next release."""
        warnings.warn(
            "RunContext.with_tools is now with_jail; with_tools goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.with_jail(jail)

    def with_safety_mode(self, mode: SafetyMode) -> RunContext:
        """This context under `mode`, on a new safety switch of its own (capped by the
        current ceiling); the context it was derived from keeps its mode."""
        return self._with(controls=self.controls.fresh().with_mode(mode))

    def with_approver(self, approver: Approver | None) -> RunContext:
        return self._with(approver=approver)

    def with_budget(self, budget: Budget) -> RunContext:
        """This context spending from `budget`, shared with every run of it."""
        return self._with_member("budget", budget)

    def with_cancel(self, cancel: CancellationToken | None) -> RunContext:
        return self._with_member("cancel", cancel)

    def with_phase(self, phase: Phase) -> RunContext:
        return self._with(phase=phase)

    def with_queued_input(self, queue: SteeringQueue) -> RunContext:
        """This context steered through `queue`, shared with every run of it."""
        return self._with_member("steering", queue)

    def with_withheld(self, names: Iterable[str]) -> RunContext:
        return self._with(withheld=frozenset(names))

    def with_compact_at(self, tokens: int | None) -> RunContext:
        return self._with(compact_at_tokens=tokens)

    def with_store(self, store: Bus | None) -> RunContext:
        return self._with(store=store)

    def with_questions(self, questions: QuestionBroker | None) -> RunContext:
        return self._with(questions=questions)

    def with_detach(self, detach: DetachSwitch) -> RunContext:
        """This context detached through `detach`, shared with every run of it."""
        return self._with_member("detach", detach)

    def with_policy(self, policy: PolicyEngine | None) -> RunContext:
        return self._with(policy=policy)

    def with_classifier(self, classifier: AutoClassifier | None) -> RunContext:
        """This context vetting with `classifier`. A classifier built to spend from this
        context's budget (`AutoClassifier(model, budget=ctx.budget)`) passes that budget
        on: the new context's runs spend from it too, one purse for the run tree (law 7),
        instead of a fresh ledger the classifier's calls never reach."""
        if classifier is not None and classifier.budget is self.budget:
            controls = self.controls.fresh().with_member("budget", self.budget)
            return self._with(classifier=classifier, controls=controls)
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

    def with_model_wrapper(self, wrapper: ModelWrapper | None) -> RunContext:
        """This context with `wrapper` around every model its run tree calls (None: none)."""
        if wrapper is not None and not callable(wrapper):
            raise UsageError(
                "model_wrapper must be a callable (model, model_string) -> Model, "
                f"not {type(wrapper).__name__}"
            )
        return self._with(model_wrapper=wrapper)

    def with_pinned_policy(self, pinned: Mapping[str, Any] | None) -> RunContext:
        return self._with(pinned_policy=pinned)


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
