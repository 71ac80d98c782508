"""A case of an eval: what the agent is asked, what a right answer looks like, and the
world it runs in (its fixture, its budget).

`Case` is a value: a dataset loader builds it from a row, Python code builds it directly
(with typed `input` and `expected`, pydantic models or anything JSON can carry). Its id is
the key its results are stored under, so it is checked like a run id: a case id is part
of the run ids of its runs (`{eval_id}:{case_id}:e{epoch}`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..errors import UsageError
from ..loop import Budget

__all__ = ["MAX_CASE_ID", "Case", "CaseBudget", "check_case_id"]

#: The longest case id: it is part of its runs' ids, which the stores key on.
MAX_CASE_ID = 100
_CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def check_case_id(case_id: object) -> str:
    """`case_id` if it can name a case, else `UsageError` saying what a case id is."""
    if not isinstance(case_id, str) or not case_id:
        raise UsageError(f"a case id must be a non-empty string, not {case_id!r}")
    if len(case_id) > MAX_CASE_ID:
        raise UsageError(
            f"case id {case_id[:40]!r}...: {len(case_id)} characters; at most {MAX_CASE_ID}"
        )
    if _CASE_ID.fullmatch(case_id) is None:
        raise UsageError(
            f"case id {case_id!r}: use letters, digits, '_', '.' and '-', starting with a "
            "letter or digit (it is part of the ids of the case's runs)"
        )
    return case_id


@dataclass(frozen=True, slots=True)
class CaseBudget:
    """A case's own ceilings (None: no ceiling of that kind). Each run of the case (one per
    epoch) gets a fresh `Budget` of these, inside what the eval's budget lets it reserve."""

    max_steps: int | None = None
    max_output_tokens: int | None = None
    max_cost_usd: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_output_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise UsageError(f"a case budget's {name} must be an int, not {value!r}")
            if value is not None and value < 1:
                raise UsageError(f"a case budget's {name} must be at least 1, not {value}")
        cost = self.max_cost_usd
        if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float)):
            raise UsageError(f"a case budget's max_cost_usd must be a number, not {cost!r}")
        if cost is not None and not cost > 0:
            raise UsageError(f"a case budget's max_cost_usd must be positive, not {cost}")

    def budget(self) -> Budget:
        """A fresh `Budget` with these ceilings and nothing spent."""
        return Budget(
            max_steps=self.max_steps,
            max_output_tokens=self.max_output_tokens,
            max_cost_usd=self.max_cost_usd,
        )


@dataclass(frozen=True, slots=True)
class Case:
    """One case. `input` is what the agent is asked: a string is the prompt as it is; a
    pydantic model, a mapping or a list is sent as its JSON. `expected` is what scorers
    compare with (None: the case has no expected answer; scorers that need one say so).
    `fixture` is a directory the case's run works in, on a private copy of its own; None
    runs it in an empty directory. `tags` select cases (`Dataset.select`)."""

    id: str
    input: Any
    expected: Any = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    fixture: Path | None = None
    budget: CaseBudget | None = None
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_case_id(self.id)
        if self.input is None:
            raise UsageError(f"case {self.id!r} has no input: say what the agent is asked")
        if self.fixture is not None and not isinstance(self.fixture, Path):
            object.__setattr__(self, "fixture", Path(self.fixture))
        if isinstance(self.tags, str) or not all(isinstance(t, str) for t in self.tags):
            raise UsageError(f"case {self.id!r}: tags must be a sequence of strings")
        object.__setattr__(self, "tags", tuple(self.tags))

    def prompt(self) -> str:
        """The input as the agent's prompt."""
        if isinstance(self.input, str):
            return self.input
        if isinstance(self.input, BaseModel):
            return self.input.model_dump_json()
        return json.dumps(self.input, sort_keys=True, default=str)
