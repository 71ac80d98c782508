"""`RunControls`: the live, shared parts of a run, in one explicit object (law 13).

A `RunContext` is a value: what a run may touch and spend, fixed when the run starts. A
few things must stay *live* while the run works, because someone outside it changes them:
the steering queue (a person types), the safety switch (a terminal or a control request
changes the mode), the detach switch (a person sends a long command to the background),
the cancel token (a batch is stopped) and the budget (every call of the run tree spends
from it). Those five live here, and a context holds one `RunControls` (`ctx.controls`).

They are shared only where a caller passes them on. `shared` names the members that were
passed deliberately (a `RunControls` a caller built and gave with `ctx.with_controls(c)`,
or one member given with `with_budget`, `with_queued_input`, `with_detach`): every context
derived from one holding them, and every run started from it, uses those very objects.
The other members are the context's own: a context derived with any builder gets fresh
ones (`fresh()`), so two sibling runs of one base never drain each other's steering,
spend each other's budget or flip each other's mode. The cancel token is always kept as
it is: a token is a scope that may cover a whole batch, and each run works under a child.

A context's own controls serve one run at a time (`for_run()`): a second run started from
the same context while the first is in flight gets fresh ones, so one base context can be
run many times side by side.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from .. import _public
from ..cancel import CancellationToken
from ..errors import UsageError
from ..tools import LiveSafetyMode, SafetyMode
from ._budget import Budget
from ._detach import DetachSwitch
from ._steering import SteeringQueue

__all__ = ["CONTROL_MEMBERS", "ControlMember", "RunControls"]

#: The name of one of a `RunControls`' live members.
ControlMember = Literal["steering", "safety", "detach", "cancel", "budget"]
#: Every member, in the order they are documented.
CONTROL_MEMBERS: Final[frozenset[str]] = frozenset(
    {"steering", "safety", "detach", "cancel", "budget"}
)
#: The members `fresh()` replaces when they are not shared (a cancel token is always kept).
_RENEWABLE: Final = frozenset({"steering", "safety", "detach", "budget"})


_KINDS: Final[dict[str, type]] = {
    "steering": SteeringQueue,
    "safety": LiveSafetyMode,
    "detach": DetachSwitch,
    "cancel": CancellationToken,
    "budget": Budget,
}


class _Occupancy:
    """Whether a run is using one set of controls now (thread-safe: runs may start from
    several event loops or threads)."""

    __slots__ = ("_busy", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = False

    def take(self) -> bool:
        with self._lock:
            if self._busy:
                return False
            self._busy = True
            return True

    def give_back(self) -> None:
        with self._lock:
            self._busy = False


class _UnsetSafety(LiveSafetyMode):
    """The switch of a `RunControls` built without `safety=`: a placeholder the context
    that takes the controls replaces with its own switch (`adopting_safety`). Without it,
    `ctx.with_controls(RunControls(budget=...))` would move a `read_only` context, or one
    with a ceiling, to a fresh `ask` switch with none: a loosening nobody asked for."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, eq=False)
class RunControls:
    """The live parts of a run: steering, safety switch, detach switch, cancel, budget.

    ```python
    controls = RunControls(budget=Budget(max_steps=20))
    ctx = base.with_controls(controls)
    task = asyncio.create_task(agent.run_in(ctx, "fix the tests"))
    controls.steering.push("only the failing one")   # reaches this run, and no other
    controls.safety.set(SafetyMode.AUTO)             # the next call of this run
    ```

    - `steering`: text a person types while the run works (`SteeringQueue`).
    - `safety`: the live safety mode (`LiveSafetyMode`); the context's `Jail` reads the
      same switch (`ctx.jail.safety is ctx.controls.safety`).
    - `detach`: sends the running step's long work to the background (`DetachSwitch`).
    - `cancel`: the token the run works under a child of (None: none).
    - `budget`: ceilings and what the run tree spent (`Budget`; a subagent spends from its
      parent's, law 7).
    - `shared`: the members passed on deliberately, which every derived context and every
      run keeps; a `RunControls` you build shares all of them, since giving it is the
      deliberate act. The members not shared are replaced by fresh ones in each derived
      context (see the module docstring).

    Immutable like the context: `with_member(...)` returns new controls. The members
    themselves are the live objects.
    """

    steering: SteeringQueue = field(default_factory=SteeringQueue)
    safety: LiveSafetyMode = field(default_factory=_UnsetSafety)
    detach: DetachSwitch = field(default_factory=DetachSwitch)
    cancel: CancellationToken | None = None
    budget: Budget = field(default_factory=Budget)
    shared: frozenset[str] = CONTROL_MEMBERS
    _occupancy: _Occupancy = field(default_factory=_Occupancy, repr=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.shared) - CONTROL_MEMBERS)
        if unknown:
            raise UsageError(
                f"RunControls.shared names unknown member(s) {', '.join(unknown)}; "
                f"the members are: {', '.join(sorted(CONTROL_MEMBERS))}"
            )
        object.__setattr__(self, "shared", frozenset(self.shared))
        for name, kind in _KINDS.items():
            value = getattr(self, name)
            if not isinstance(value, kind) and not (name == "cancel" and value is None):
                raise UsageError(
                    f"RunControls.{name} must be a {kind.__name__}, not {type(value).__name__}"
                )

    @classmethod
    def own(
        cls,
        *,
        safety: LiveSafetyMode | None = None,
        cancel: CancellationToken | None = None,
    ) -> RunControls:
        """Controls that belong to one context and are shared with nothing (what a
        `RunContext` makes for itself when it is given none)."""
        return cls(
            safety=safety if safety is not None else LiveSafetyMode(),
            cancel=cancel,
            shared=frozenset(),
        )

    def with_member(
        self, name: ControlMember, value: object, *, shared: bool = True
    ) -> RunControls:
        """These controls with one member replaced by `value` (shared, unless `shared` is
        false: then it is this context's own and a derived context gets a fresh one)."""
        kind = _KINDS.get(name)
        if kind is None:
            raise UsageError(
                f"{name!r} is not a member of RunControls; "
                f"the members are: {', '.join(sorted(CONTROL_MEMBERS))}"
            )
        if not isinstance(value, kind) and not (name == "cancel" and value is None):
            raise UsageError(
                f"RunControls.{name} must be a {kind.__name__}, not {type(value).__name__}"
            )
        marks = self.shared | {name} if shared else self.shared - {name}
        changes: dict[str, Any] = {name: value}
        if name != "cancel":
            # Other live objects: another set of controls, which another run may take.
            # (A token is never renewed, so these are still the same controls.)
            changes["_occupancy"] = _Occupancy()
        return replace(self, shared=marks, **changes)

    def adopting_safety(self, switch: LiveSafetyMode) -> RunControls:
        """These controls as a context whose switch is `switch` takes them: controls built
        without `safety=` get a new switch at that switch's mode and ceiling, so giving a
        context controls for its budget or steering never resets its mode or ceiling, and
        never ties the new context to the old one's switch."""
        if not isinstance(self.safety, _UnsetSafety):
            return self
        copy = LiveSafetyMode(switch.mode, ceiling=switch.ceiling)
        return self.with_member("safety", copy, shared="safety" in self.shared)

    def shared_by_all(self) -> RunControls:
        """These very members, every one of them shared: what a run hands to what it
        derives while it works (its tools' contexts, its subagents' policy)."""
        if self.shared == CONTROL_MEMBERS:
            return self
        return replace(self, shared=CONTROL_MEMBERS)

    def fresh(self) -> RunControls:
        """Controls for a derived context: the shared members as they are, the others
        new — an empty steering queue, a detach switch of its own, a safety switch at the
        current mode under the same ceiling, a budget with the same ceilings and pricing
        and nothing spent. The cancel token is kept (a child is taken per run)."""
        renew = _RENEWABLE - self.shared
        if not renew:
            return self
        changes: dict[str, Any] = {}
        if "steering" in renew:
            changes["steering"] = SteeringQueue()
        if "detach" in renew:
            changes["detach"] = DetachSwitch()
        if "safety" in renew:
            changes["safety"] = LiveSafetyMode(self.safety.mode, ceiling=self.safety.ceiling)
        if "budget" in renew:
            changes["budget"] = self.budget.unspent()
        return replace(self, _occupancy=_Occupancy(), **changes)

    def with_mode(self, mode: SafetyMode) -> RunControls:
        """These controls with a new safety switch of their own, set to `mode` (capped by
        the current ceiling, which never loosens)."""
        switch = LiveSafetyMode(mode, ceiling=self.safety.ceiling)
        return self.with_member("safety", switch, shared=False)

    @contextmanager
    def for_run(self) -> Iterator[RunControls]:
        """The controls one run uses, for as long as it runs.

        Controls that are all shared are used as they are, by as many runs as are given
        them. Otherwise the first run to start takes them; a run that starts while they
        are taken gets `fresh()` ones, so concurrent runs of one context stay apart. A run
        started after the first ended takes them again (a resumed run goes on with its
        budget)."""
        if self.shared >= _RENEWABLE:
            yield self
            return
        if not self._occupancy.take():
            yield self.fresh()
            return
        try:
            yield self
        finally:
            self._occupancy.give_back()


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
