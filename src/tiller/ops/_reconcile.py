"""A person settles the calls a crash left uncertain: done, failed, or to be run again.

Until each uncertain call is marked, a resume refuses (`ResumeReplayBlocked`), so no side
effect runs twice without a person deciding it should (law 5)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..conversation import ToolCall
from ..errors import UsageError
from ..store import DEFAULT_BUCKET, Bus, CheckpointStore
from ._runs import uncertain_calls

__all__ = ["DONE_DEFAULT", "FAILED_DEFAULT", "CallVerdict", "Reconciled", "reconcile"]

DONE_DEFAULT = "Completed (marked done by a person after a crash; its output was not recorded)."
FAILED_DEFAULT = "Failed (marked failed by a person after a crash)."

#: done: it happened (the model reads the result); failed: it did not, or went wrong (the
#: model reads the result as an error); rerun: run it again when the run resumes.
CallVerdict = Literal["done", "failed", "rerun"]


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What `reconcile` marked, in order, and the uncertain calls left unmarked."""

    marked: list[tuple[ToolCall, CallVerdict]]
    uncertain: list[ToolCall]


async def reconcile(
    store: Bus,
    run_id: str,
    marks: Sequence[tuple[str, CallVerdict]] = (),
    *,
    result: str | None = None,
    bucket: str = DEFAULT_BUCKET,
) -> Reconciled:
    """Mark uncertain calls of `run_id` (call id, verdict); `result` is what the model
    reads for done and failed ones (a default saying a person marked it, if None).
    Every mark is checked before any is written: a call marked twice, or one that is not
    uncertain, is a `UsageError` naming the uncertain calls. With no marks, this only
    reports the uncertain calls."""
    checkpoints = CheckpointStore(store, bucket)
    checkpoint = await checkpoints.load(run_id)
    logs = await checkpoints.calls(run_id)
    uncertain = {call.id: call for call in uncertain_calls(checkpoint.state, logs)}
    seen: set[str] = set()
    for call_id, _ in marks:
        if call_id in seen:
            raise UsageError(f"call {call_id} is marked twice; give each call one verdict")
        seen.add(call_id)
        if call_id not in uncertain:
            known = ", ".join(uncertain) or "none"
            raise UsageError(
                f"call {call_id} of run {run_id} is not uncertain; the uncertain calls are: {known}"
            )
    if result is not None and not any(verdict != "rerun" for _, verdict in marks):
        raise UsageError("--result goes with --done or --failed")
    marked: list[tuple[ToolCall, CallVerdict]] = []
    for call_id, verdict in marks:
        call = uncertain.pop(call_id)
        if verdict == "rerun":
            await checkpoints.forget_call(run_id, call_id)
        else:
            default = DONE_DEFAULT if verdict == "done" else FAILED_DEFAULT
            text = result if result is not None else default
            await checkpoints.mark_call(run_id, call_id, content=text, is_error=verdict == "failed")
        marked.append((call, verdict))
    return Reconciled(marked, list(uncertain.values()))
