"""The gate: may this call run? One fixed order, structural before human, cheap before
expensive, failing closed (DESIGN §3, laws 3 and 4).

```
phase (hidden tools) ─► withheld / unknown tool
  ├─ routed to the outbox? ─► pre_tool hooks ─► stage (nothing is sent)
  └─ otherwise ─► interlock (the batch's taint) ─► pre_tool hooks
                 ─► policy engine: Allow | Ask | Classify | Deny (with the risk class)
                 ─► classifier turns Classify into Allow or Ask (never Deny; fails to Ask)
                 ─► approver answers Ask: Allow | Deny(reason) | Blocked(reason)
```

The answer is a `GateAnswer` (`Run | Refuse | Hold | Stage | ForClient`, see
`_gate_answer`). Each refusal names who refused (law 4) as its `by`, and the loop writes
the prefix from it, never the refuser: "Refused by the plan phase", "Refused: ...
withheld", "Unknown tool", "Blocked by the interlock", "Refused by hook <name>", "Blocked
by policy", "Denied by the user". An Ask with no approver goes to a person later when the
run is durable (`Hold`: the run suspends after the allowed calls ran), and is blocked
otherwise. An allowed call to a tool the client runs is `ForClient`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..conversation import Taint, ToolCall
from ..policy import (
    ApprovalBroker,
    AskReason,
    AutoClassifier,
    DecidedApprover,
    Decision,
    InterlockVerdict,
    PolicyDecision,
    PolicyEngine,
    RiskClass,
    VetRequest,
    approval_key,
)
from ..state import CallRecord, RunState
from ..tools import Capability, Registry, SafetyMode, Tool
from ._batch import call_arguments
from ._gate_answer import ForClient, GateAnswer, Hold, Refuse, Run, Stage
from ._model_wrapper import model_to_call
from ._protected_writes import protected_write_refusal
from ._refusals import warn_unapprovable
from ._run_calls import RunCalls

if TYPE_CHECKING:
    from ._context import RunContext
    from ._services import RunServices

__all__ = ["Gate", "GateAnswer"]


class _Unparsed:
    """`Gate.check` was given no parsed arguments: it parses them itself."""


_UNPARSED: Final = _Unparsed()


#: `Capability.EXTERNAL_SEND` as an int (a flag's `&` costs an enum call per call).
_SENDS: Final = Capability.EXTERNAL_SEND._value_


class Gate:
    """One run's gate (see the module docstring)."""

    def __init__(
        self,
        registry: Registry,
        run_ctx: RunContext,
        state: RunState,
        services: RunServices,
        *,
        durable: bool,
        model: Any,
        retry: Any,
    ) -> None:
        self._registry = registry
        self._run_ctx = run_ctx
        self._state = state
        self._services = services
        self._durable = durable
        self._engine = (
            run_ctx.policy
            if run_ctx.policy is not None
            else PolicyEngine(workspace=run_ctx.jail.root, protected=run_ctx.jail.protected)
        )
        approver = run_ctx.approver
        # A resume's decisions answer their own calls; any other call goes on as in any
        # run (with no approver and a store: held again, not blocked).
        self._decided: DecidedApprover | None = None
        if isinstance(approver, DecidedApprover):
            self._decided, approver = approver, approver.then
        self._approver = ApprovalBroker(approver, run_ctx.cancel) if approver is not None else None
        classifier = run_ctx.classifier
        if classifier is not None and run_ctx.model_wrapper is not None:
            # The classifier's calls are the run's too (law 7): under the same wrapper.
            classifier = classifier.with_model(model_to_call(run_ctx, classifier.model))
        self._classifier = classifier
        #: No rules, hooks or outbox: a read-only call needs no more than the lookup.
        self._plain_reads = (
            not self._engine.rules.rules and not run_ctx.hooks and run_ctx.outbox is None
        )
        self._model = model
        self._retry = retry
        self._warned_unapprovable = False
        #: The calls this run staged in the outbox, in order (for the run's AG-UI state),
        #: those of the run before a resume included.
        self.staged: list[CallRecord] = [r for r in state.calls.values() if r.staged]

    @property
    def approver(self) -> ApprovalBroker | None:
        """The run's approval broker (None when the run has no approver)."""
        return self._approver

    def classifier(self) -> AutoClassifier:
        """The run's classifier: the one given, else the run's own model (built once)."""
        if self._classifier is None:
            model = model_to_call(
                self._run_ctx, RunCalls(self._model, self._state), self._state.model_spec
            )
            self._classifier = AutoClassifier(model, budget=self._run_ctx.budget, retry=self._retry)
        return self._classifier

    def _mode(self) -> SafetyMode:
        return self._run_ctx.jail.safety.mode

    async def check(
        self,
        call: ToolCall,
        record: CallRecord,
        batch_taint: Taint,
        capabilities: Capability | None = None,
        *,
        through: str = "",
        arguments: Mapping[str, Any] | _Unparsed | None = _UNPARSED,
    ) -> GateAnswer:
        """Decide one call: `batch_taint` is the conversation's taint with the rest of its
        batch ORed in; `capabilities`, what the call can do in this run; `through`, what
        it could send through (a networked background job, for a write); `arguments`, the
        call's arguments if the caller parsed them already (None: not a JSON object). An
        allowed call to a tool the client runs is the client's (`ForClient`)."""
        run_ctx = self._run_ctx
        lookup = self._registry.lookup(call.name, run_ctx.phase, run_ctx.withheld)
        if lookup.tool is None:
            return _lookup_refusal(call.name, lookup.refusal, self._registry)
        tool = lookup.tool
        if isinstance(arguments, _Unparsed):
            arguments = call_arguments(call)
        reach = _Reach(batch_taint, capabilities, through)
        answer = await self._decide(call, tool, arguments, record, reach)
        if isinstance(answer, Run) and tool.runs_on_client is True:
            return ForClient(answer.tool, answer.risk, answer.by)
        return answer

    async def _decide(
        self,
        call: ToolCall,
        tool: Tool,
        arguments: Mapping[str, Any] | None,
        record: CallRecord,
        reach: _Reach,
    ) -> GateAnswer:
        """Every stage after the lookup, in the module docstring's order."""
        if arguments is None:
            # Not a JSON object: the registry answers it with an error, running nothing.
            return Run(tool)
        if self._skips_checks(call, tool, arguments, reach.capabilities):
            # A plain read in a run with no rules, hooks or outbox: every mode allows it
            # and nothing else could refuse it, so the per-call work is skipped.
            return Run(tool, RiskClass.READ_ONLY)
        outbox = self._run_ctx.outbox
        if outbox is not None and outbox.routes(call.name):
            refused = await self._hooks(call, arguments, reach.taint, None)
            if refused is not None:
                return refused
            return await self._stage(call, reach.taint, record)
        interlock = self._run_ctx.interlock.check(
            tool, reach.taint, reach.capabilities, through=reach.through
        )
        if interlock.kind == "deny":
            return Refuse(interlock.by, interlock.reason)
        decision = self._engine.decide(call.name, arguments, tool, self._mode())
        refused = self._protected(call, tool, arguments, decision)
        if refused is None:
            refused = await self._hooks(call, arguments, reach.taint, decision.risk)
        if refused is not None:
            return refused
        if decision.kind == "deny":
            return Refuse(
                decision.by,
                f"{decision.reason} (risk: {decision.risk.value}).",
                decision.risk,
                tool.denial_remedy or "",
            )
        return await self._answer(call, tool, arguments, decision, interlock)

    def _skips_checks(
        self,
        call: ToolCall,
        tool: Tool,
        arguments: Mapping[str, Any],
        capabilities: Capability | None,
    ) -> bool:
        return (
            self._plain_reads
            and tool.read_only is True
            and (capabilities is None or not capabilities._value_ & _SENDS)
            and _plain_read(tool, arguments)
            and (self._decided is None or not self._decided.has_decision(call))
        )

    def _protected(
        self, call: ToolCall, tool: Tool, arguments: Mapping[str, Any], decision: PolicyDecision
    ) -> Refuse | None:
        """A write to a path the jail protects is refused whatever the mode says."""
        if decision.risk is not RiskClass.FILE_MUTATION:
            return None
        protected = protected_write_refusal(
            self._run_ctx.jail, self._engine.assess(call.name, arguments, tool).paths
        )
        if protected is None:
            return None
        return Refuse(
            "policy",
            f"{protected} (risk: {decision.risk.value}).",
            decision.risk,
            tool.denial_remedy or "",
        )

    async def _answer(
        self,
        call: ToolCall,
        tool: Tool,
        arguments: Mapping[str, Any],
        decision: PolicyDecision,
        interlock: InterlockVerdict,
    ) -> GateAnswer:
        """The policy allowed or asked: a person's earlier decision, the classifier, the
        approver (or a hold) answer it."""
        if self._decided is not None:
            # A person's decision answers the one call it was made for, once (law 10): it
            # is spent here, and one made for another tool or other arguments is dropped
            # unused, and this call asked about (held again) as if no one had answered.
            mismatch = self._decided.mismatch(call)
            decided = self._decided.spend(call)
            if mismatch is not None:
                return await self._ask(call, tool, decision.risk, mismatch, remembered=False)
            if decided is not None:
                return self._apply(call, tool, decision.risk, decided)
        interlock_asks = interlock.kind == "ask"
        ask_reason = interlock.reason if interlock_asks else ""
        if not ask_reason:
            if decision.kind == "allow":
                return Run(tool, decision.risk)
            if decision.to_classifier:
                vetted = await self._vet(call, tool, arguments, decision)
                if vetted is None:
                    return Run(tool, decision.risk, by="classifier")
                ask_reason = vetted
            else:
                ask_reason = decision.reason
        remembered = not interlock_asks
        return await self._ask(
            call, tool, decision.risk, ask_reason, remembered=remembered, arguments=arguments
        )

    def _apply(self, call: ToolCall, tool: Tool, risk: RiskClass, decided: Decision) -> GateAnswer:
        """A person already answered this call (a resume): their answer replaces the
        approver's, whatever the mode says now; the checks before it still applied."""
        if decided.allowed:
            key = approval_key(call, tool) if decided.always else None
            if key is not None and key not in self._state.always_approved:
                # "Approve always" from a resume: it holds for the rest of the run,
                # across later suspensions too (it is in the state).
                self._state.always_approved.append(key)
            return Run(tool, risk, by="user")
        return Refuse("user", f"{decided.reason}.", risk, tool.denial_remedy or "")

    # ── the stages ───────────────────────────────────────────────────────────────

    async def _hooks(
        self,
        call: ToolCall,
        arguments: Mapping[str, Any],
        taint: Taint,
        risk: RiskClass | None,
    ) -> Refuse | None:
        hooks = self._run_ctx.hooks
        if not hooks or not hooks.watches("pre_tool", call.name):  # most runs have none
            return None
        outcome = await hooks.pre_tool(
            tool=call.name,
            # Their own copy: the registry runs the tool with the gate's (parsed once).
            arguments=call_arguments(call) or {},
            call_id=call.id,
            run_id=self._state.run_id,
            thread_id=self._state.thread_id,
            # A hook runs in the workspace: a scratch jail's root is made for it now.
            workspace=self._run_ctx.jail.materialize(),
            taint=taint,
            risk=risk,
        )
        if outcome.allowed:
            return None
        return Refuse(f"hook:{outcome.hook}", outcome.reason, risk)

    async def _vet(
        self, call: ToolCall, tool: Tool, arguments: Mapping[str, Any], decision: PolicyDecision
    ) -> str | None:
        """Ask the classifier; None if it allows, else the reason a person is asked."""
        try:
            command = tool.command_of(arguments)
            paths = tuple(p for p in tool.paths_of(arguments) if isinstance(p, str))
        except Exception:  # the engine rated the call; the classifier only loses detail
            command, paths = None, ()
        request = VetRequest(
            tool=call.name,
            summary=_summary(call.name, arguments),
            risk=decision.risk,
            goal=self._services.goal(),
            command=command if isinstance(command, str) else None,
            paths=paths,
        )
        verdict = await self.classifier().vet(request)
        if verdict.usage is not None:
            # Charged to the budget already; the run's own usage counts it too (law 7).
            self._state.usage = self._state.usage + verdict.usage
            self._state.cost_usd += verdict.cost_usd
        if verdict.kind == "allow":
            return None
        return f"[auto-review: {verdict.reason}]"

    async def _ask(
        self,
        call: ToolCall,
        tool: Tool,
        risk: RiskClass,
        reason: str,
        *,
        remembered: bool = True,
        arguments: Mapping[str, Any] | None = None,
    ) -> GateAnswer:
        approver = self._approver
        always = self._state.always_approved
        if remembered and always and approval_key(call, tool, arguments) in always:
            return Run(tool, risk, by="user")
        remedy = tool.denial_remedy or ""
        if approver is None:
            if self._durable:
                return Hold(reason, risk)
            if not self._warned_unapprovable:  # once per run: the user learns the remedies
                self._warned_unapprovable = True
                warn_unapprovable(call.name, risk.value)
            return Refuse(
                "policy", "this action needs approval and no approver is attached.", risk, remedy
            )
        # An "always" given earlier does not answer the interlock: it was given before
        # the conversation read what makes this send dangerous.
        why = AskReason(reason, risk)
        answer: Decision = await approver.ask(
            call, tool, remembered=remembered, why=why, arguments=arguments
        )
        if answer.allowed:
            return Run(tool, risk, by=answer.by)
        return Refuse(answer.by, f"{answer.reason}.", risk, remedy)

    async def _stage(self, call: ToolCall, taint: Taint, record: CallRecord) -> GateAnswer:
        outbox = self._run_ctx.outbox
        assert outbox is not None
        try:
            item_id = await outbox.stage(
                call,
                run_id=self._state.run_id,
                thread_id=self._state.thread_id,
                taint=taint,
                workspace=self._run_ctx.jail.root,
                store=self._run_ctx.store,
            )
        except Exception as exc:  # a staging failure never executes (law 3)
            return Refuse(
                "policy",
                f"{call.name} is routed to the outbox and could not be staged "
                f"({type(exc).__name__}: {exc}); nothing was sent.",
            )
        record.staged = True
        record.outbox_item = item_id
        self.staged.append(record)
        return Stage(
            f"Staged in the outbox as {item_id}: the draft awaits a person's release "
            f"(tiller outbox send {item_id}). It has NOT been sent; do not report it as done."
        )


@dataclass(frozen=True, slots=True)
class _Reach:
    """What one call could reach beyond itself: the conversation's taint with the rest of
    its batch ORed in, what it can do in this run, what it could send through."""

    taint: Taint
    capabilities: Capability | None
    through: str


def _plain_read(tool: Tool, arguments: Mapping[str, Any]) -> bool:
    """Whether the call is one the engine could only allow: a read-only tool that
    declares no other risk for it and runs no shell command. A declaration that cannot
    be read is no plain read: the engine denies it."""
    if tool.read_only is not True:
        return False
    try:
        return tool.risk_of(arguments) in (None, RiskClass.READ_ONLY) and (
            tool.command_of(arguments) is None
        )
    except Exception:  # the engine words the refusal
        return False


def _summary(name: str, arguments: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    return f"{name}({shown})"[:300]


def _lookup_refusal(name: str, refusal: str | None, registry: Registry) -> Refuse:
    if refusal == "phase":
        return Refuse("phase", f"{name} changes things and is not available while planning.")
    if refusal == "withheld":
        return Refuse("withheld", f"the tool {name} is withheld from this run.")
    known = ", ".join(sorted(registry.names())) or "none"
    return Refuse("unknown_tool", f"{name!r}. The tools you can call are: {known}.")
