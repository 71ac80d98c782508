"""A durable run's checkpoint as a base and per-step deltas (issue 19).

Writing the whole `RunState` at every step boundary costs what the history weighs, so a
durable step grew with its run. Instead the durability port writes the whole state (a
*base*, `CheckpointStore.save`) only when it must — its first checkpoint of the run, a
suspension, the run's end, a history rewritten (compaction, a rewind), or once the deltas
since the base outweigh it — and otherwise a *delta*: what changed since the last write.

A delta is the JSON of:
- `at` and `messages`: keep the first `at` messages, then append these (`at` is the
  length last written, or one less when the last message was replaced: steering folded
  into the user turn that ends the transcript). A deeper rewrite is a base;
- `calls`: the call records new or changed since the last write, whole;
- `result_ids`: the entries new or changed;
- `calls_at` and `model_calls_history`: keep the first `calls_at` entries of the state's
  `model_calls_history`, then append these (it grows by one entry a step, and loses
  only entries at its end: a compaction, a rewind);
- `fields`: every other field of the state whose JSON changed, whole (a field added to
  `RunState` later is covered without a word here);
- `extend`: `{field: [n, items]}` for such a field that is a list the step only appended
  to (keep its first `n` items, append these): a list that grows with the run (such as
  `tasks_history`) would else make every delta carry the run's whole list again.

Messages are frozen values, so "unchanged" is identity (a list compare that never reads
a message). Call records and result ids are changed only in the step that made them (the
dispatch, the suspension), so only the records of the step last written and later are
compared: the cost is the step's, not the run's. Everything else is compared as JSON.

Loading applies the deltas to the base's state as decoded JSON, then reads it as a
`RunState` (`apply_delta`), so the state loaded is the one a whole write would have
stored. The deltas live in *segments* (`<run_id>/steps/<n>`, see `CheckpointStore`), a
few deltas each, so a step rewrites one small record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import TypeAdapter

from ..conversation import Message
from ..state import CallsAt, RunState

__all__ = ["StepDeltas", "apply_delta"]

#: Fields a delta carries by their own rule; `written_by` is the base's (stamped as it
#: is written), `schema_version` too.
_OWN_RULE: set[str] = {
    "messages",
    "calls",
    "result_ids",
    "model_calls_history",
    "written_by",
    "schema_version",
}
_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_HISTORY: TypeAdapter[list[CallsAt]] = TypeAdapter(list[CallsAt])

#: A segment holds at most this many deltas, or this many bytes of them, then the next
#: one starts: a step rewrites one bounded record.
SEGMENT_DELTAS = 8
SEGMENT_BYTES = 32 * 1024
#: A base is written again once the deltas since the last one weigh more than this many
#: times it (and more than `_DELTA_FLOOR` bytes): the base's cost is spread over the
#: steps that outweighed it, and a load reads a bounded chain.
_REBASE_RATIO = 2
_DELTA_FLOOR = 64 * 1024


def _other_fields(state: RunState) -> dict[str, Any]:
    return state.model_dump(mode="json", exclude=_OWN_RULE)


@dataclass(slots=True)
class _Written:
    """What was written of the run, as the next delta is computed against."""

    messages: list[Message]
    calls: dict[str, dict[str, Any]]
    result_ids: dict[str, str]
    fields: dict[str, Any]
    step: int
    calls_history: list[CallsAt] = field(default_factory=list)


@dataclass(slots=True)
class Pending:
    """A delta computed and not yet written: `StepDeltas.wrote(pending)` once it is."""

    data: bytes
    at: int
    messages: list[Message]
    calls: dict[str, dict[str, Any]]
    result_ids: dict[str, str]
    fields: dict[str, Any]
    step: int
    #: The entries of `model_calls_history` kept, and those appended after them.
    calls_at: int
    calls_history: list[CallsAt]


@dataclass(slots=True)
class StepDeltas:
    """One port's record of one run since the base it wrote last (`gen`): what it wrote,
    and where the next delta goes (`segment`, after the deltas already in it)."""

    gen: str
    base_bytes: int
    written: _Written
    segment: int = 0
    in_segment: list[bytes] = field(default_factory=list)
    #: The number (since the base, from 0) of the first delta in `segment`.
    segment_first: int = 0
    #: Bytes of deltas written since the base.
    delta_bytes: int = 0

    @classmethod
    def after_base(cls, state: RunState, gen: str, base_bytes: int) -> StepDeltas:
        written = _Written(
            list(state.messages),
            {call_id: dict(record.__dict__) for call_id, record in state.calls.items()},
            dict(state.result_ids),
            _other_fields(state),
            state.step,
            list(state.model_calls_history),
        )
        return cls(gen, base_bytes, written)

    def delta(self, state: RunState) -> Pending | None:
        """The delta from what was written to `state`; None when a base is due instead
        (the history was rewritten, a record removed, or the deltas outweigh the base)."""
        last = self.written
        messages = state.messages
        at = len(last.messages)
        if len(messages) < at - 1:
            return None
        if len(messages) >= at and messages[:at] == last.messages:
            pass
        elif at and messages[: at - 1] == last.messages[: at - 1]:
            at -= 1  # the last message was replaced (text folded into it)
        else:
            return None  # rewritten deeper: compaction, a rewind
        calls = _changed_calls(state, last)
        result_ids = _changed_entries(state.result_ids, last.result_ids)
        if calls is None or result_ids is None:
            return None
        fields = _other_fields(state)
        changed: dict[str, Any] = {}
        extended: dict[str, list[Any]] = {}
        for name, value in fields.items():
            before = last.fields.get(name)
            if before == value:
                continue
            kept = _appended_to(before, value)
            if kept is not None:
                extended[name] = [kept, value[kept:]]
            else:
                changed[name] = value
        new = messages[at:]
        history = state.model_calls_history
        kept = _kept_history(history, last.calls_history)
        record: dict[str, Any] = {"at": at}
        if new:
            record["messages"] = orjson.Fragment(_MESSAGES.dump_json(new))
        if kept != len(last.calls_history) or kept != len(history):
            record["calls_at"] = kept
            record["model_calls_history"] = orjson.Fragment(_HISTORY.dump_json(history[kept:]))
        if calls:
            record["calls"] = {
                call_id: state.calls[call_id].model_dump(mode="json") for call_id in calls
            }
        if result_ids:
            record["result_ids"] = result_ids
        if changed:
            record["fields"] = changed
        if extended:
            record["extend"] = extended
        data = orjson.dumps(record)
        if self.delta_bytes + len(data) > max(_REBASE_RATIO * self.base_bytes, _DELTA_FLOOR):
            return None
        snapshots = {call_id: dict(state.calls[call_id].__dict__) for call_id in calls}
        return Pending(
            data, at, new, snapshots, result_ids, fields, state.step, kept, history[kept:]
        )

    def next_segment(self, data: bytes) -> tuple[int, int, list[bytes]]:
        """Where `data` goes: the segment, the number of its first delta (see
        `CheckpointStore.save_steps`), and every delta that segment then holds."""
        held = self.in_segment
        if held and (
            len(held) >= SEGMENT_DELTAS or sum(map(len, held)) + len(data) > SEGMENT_BYTES
        ):
            return self.segment + 1, self.segment_first + len(held), [data]
        return self.segment, self.segment_first, [*held, data]

    def wrote(self, pending: Pending, segment: int, first: int, deltas: list[bytes]) -> None:
        """`pending` is in the store, in `segment` (which holds `deltas`, from `first`)."""
        last = self.written
        del last.messages[pending.at :]
        last.messages.extend(pending.messages)
        last.calls.update(pending.calls)
        last.result_ids.update(pending.result_ids)
        last.fields, last.step = pending.fields, pending.step
        del last.calls_history[pending.calls_at :]
        last.calls_history.extend(pending.calls_history)
        self.segment, self.segment_first, self.in_segment = segment, first, deltas
        self.delta_bytes += len(pending.data)


def _appended_to(before: Any, value: Any) -> int | None:
    """The length of `before` if the list `value` is the list `before` with items
    appended, else None."""
    if not isinstance(before, list) or not isinstance(value, list):
        return None
    kept = len(before)
    return kept if kept < len(value) and value[:kept] == before else None


def _changed_calls(state: RunState, last: _Written) -> list[str] | None:
    """The ids of the call records new or changed since `last` (None: one was removed).
    Records change only in the step that made them, and are kept in the order they were
    made: the scan from the newest stops at the first record of an earlier step than
    the one last written."""
    calls = state.calls
    if len(calls) < len(last.calls):
        return None
    changed: list[str] = []
    for call_id in reversed(calls):
        record = calls[call_id]
        before = last.calls.get(call_id)
        if before is not None and record.step < last.step:
            break
        if before != record.__dict__:
            changed.append(call_id)
    changed.reverse()
    return changed


def _kept_history(now: list[CallsAt], last: list[CallsAt]) -> int:
    """How many of the entries of `last` (the history written) begin `now`. The history
    only loses entries at its end and appends new ones, each counting more calls than
    any before it, so the scan from the end stops at the first entry both have: the
    cost is what changed, not the run's length."""
    kept = min(len(now), len(last))
    while kept and now[kept - 1] != last[kept - 1]:
        kept -= 1
    return kept


def _changed_entries(now: dict[str, str], last: dict[str, str]) -> dict[str, str] | None:
    """The entries of `now` new or changed since `last`, newest last (None: one was
    removed). Set as a call's result is streamed, in order: the scan from the newest
    stops at the first entry already written as it is."""
    if len(now) < len(last):
        return None
    changed: list[tuple[str, str]] = []
    for key in reversed(now):
        value = now[key]
        if last.get(key) == value:
            break
        changed.append((key, value))
    changed.reverse()
    return dict(changed)


def apply_delta(state: dict[str, Any], delta: dict[str, Any]) -> None:
    """Apply one delta to a state as decoded JSON (see the module docstring)."""
    at = int(delta["at"])
    messages = state.setdefault("messages", [])
    del messages[at:]
    messages.extend(delta.get("messages", ()))
    state.setdefault("calls", {}).update(delta.get("calls", {}))
    state.setdefault("result_ids", {}).update(delta.get("result_ids", {}))
    if "calls_at" in delta:
        history = state.setdefault("model_calls_history", [])
        del history[int(delta["calls_at"]) :]
        history.extend(delta.get("model_calls_history", ()))
    state.update(delta.get("fields", {}))
    for name, (kept, items) in delta.get("extend", {}).items():
        state[name] = [*(state.get(name) or ())[: int(kept)], *items]
