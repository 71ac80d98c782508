"""One vocabulary for every verdict: `kind` (allow, ask or deny) and `by` (who decided).

Seven types answer "may this go on?" — the policy engine's `PolicyDecision`, an
approver's `Decision`, a hook's `HookVerdict` and the hooks' `HookOutcome`, the
classifier's `VetVerdict`, a guardrail's `GuardrailOutcome`, the interlock's
`InterlockVerdict`, and a person's `ResumeDecision` / `CallDecision`. Each keeps the facts
of its own (a risk class, a handoff's target, a classifier's basis), but all say what was
decided in the same three words, and who decided it, so a refusal can always name its
refuser (law 4) and code that reads verdicts needs one table, not seven:

| by | may say | who that is |
|---|---|---|
| `policy` | allow, ask, deny | the engine and the user's rules; an approver's "blocked" |
| `user` | allow, deny | a person (an approver that asks one, a resume's decision) |
| `hook:<name>` | allow, deny | the user's `pre_tool` hook of that name (`hook`: unnamed) |
| `classifier` | allow, ask | the auto classifier: it never denies (a person still can) |
| `guardrail` | allow, deny | a guardrail; a handoff is a deny naming `handoff_to` |
| `interlock` | allow, ask, deny | the lethal-trifecta interlock |
| `phase`, `withheld`, `unknown_tool` | deny | the registry: a hidden, withheld, unknown tool |

An approver's "blocked" is a deny `by` the policy: no person said no; no one could say
yes ("no approver is attached").

`who_may_say` is that table; `may_say(by, kind)` checks one verdict against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal, Protocol, runtime_checkable

__all__ = ["Kind", "Verdict", "may_say", "who_may_say"]

#: What a verdict decides: the thing asked about goes on, a person is asked, or it stops.
Kind = Literal["allow", "ask", "deny"]


@runtime_checkable
class Verdict(Protocol):
    """What every verdict type offers: what was decided (`kind`) and who decided (`by`)."""

    @property
    def kind(self) -> Kind: ...

    @property
    def by(self) -> str: ...


_ALL: Final[frozenset[Kind]] = frozenset({"allow", "ask", "deny"})
_YES_OR_NO: Final[frozenset[Kind]] = frozenset({"allow", "deny"})
_NO: Final[frozenset[Kind]] = frozenset({"deny"})

#: Who may say what (see the module docstring). A `hook:<name>` is looked up as `hook`.
who_may_say: Final[Mapping[str, frozenset[Kind]]] = MappingProxyType(
    {
        "policy": _ALL,
        "user": _YES_OR_NO,
        "hook": _YES_OR_NO,
        # Never deny: the classifier turns a Classify into Allow or Ask (law 3: it fails
        # to Ask).
        "classifier": frozenset({"allow", "ask"}),
        "guardrail": _YES_OR_NO,
        "interlock": _ALL,
        "phase": _NO,
        "withheld": _NO,
        "unknown_tool": _NO,
    }
)


def may_say(by: str, kind: str) -> bool:
    """Whether `by` (a name of the table, or `hook:<name>`) may give a verdict `kind`."""
    family = "hook" if by.startswith("hook:") else by
    allowed = who_may_say.get(family)
    return allowed is not None and kind in allowed
