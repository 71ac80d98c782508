"""`ToolTraceMatch`: which tools the agent called, in which order, with which arguments.

Only calls that were made count: a call refused (by the user, a policy, a hook, ...), to
an unknown tool, or whose arguments never became JSON was not made, whatever the model
asked for. A call that ran and failed, or was staged, was made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import UsageError
from ..loop import ToolTraceEntry
from ._json_values import json_data, json_subset, short_json
from ._outcome import CaseOutcome
from ._score import Score
from ._scorer_support import NO_TARGET, check_scorer_name, scorer_error, target_of

__all__ = ["ExpectedCall", "ToolTraceMatch"]


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    """A tool call the agent should make: the tool's `name`, and `arguments` it must
    have been called with (a subset: the call may pass more; nested objects match as
    subsets too), or None for any arguments."""

    name: str
    arguments: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UsageError(f"an expected call names its tool, not {self.name!r}")
        if self.arguments is not None and not isinstance(self.arguments, Mapping):
            raise UsageError(f"an expected call's arguments are a mapping, not {self.arguments!r}")

    def matches(self, name: str, arguments: Any) -> bool:
        """Whether a made call (its tool and parsed arguments) is this one."""
        if name != self.name:
            return False
        return self.arguments is None or json_subset(json_data(self.arguments), arguments)

    def __str__(self) -> str:
        if self.arguments is None:
            return self.name
        return f"{self.name}({short_json(json_data(self.arguments), 80)})"

    @classmethod
    def parse(cls, value: object) -> ExpectedCall:
        """An `ExpectedCall`, a tool name, or a mapping `{"name": ..., "arguments": ...}`
        (as a dataset row spells it)."""
        if isinstance(value, ExpectedCall):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, Mapping) and set(value) <= {"name", "arguments"} and "name" in value:
            return cls(value["name"], value.get("arguments"))
        raise UsageError(
            f"an expected tool call is a tool name, an ExpectedCall or "
            f'{{"name": ..., "arguments": {{...}}}}, not {value!r}'
        )


Order = Literal["exact", "subsequence", "unordered"]


@dataclass(frozen=True, slots=True)
class _Made:
    name: str
    arguments: Any  # parsed JSON; None when the arguments were not an object


def _made_calls(trace: Sequence[ToolTraceEntry]) -> tuple[list[_Made], int]:
    """The calls that were made, in order, and how many were not."""
    made = []
    for entry in trace:
        if entry.denied or entry.unknown or entry.malformed_arguments:
            continue
        try:
            arguments = json.loads(entry.arguments) if entry.arguments else {}
        except json.JSONDecodeError:
            arguments = None
        made.append(_Made(entry.name, arguments))
    return made, len(trace) - len(made)


class ToolTraceMatch:
    """Scores the tool calls the agent made against the expected ones (`calls`, else
    the case's `expected`: a list of tool names, `ExpectedCall`s or
    `{"name", "arguments"}` mappings).

    - `order="subsequence"` (the default): the expected calls were made in this order,
      other calls between them allowed. Value: the most expected calls matched in order
      (a longest common subsequence), over how many are expected.
    - `order="exact"`: exactly these calls in this order, nothing else. Value: the
      matched-in-order count over the larger of expected and made, so an extra call
      costs as a missing one does.
    - `order="unordered"`: each expected call made, in any order, each made call
      answering at most one expected call. Value: matched over expected.

    `forbid` names tools that must not be called at all: one made call of them fails
    the case (value 0), whatever else matched. Given `forbid` and no `calls`, only that
    is checked (the case's `expected` is not read).
    """

    __slots__ = ("calls", "forbid", "name", "order")

    def __init__(
        self,
        calls: Sequence[ExpectedCall | str | Mapping[str, Any]] | None = NO_TARGET,
        *,
        order: Order = "subsequence",
        forbid: Sequence[str] = (),
        name: str = "tool_trace",
    ) -> None:
        if order not in ("exact", "subsequence", "unordered"):
            raise UsageError(
                f"ToolTraceMatch(order=) is 'exact', 'subsequence' or 'unordered', not {order!r}"
            )
        if isinstance(forbid, str) or not all(isinstance(f, str) for f in forbid):
            raise UsageError(f"ToolTraceMatch(forbid=) is a list of tool names, not {forbid!r}")
        self.calls: tuple[ExpectedCall, ...] | None = None
        if calls is not NO_TARGET:
            self.calls = _expected_calls(calls)
        self.order: Order = order
        self.forbid = tuple(forbid)
        self.name = check_scorer_name(name)

    async def score(self, outcome: CaseOutcome) -> Score:
        expected = self.calls
        if expected is None:
            if self.forbid:
                # Only tools to forbid: the case's expected is some other scorer's answer.
                expected = ()
            else:
                target = target_of(outcome, NO_TARGET, self.name)
                if isinstance(target, Score):
                    return target
                try:
                    expected = _expected_calls(target)
                except UsageError as exc:
                    return scorer_error(f"case {outcome.case.id!r}: {exc}")
        made, not_made = _made_calls(outcome.tool_trace)
        note = f" ({not_made} refused or malformed calls not counted)" if not_made else ""
        made_names = ", ".join(m.name for m in made) or "no calls"
        forbidden = sorted({m.name for m in made if m.name in self.forbid})
        if forbidden:
            return Score.of(False, f"called forbidden tools: {', '.join(forbidden)}{note}")
        if not expected:
            if self.order == "exact" and made:
                return Score.of(False, f"expected no calls, made: {made_names}{note}")
            return Score.of(True, f"made no call the case forbids{note}")
        matched = self._matched(expected, made)
        if self.order == "exact":
            total = max(len(expected), len(made))
            passed = matched == len(expected) == len(made)
            what = "exactly, in order"
        else:
            total = len(expected)
            passed = matched == total
            what = "in order" if self.order == "subsequence" else "in any order"
        if passed:
            return Score(1.0, f"made the {len(expected)} expected calls {what}{note}")
        wanted = ", ".join(str(e) for e in expected)
        return Score(
            matched / total,
            f"matched {matched} of {len(expected)} expected calls {what} (expected: "
            f"{wanted}; made: {made_names}){note}",
            passed=False,
        )

    def _matched(self, expected: Sequence[ExpectedCall], made: Sequence[_Made]) -> int:
        if self.order == "unordered":
            return _max_matching(expected, made)
        return _longest_common_subsequence(expected, made)


def _expected_calls(value: object) -> tuple[ExpectedCall, ...]:
    if isinstance(value, str | Mapping) or not isinstance(value, Sequence):
        raise UsageError(
            f"the expected tool calls are a list (of tool names, ExpectedCalls or "
            f'{{"name", "arguments"}} mappings), not {value!r}'
        )
    return tuple(ExpectedCall.parse(v) for v in value)


def _longest_common_subsequence(expected: Sequence[ExpectedCall], made: Sequence[_Made]) -> int:
    """How many expected calls the made ones match in order, at most."""
    row = [0] * (len(made) + 1)
    for want in expected:
        previous_diagonal = 0
        for j, call in enumerate(made, start=1):
            above = row[j]
            if want.matches(call.name, call.arguments):
                row[j] = previous_diagonal + 1
            else:
                row[j] = max(row[j], row[j - 1])
            previous_diagonal = above
    return row[-1]


def _max_matching(expected: Sequence[ExpectedCall], made: Sequence[_Made]) -> int:
    """How many expected calls can each be answered by a different made call (a
    maximum bipartite matching, by augmenting paths: a greedy choice could give a
    call to the wrong expectation when two of them accept it)."""
    accepts = [
        [j for j, call in enumerate(made) if want.matches(call.name, call.arguments)]
        for want in expected
    ]
    owner: dict[int, int] = {}  # made call -> the expected call it answers

    def assign(i: int, seen: set[int]) -> bool:
        for j in accepts[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or assign(owner[j], seen):
                owner[j] = i
                return True
        return False

    return sum(assign(i, set()) for i in range(len(expected)))
