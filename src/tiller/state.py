"""`RunState`: everything a run has produced and decided, as one serializable value.

The loop is a function of `RunState` plus the run's contexts: nothing a resume would need
lives only in local variables. At every step boundary the state is complete, so
suspending is persisting it and resuming is loading it (durable runs build on this).

Serialization is pydantic JSON with a `schema_version` and a `written_by` (the tiller
that wrote it); `RunState.from_json` reads the versions of the ledger below (an older one
is migrated as it is read) and refuses any other, with a message saying which it found; a
newer one is refused with `NewerRunState`, naming the tiller that wrote it.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from . import _public
from ._schema_ledger import LEDGER, newer_problem, tiller_version, written_by_of
from .conversation import AssistantMessage, Message, Taint, ToolCall, Usage, UserMessage
from .errors import NewerSchemaError, TillerError
from .phase import Phase

__all__ = [
    "CallRecord",
    "CallsAt",
    "ChecklistAt",
    "CallStatus",
    "CompactionState",
    "RewrittenHistory",
    "NewerRunState",
    "RunState",
    "RunStateError",
    "StopCause",
    "TraceContext",
]

#: The versions, in short (the ledger is `tiller._schema_ledger.LEDGER["run_state"]`,
#: rendered in docs/schema-versions.md):
#:
#: 1 → 2: a tool call carries `provider_id`, the provider's id, beside `id`, now always the
#:        runtime's (`{run_id}-call-{n}`, law 10). A version 1 call has no `provider_id`
#:        (its `id` was the provider's, and stays its id): it reads as `provider_id=""`,
#:        and the codecs send its `id` back, as before.
#: 2 → 3: one vocabulary (issue 15): the agent's typed state is `agent_state` (was
#:        `state`), a call record's step is `step` (was `turn`), and the stop cause
#:        `turn_budget` is `step_budget`. An older state's keys are renamed as it is read
#:        (`_renamed_keys`); `"turn_budget"` still reads (`StopCause._missing_`).
#: 3 → 4: `folded_steers` and `folded_mail` (issue 16). A version 3 state has no steer
#:        ids (it reads with none), and its mail is not known: `folded_mail` reads as
#:        None, so a continued run re-delivers nothing it may already have folded.
#: 4 → 5: `model_calls` (issue 18); a version 4 state reads with it equal to `step`.
#: 5 → 6: `model_calls_history` (issue 18), for a rewind; an older state reads with none
#:        (a rewind of it keeps the count: nothing earlier is known).
#: 6 → 7: the recorded policy's `mailbox` (the run's mailbox route); an older state has
#:        none, and reads unchanged.
#: 7 → 8: `trace_context` (issue 20), the W3C trace ids a resumed run continues; an older
#:        state reads with none (its resumed segment starts a trace of its own).
SCHEMA_VERSION = LEDGER["run_state"].current
#: Every version `from_json` reads.
READABLE_VERSIONS = LEDGER["run_state"].readable

#: Every taint a conversation can hold, by its stored value (`RunState.taint_flags`).
_TAINTS: tuple[Taint, ...] = tuple(Taint(value) for value in range(4))


class RunStateError(TillerError):
    """A serialized run state cannot be loaded (wrong schema version, or corrupt)."""


class NewerRunState(RunStateError, NewerSchemaError):
    """A serialized run state of a schema newer than this tiller knows: a newer tiller
    wrote it (`written_by`, None when it does not say). Upgrade tiller to resume it."""

    def __init__(self, message: str, written_by: str | None) -> None:
        super().__init__(message)
        self.written_by = written_by


class StopCause(enum.Enum):
    """Why a run stopped; `RunResult.stop_cause`.

    `STEP_BUDGET` was `TURN_BUDGET` (`"turn_budget"`) before issue 15: a stored
    `"turn_budget"` still reads as `STEP_BUDGET`, and `StopCause.STEP_BUDGET` is an alias
    of it, deprecated, going in the next release.
    """

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    SUSPENDED = "suspended"
    MAX_STEPS = "max_steps"
    STEP_BUDGET = "step_budget"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"
    LOOP = "loop"
    NO_OUTPUT = "no_output"
    REFUSED = "refused"
    HANDOFF = "handoff"
    ERROR = "error"
    #: Deprecated: the previous release's name of `STEP_BUDGET` (an alias of it).
    TURN_BUDGET = "step_budget"

    @classmethod
    def _missing_(cls, value: object) -> StopCause | None:
        # Stored before issue 15 renamed it (checkpoints, event logs, eval results).
        if value == "turn_budget":
            return cls.STEP_BUDGET
        return None


CallStatus = Literal["pending", "started", "completed", "failed"]


class CallRecord(BaseModel):
    """One tool call's life: `pending → started → completed | failed`, and what came of it."""

    model_config = ConfigDict(extra="forbid")

    call_id: str
    name: str
    #: The step the call was made in (`RunState.step` then).
    step: int
    status: CallStatus = "pending"
    is_error: bool = False
    #: Who refused it, if it was refused: user, policy, hook, phase, withheld, unknown tool.
    refused_by: str | None = None
    malformed_arguments: bool = False
    #: What the model wrote instead of JSON arguments, kept so a resumed run answers the
    #: call with the same error instead of running it (its transcript holds `{}`).
    malformed_text: str | None = None
    staged: bool = False
    #: The outbox item a staged call became.
    outbox_item: str | None = None
    #: The call's result, kept while its step is incomplete (the step paused on other
    #: calls, or left some to the client): the transcript gets it when the step ends, and
    #: until then a continuation must answer the call with it instead of running it.
    result: str | None = None


class RewrittenHistory(BaseModel):
    """One compaction's audit record: what the history looked like before it was rewritten.

    `originals` are the messages the compaction changed or removed, as they were. With a
    store, the whole pre-rewrite history goes to the store instead (`store_key`, in the
    `tiller-compactions` bucket) and `originals` stays empty, so checkpoints stay small.
    """

    model_config = ConfigDict(extra="forbid")

    #: Which compaction of the run this was (1, 2, ...).
    number: int
    #: The model turns taken when it happened.
    step: int
    #: `threshold` (the prompt reached the run's compaction threshold) or `overflow` (the
    #: provider rejected the prompt as too long).
    reason: Literal["threshold", "overflow"]
    passes: list[str] = Field(default_factory=list)
    originals: list[Message] = Field(default_factory=list)
    store_key: str | None = None


class CompactionState(BaseModel):
    """What compaction has done to a run, and the loop guard it arms (`RunState.compaction`).

    Small and bounded: `rewritten` keeps the last few audit records only (the rest are
    counted in `rewritten_dropped`, and kept whole in the store when the run has one).
    """

    model_config = ConfigDict(extra="forbid")

    #: Compactions that changed the history (any pass).
    compactions: int = 0
    #: Of those, the ones that replaced a prefix with a summary.
    summaries: int = 0
    #: Times the provider rejected a prompt as too long and the run compacted and went on.
    overflow_recoveries: int = 0
    #: A summary failed (empty, cut off, or the call failed): no more summaries are tried
    #: in this run; the cheap passes go on.
    gave_up: bool = False
    gave_up_reason: str | None = None
    #: The user's first request, verbatim (bounded), kept once a summary replaced it.
    first_request: str | None = None
    rewritten: list[RewrittenHistory] = Field(default_factory=list)
    rewritten_dropped: int = 0
    #: Loop guard (armed after the first compaction): the hash of the last tool exchange,
    #: how many times in a row it came back the same, and the call it was last fed.
    guard_hash: str | None = None
    guard_count: int = 0
    guard_seen: str | None = None


class ChecklistAt(BaseModel):
    """The task checklist as it stood once the conversation had `messages` messages (the
    last change made at that length), so `tiller rewind` can put it back with them."""

    model_config = ConfigDict(extra="forbid")

    messages: int
    tasks: list[dict[str, Any]] = Field(default_factory=list)


class CallsAt(BaseModel):
    """The run had made `model_calls` calls to its model when it first called it with a
    conversation of `messages` messages, so `tiller rewind` can put the count back: the
    rewound run's next call is numbered as the one that answered there."""

    model_config = ConfigDict(extra="forbid")

    messages: int
    model_calls: int


class TraceContext(BaseModel):
    """Where a run's OpenTelemetry spans go (issue 20), as W3C `traceparent` strings:
    every segment of the run (the first, and each resumed one) goes under `parent`, and
    links to `previous`, the span of the segment before it. One logical run, one trace."""

    model_config = ConfigDict(extra="forbid")

    parent: str
    previous: str


class RunState(BaseModel):
    """The whole of a run, at a step boundary."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    schema_version: int = SCHEMA_VERSION
    #: The tiller that last wrote it (stamped by `to_json`, as the stored records are);
    #: None until written, or when it was written before the field existed.
    written_by: str | None = None
    run_id: str
    thread_id: str
    agent_name: str = "agent"
    messages: list[Message] = Field(default_factory=list)
    #: Steps taken so far (each is one model call in this run).
    step: int = 0
    #: Calls this run made to its agent's model, every attempt counted (retries, the
    #: compaction summary's, the classifier's when it is the run's own model): the
    #: `ModelRequest.run_call` of the next is one more, so an offline model keeps its
    #: place in its script across a suspension and a resume, in any process.
    model_calls: int = 0
    #: Where each conversation length was first answered (`CallsAt`, oldest first), so a
    #: rewind puts `model_calls` back with the conversation (`model_calls_at`).
    model_calls_history: list[CallsAt] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    #: Whether `usage` counts every model call (false after a cancel mid-stream).
    usage_complete: bool = True
    taint: int = Taint.NONE.value
    phase: Phase = Phase.EXECUTE
    #: The agent's typed state (the `S` of `AgUiContext[S]`), as JSON.
    agent_state: Any = None
    calls: dict[str, CallRecord] = Field(default_factory=dict)
    #: Open AG-UI interrupts (wire dicts) while suspended.
    interrupts: list[dict[str, Any]] = Field(default_factory=list)
    #: Steering text taken from the queue but not yet sent to the model.
    pending_input: list[str] = Field(default_factory=list)
    #: The ids of the stored steers (`tiller.store.ControlStore.steer`) folded into the
    #: conversation, oldest first: a process that continues the run (a recovery, a
    #: takeover) finds every steer still stored, and folds only those not here.
    folded_steers: list[str] = Field(default_factory=list)
    #: The ids of the mail folded into the conversation, oldest first: mail its run
    #: claimed that is not here (claimed by a process that died before its checkpoint)
    #: is delivered again by the continuation. None: not known (a state written before
    #: this field), and then nothing is delivered again.
    folded_mail: list[str] | None = Field(default_factory=list)
    #: How many message, call and subagent ids this run id has handed out (`RunIds`), so
    #: a continued run goes on numbering instead of reusing ids.
    id_counters: dict[str, int] = Field(default_factory=dict)
    #: The run's task checklist as the `TaskBroker` last published it (`Task` dicts:
    #: id, subject, description, status, created_turn, updated_turn), so a resumed run
    #: seeds its broker with it. Plain dicts: the state does not depend on the tools.
    tasks: list[dict[str, Any]] = Field(default_factory=list)
    #: Each change of the checklist, with the conversation's length when it was made (one
    #: entry per length, oldest first), so a rewind to a message restores the checklist
    #: of that moment (`checklist_at`).
    tasks_history: list[ChecklistAt] = Field(default_factory=list)
    #: What a person approved "always" for this run (`approval_key`s), kept across a
    #: suspension so a served run's "approve always" holds after its resume.
    always_approved: list[str] = Field(default_factory=list)
    #: What compaction did to the history (counts, the give-up flag, audit records, the
    #: loop guard's memory).
    compaction: CompactionState = Field(default_factory=CompactionState)
    #: Calls left for the client to run (AG-UI frontend tools), when the run ended on them.
    client_calls: list[str] = Field(default_factory=list)
    #: Text the runtime folded into user turns that no person typed (another agent's
    #: mail, a compaction summary): never taken as the user's request (the classifier's
    #: goal, a summary's "original request"). Pruned to what the transcript still holds.
    not_from_person: list[str] = Field(default_factory=list)
    #: The message id each call's result was streamed with, so every later
    #: `MESSAGES_SNAPSHOT` names it the same (clients merge snapshots by id).
    result_ids: dict[str, str] = Field(default_factory=dict)
    empty_turn_nudges: int = 0
    output_retries: int = 0
    stop_cause: StopCause | None = None
    error: str | None = None
    #: Where the agent is defined, as `"module:attr"` (an `Agent`, or a factory returning
    #: one, given `model=` when it takes it): a process that never saw the run's code can
    #: load it again
    #: (`tiller.loop.load_agent`, `tiller runs resume`). None when unknown.
    agent_ref: str | None = None
    #: The model string the agent was built from (`"ollama:qwen2.5-coder"`), so a resume
    #: elsewhere can rebuild that model for a factory that takes one. None when unknown.
    model_spec: str | None = None
    #: Subagents suspended inside this run, by the parent's `agent` call id: a child that
    #: needs a person suspends its parent, and its whole state travels in the parent's
    #: checkpoint until a resume continues it (under the same subagent run id).
    children: dict[str, RunState] = Field(default_factory=dict)
    #: The run's serializable policy — jail root, phase, withheld tools, budget limits and
    #: what was spent — so a resume in another process can rebuild the `RunContext`
    #: (`tiller.loop.run_context_from`). The live parts (approver, cancel token, hooks, the
    #: store) are not data and are given by whoever resumes. None when not recorded.
    policy: dict[str, Any] | None = None
    #: The trace the run's segments belong to (`tiller.telemetry`); None when the run was
    #: not traced, or the state was written before version 7.
    trace_context: TraceContext | None = None

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        return _renamed_keys(data)

    # ── convenience ──────────────────────────────────────────────────────────────

    @property
    def taint_flags(self) -> Taint:
        taint = self.taint
        if type(taint) is int and 0 <= taint < len(_TAINTS):
            return _TAINTS[taint]  # read every step: no enum call for a known value
        return Taint(taint)

    def add_taint(self, taint: Taint) -> None:
        """Taint only grows (law 6)."""
        self.taint |= taint.value

    def last_assistant(self) -> AssistantMessage | None:
        for message in reversed(self.messages):
            if isinstance(message, AssistantMessage):
                return message
        return None

    def unanswered_calls(self) -> list[ToolCall]:
        """Calls of the last assistant turn that have no result in the transcript yet."""
        if not self.messages or not isinstance(self.messages[-1], AssistantMessage):
            return []
        return list(self.messages[-1].tool_calls)

    def nested_calls(self) -> list[ToolCall]:
        """`unanswered_calls()`, and those of the subagents suspended inside this run."""
        calls = self.unanswered_calls()
        for child in self.children.values():
            calls.extend(child.nested_calls())
        return calls

    def waiting_calls(self) -> list[ToolCall]:
        """The calls a suspended run waits on a person for: its last turn's calls with no
        result yet that are not the client's (AG-UI frontend tools), where a call whose
        subagent is suspended inside this run stands for that subagent's own waiting calls.
        (A call that ran before the step paused may be recorded in the store only.)"""
        waiting: list[ToolCall] = []
        for call in self.unanswered_calls():
            child = self.children.get(call.id)
            if child is not None:
                waiting.extend(child.waiting_calls())
                continue
            record = self.calls.get(call.id)
            if call.id in self.client_calls or (record is not None and record.result is not None):
                continue
            waiting.append(call)
        return waiting

    def append_user_text(self, text: str) -> None:
        """Fold text into the last user message if the transcript ends with one (law 1:
        two user messages in a row are invalid), else start a new one."""
        if self.messages and isinstance(self.messages[-1], UserMessage):
            last = self.messages[-1]
            joined = f"{last.text}\n\n{text}" if last.text else text
            self.messages[-1] = last.model_copy(update={"text": joined})
        else:
            self.messages.append(UserMessage(text=text))

    # ── serialization ────────────────────────────────────────────────────────────

    def record_checklist(self, tasks: list[dict[str, Any]]) -> None:
        """The checklist changed to `tasks` now: keep it as `tasks`, and in the history
        under the conversation's current length (replacing a change made at that length,
        and forgetting any recorded at a length the conversation no longer reaches)."""
        self.tasks = tasks
        at = len(self.messages)
        history = [entry for entry in self.tasks_history if entry.messages < at]
        history.append(ChecklistAt(messages=at, tasks=tasks))
        self.tasks_history = history

    def count_model_call(self) -> int:
        """One more call to the run's model, made now; returns its number. The first call
        at the conversation's current length is kept in the history (any recorded at a
        length the conversation no longer reaches, a future compaction or a rewind cut
        off, is forgotten first)."""
        at = len(self.messages)
        history = self.model_calls_history
        while history and history[-1].messages > at:
            history.pop()
        if not history or history[-1].messages != at:
            history.append(CallsAt(messages=at, model_calls=self.model_calls))
        self.model_calls += 1
        return self.model_calls

    def history_rewritten_from(self, index: int) -> None:
        """The conversation's messages from `index` on were rewritten (a compaction): the
        counts recorded for a length that reaches them (`model_calls_history`) describe a
        conversation that no longer exists, and are forgotten, so a rewind into the new
        history does not number its next call as an answer to the old one."""
        self.model_calls_history = [e for e in self.model_calls_history if e.messages <= index]

    def model_calls_at(self, messages: int) -> int:
        """`model_calls` as it stood when the conversation's first `messages` messages were
        first answered: what a rewind to that length puts back, so the rewound run's next
        call is numbered (and a scripted model answers it) as that answer was. Past the
        last call, or for a state without history (written before it was kept), the
        current count: nothing earlier is known."""
        for entry in self.model_calls_history:
            if entry.messages >= messages:
                return entry.model_calls
        return self.model_calls

    def checklist_at(self, messages: int) -> list[dict[str, Any]]:
        """The checklist as it stood when the conversation had its first `messages`
        messages: the last change made at that length or before (empty if none was).
        A state without history (written before it was kept) answers its current
        checklist: nothing better is known."""
        if not self.tasks_history:
            return list(self.tasks)
        earlier = [entry for entry in self.tasks_history if entry.messages <= messages]
        return list(earlier[-1].tasks) if earlier else []

    def to_json(self) -> bytes:
        # Stamped here, not when made: a state read from an older tiller and written again
        # is this tiller's now, and a newer-schema refusal must name its real writer.
        self.written_by = tiller_version()
        return self.model_dump_json().encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> RunState:
        _refuse_newer(data)
        try:
            state = cls.model_validate_json(data)
        except ValidationError as exc:
            raise RunStateError(f"the run state is not valid: {exc}") from exc
        return _read_by_the_ledger(state)

    @classmethod
    def from_data(cls, raw: object) -> RunState:
        """A state already decoded from JSON (one inside a checkpoint), read as
        `from_json` reads one: a newer schema refused naming its writer, a version the
        ledger never had refused, an older one migrated."""
        refuse_newer_state(raw)
        try:
            state = cls.model_validate(raw)
        except ValidationError as exc:
            raise RunStateError(f"the run state is not valid: {exc}") from exc
        return _read_by_the_ledger(state)


#: The version that renamed `state` to `agent_state` and a call record's `turn` to `step`.
_AGENT_STATE_VERSION = 3
#: The version that records the ids of the steers and the mail folded (issue 16).
_FOLDED_IDS_VERSION = 4
#: The version that counts the run's model calls (issue 18).
_MODEL_CALLS_VERSION = 5


def _renamed_keys(data: Any) -> Any:
    """A state of a version before 5 (as decoded JSON) with `model_calls` as its steps;
    before 4, with `folded_mail` unknown (None)
    and, before 3, the keys version 3 renamed: `state` → `agent_state`, each call
    record's `turn` → `step`. Anything else (a
    current state, a `RunState` value, not a dict) is returned as it is; `data` itself
    is never changed. Each child state carries its own version and migrates itself."""
    if not isinstance(data, dict):
        return data
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        return data
    if version >= _MODEL_CALLS_VERSION:
        return data
    migrated = dict(data)
    # Before 5, a run counted steps only: each step made one call, retries aside.
    migrated.setdefault("model_calls", migrated.get("step", 0))
    if version >= _FOLDED_IDS_VERSION:
        return migrated
    migrated.setdefault("folded_mail", None)  # unknown: its mail may be folded already
    if version >= _AGENT_STATE_VERSION:
        return migrated
    if "state" in migrated and "agent_state" not in migrated:
        migrated["agent_state"] = migrated.pop("state")
    calls = migrated.get("calls")
    if isinstance(calls, dict):
        migrated["calls"] = {call_id: _call_with_step(record) for call_id, record in calls.items()}
    return migrated


def _call_with_step(record: Any) -> Any:
    if isinstance(record, dict) and "turn" in record and "step" not in record:
        renamed = dict(record)
        renamed["step"] = renamed.pop("turn")
        return renamed
    return record


def _read_by_the_ledger(state: RunState) -> RunState:
    """`state` if the ledger reads its version (`RunStateError` if not), migrated."""
    if state.schema_version not in READABLE_VERSIONS:
        readable = ", ".join(str(version) for version in READABLE_VERSIONS)
        raise RunStateError(
            f"run state schema version {state.schema_version} is not supported "
            f"(this tiller reads versions {readable})"
        )
    # Migrated as read (see the ledger): saved again, it is the current version, and so
    # is every child state it carries (each was migrated as it was read).
    _stamp_current(state)
    return state


def _stamp_current(state: RunState) -> None:
    state.schema_version = SCHEMA_VERSION
    for child in state.children.values():
        _stamp_current(child)


def _refuse_newer(data: bytes | str) -> None:
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        return  # not JSON: pydantic's validation says so, as before
    refuse_newer_state(raw)


def refuse_newer_state(raw: object) -> None:
    """`NewerRunState` if `raw` (a state as decoded JSON) is of a newer schema: checked
    before the fields, which a newer schema may have changed (they would read as merely
    "not valid"). Readers of a state inside another record (a checkpoint) call it too."""
    if not isinstance(raw, dict):
        return
    version = raw.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        readable = ", ".join(str(number) for number in READABLE_VERSIONS)
        writer = written_by_of(raw)
        raise NewerRunState(
            f"run state schema version {version} is not supported (this tiller reads "
            f"versions {readable}): {newer_problem(writer)}",
            writer,
        )


# StopCause reports `tiller` as its module from here on (tiller._public).
_public.rehome(__name__, globals())
