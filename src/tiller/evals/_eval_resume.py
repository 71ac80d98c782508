"""What a resumed eval does with the records an earlier run of it left, when the eval was
changed meanwhile.

A record is skipped on resume because it answers the case as the eval asks it now, with
the scores the eval wants now. Two changes break that, and each is met where it costs
least:

- **A changed case** (its input, expected answer, metadata, fixture path or budget; not its
  tags, which only select cases): its stored runs answered another question, or were
  scored against another answer, so they are made again, like runs that were never
  recorded (the new record replaces the old one, its `attempt` one higher). Compared as
  stored, i.e. as JSON: what JSON cannot carry is compared by its `repr`. The fixture's
  files are not compared: a fixture changed in place is not seen.
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

from collections.abc import Sequence

from ..errors import UsageError
from ._case import Case
from ._outcome import Scorer
from ._results import EvalRecord, StoredCase

__all__ = ["case_changes", "refuse_changed_scorers"]

#: What a case's stored runs depend on: every field of its definition but its tags.
_COMPARED = ("input", "expected", "metadata", "fixture", "budget")


def case_changes(stored: StoredCase, case: Case) -> tuple[str, ...]:
    """The fields of `case`'s definition that differ from the one its run was stored
    with (empty: the stored run answers the case as it is)."""
    now = StoredCase.of(case)
    return tuple(name for name in _COMPARED if getattr(stored, name) != getattr(now, name))


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
