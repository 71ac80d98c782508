"""What a resumed eval does with the records an earlier run of it left, when the eval was
changed meanwhile.

A record is skipped on resume because it answers the case as the eval asks it now, with
the scores the eval wants now. Two changes break that, and each is met where it costs
least:

- **A changed case** (its input, expected answer, metadata, fixture path or budget; not its
  tags, which only select cases): its stored runs answered another question, or were
  scored against another answer, so they are made again, like runs that were never
  recorded (the new record replaces the old one, its `attempt` one higher). The stored
  form is JSON, written by another process, so the case as it is now is compared with it
  in a canonical form (`same_as_stored`), not as JSON text: a set matches its stored list
  in any order (a set's order follows the process's hash seed), a mapping's keys in any
  order, a NaN or an infinity the null JSON made of it. A value JSON cannot carry was
  stored as its `repr`, which says nothing reliable (it can hold a memory address): it
  counts as unchanged, and the eval logs a warning once. The fixture's files are not
  compared: a fixture changed in place is not seen.
- **A changed set of scorers** (one added, one removed): every stored record lacks the new
  scorer's score, or keeps the old one's, so the report would mix two evals. Running every
  case again would spend the whole eval's budget a second time for scores a rescore gives
  for nothing, so the eval is refused (`UsageError`) before it runs or writes anything,
  saying what changed and what to do: `rescore` the stored outcomes with the added
  scorers (it calls no model, so an LLM judge cannot be added this way), then resume; or
  run the changed eval under a new eval id. A scorer changed under the same name (a new
  target, a new rubric) cannot be seen here: give it a new name, or the eval a new id.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ..errors import UsageError
from ._case import Case
from ._outcome import Scorer
from ._results import EvalRecord, StoredCase

__all__ = ["case_changes", "refuse_changed_scorers"]

#: What a case's stored runs depend on: every field of its definition but its tags.
_COMPARED = ("input", "expected", "metadata", "fixture", "budget")


class _Opaque:
    """A value JSON cannot carry (stored as its `repr`): it matches whatever was stored."""


class _Unordered(tuple[Any, ...]):
    """A set's members, canonical: they match a stored list in any order."""


def _canonical(value: Any) -> Any:
    """`value` as the JSON it is stored as, except that a set stays `_Unordered`, a
    float JSON cannot carry is None (what the store wrote for it), and what JSON cannot
    carry is `_Opaque`."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, set | frozenset):
        return _Unordered(_canonical(item) for item in value)
    if isinstance(value, Mapping):
        return {str(_canonical(key)): _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, BaseModel):
        return _canonical(value.model_dump(mode="python"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _canonical(dataclasses.asdict(value))
    try:
        data = to_jsonable_python(value)  # a path, a date, an enum: as the store has it
    except PydanticSerializationError:
        return _Opaque()
    return _canonical(data)


def same_as_stored(stored: Any, value: Any, *, on_opaque: Callable[[], None]) -> bool:
    """Whether `value` (as it is now) is what `stored` (its JSON, read back) was made
    from, compared canonically (see the module docstring); `on_opaque` is called when a
    part of `value` JSON cannot carry was taken as unchanged."""
    return _same(stored, _canonical(value), on_opaque)


def _same(stored: Any, now: Any, on_opaque: Callable[[], None]) -> bool:
    if isinstance(now, _Opaque):
        on_opaque()
        return True
    if isinstance(stored, float) and not math.isfinite(stored):
        stored = None
    if isinstance(now, _Unordered):
        if not isinstance(stored, list) or len(stored) != len(now):
            return False
        unmatched = list(stored)
        for item in now:  # a multiset match: sets in metadata are small
            found = next(
                (i for i, old in enumerate(unmatched) if _same(old, item, on_opaque)), None
            )
            if found is None:
                return False
            del unmatched[found]
        return True
    if isinstance(now, dict):
        return (
            isinstance(stored, dict)
            and stored.keys() == now.keys()
            and all(_same(stored[key], item, on_opaque) for key, item in now.items())
        )
    if isinstance(now, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(now)
            and all(_same(old, item, on_opaque) for old, item in zip(stored, now, strict=True))
        )
    if isinstance(now, bool) or isinstance(stored, bool):
        return type(now) is type(stored) and now == stored  # JSON's true is not 1
    return bool(stored == now)


def case_changes(
    stored: StoredCase, case: Case, *, on_opaque: Callable[[], None] | None = None
) -> tuple[str, ...]:
    """The fields of `case`'s definition that differ from the one its run was stored
    with (empty: the stored run answers the case as it is), compared canonically;
    `on_opaque` is called when a value JSON cannot carry was taken as unchanged."""
    now = StoredCase.of(case)
    seen = on_opaque if on_opaque is not None else (lambda: None)
    values = {"input": case.input, "expected": case.expected, "metadata": dict(case.metadata)}
    return tuple(
        name
        for name in _COMPARED
        if not (
            same_as_stored(getattr(stored, name), values[name], on_opaque=seen)
            if name in values
            else getattr(stored, name) == getattr(now, name)
        )
    )


def refuse_changed_scorers(existing: EvalRecord | None, scorers: Sequence[Scorer]) -> None:
    """`UsageError` if eval `existing` was scored by another set of scorers than
    `scorers` (see the module docstring); nothing when it is new or unchanged."""
    if existing is None:
        return
    before, now = set(existing.scorers), {scorer.name for scorer in scorers}
    if before == now:
        return
    eval_id = existing.eval_id
    added, removed = sorted(now - before), sorted(before - now)
    changes = []
    if added:
        changes.append(f"its stored runs have no score from {added!r}")
    if removed:
        changes.append(f"they keep the scores of {removed!r}, which it no longer has")
    adding = (
        f"To add {added!r} to the stored runs without running the agent, "
        f"rescore(bus, {eval_id!r}, [...]) with them (a rescore calls no model, so not an "
        "LLM judge), then resume. "
        if added
        else ""
    )
    raise UsageError(
        f"eval {eval_id!r} was scored with the scorers {sorted(before)!r} and is resumed "
        f"with {sorted(now)!r}: {' and '.join(changes)}, so its report would mix the two. "
        f"{adding}To run the eval as it is now, give it a new eval_id."
    )
