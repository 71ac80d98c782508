"""Compaction: a long run keeps going when its history outgrows the model's window.

**Threshold.** The run's `compact_at_tokens` (`RunContext`), else the agent's
`config["compact_at_tokens"]`, else two thirds of `model.context_window`; with none of
them, the run never compacts on its own (0 or `False` in the config turns it off too).

**Trigger.** At the top of each step, after steering was folded in and before the
request is built, the prompt about to be sent is predicted: the size the provider
reported for the last call (`usage.input_tokens`), plus an estimate of what was added
since (the reply, the results, folded text; `estimate_tokens`, about four bytes a
token). Only the new messages are estimated, so the check costs a step what the step
added, not the whole history; a run with no threshold pays one attribute test.

**Passes, cheapest first**, each only while the prompt is still above the target, three
quarters of the threshold (the margin keeps the next step from compacting again):

1. *supersede*: a result of a read-only tool that the same call (same tool, same
   arguments) made again later is replaced by a note naming the later call — the later
   result is the current one, so nothing is lost;
2. *collapse_failures*: an error that the same tool later reported again word for word is
   replaced by a note naming the later failure;
3. *thin*: results older than the newest `RunOptions.compact_keep_recent` exchanges are
   cut to their first lines behind a note; the calls stay (results of the task tools,
   the carried checklist, are left alone);
4. *summary*: only then, and never again once a summary failed (`gave_up`), the prefix
   before the newest `compact_keep_recent` exchanges is summarised by an isolated call
   (`_summary.py`) and replaced by one user message: the user's first request verbatim,
   the summary, and the task checklist. The cut is always just before an assistant turn
   that follows a user message, so no call is separated from its result and the history
   still starts with a user message; the rewritten history is checked again in full
   before it is kept (law 1). Taint is never touched (law 6).

A result is rewritten in place (a note instead of its content), never removed: every
call keeps exactly one result.

**Overflow.** When the provider rejects a prompt as too long (`ContextOverflow`), the run
compacts with nothing kept back (every old result thinned, the prefix up to the last
exchange summarised), counts it (`overflow_recoveries`), and the next step makes the
turn again. If that prompt is rejected too, the run fails with an error saying so. If
compaction could remove nothing, the provider's error stands.

**Audit.** What a compaction changed or removed is kept: with a store, the whole history
before the rewrite goes to the `tiller-compactions` bucket (key `{run_id}/{n:04d}`) and the
run's state keeps the key; without one, the state keeps the changed messages themselves.
The state keeps the last `AUDIT_KEPT` records (older ones are counted), so a checkpoint's
size stays bounded however long the run is.

**Loop guard.** After the first compaction, `LoopGuard` stops a run whose same calls come
back with the same results `RunOptions.loop_guard_repeats` steps in a row (stop cause
`loop`).

Each compaction emits a `tiller.compacted` `CUSTOM` event: the reason (`threshold` or
`overflow`), the passes and what each changed, tokens and messages before and after.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar

import orjson

from ..conversation import (
    Message,
    ToolCall,
    TranscriptError,
    Usage,
    UserMessage,
    check_transcript,
)
from ..errors import UsageError
from ..events import CustomEvent
from ..model import ContextOverflow, ModelRequest
from ..state import RewrittenHistory
from ..store import StoreError
from ._loop_guard import LoopGuard, canonical_arguments
from ._model_wrapper import model_to_call
from ._run_calls import RunCalls
from ._summary import (
    SummaryFailed,
    SummaryWriter,
    first_request_of,
    input_chars_for,
    summary_cut,
    summary_message_text,
)
from ._window import estimate_tokens

if TYPE_CHECKING:
    from ._agent import Agent
    from ._context import RunContext
    from ._run_parts import RunParts

__all__ = [
    "AUDIT_BUCKET",
    "COMPACTED_EVENT",
    "Compaction",
    "PassOutcome",
    "collapse_failures",
    "compaction_threshold",
    "supersede_results",
    "thin_results",
]

_logger = logging.getLogger(__name__)

#: The `CUSTOM` event each compaction emits.
COMPACTED_EVENT: Final = "tiller.compacted"
#: Where, with a store, the history before each rewrite is kept.
AUDIT_BUCKET: Final = "tiller-compactions"
#: Audit records kept in the run's state (the newest ones).
AUDIT_KEPT: Final = 3
#: A compaction that the threshold set off goes on, pass after pass, until the prompt is
#: down to this share of the threshold (so it is not set off again at the next step, and
#: a provider's prompt cache is not invalidated every step).
TARGET_PERCENT: Final = 75
#: Results up to this many characters are not worth thinning.
THIN_MIN_CHARS: Final = 400
#: How much of a thinned result stays.
THIN_HEAD_CHARS: Final = 160
#: Tools whose results carry the run's own state (the checklist): never thinned.
CARRIED_STATE_TOOLS: Final = frozenset({"task_create", "task_update", "task_list"})
#: The notes compaction writes, so a pass never rewrites a note.
_NOTES: Final = ("[superseded:", "[thinned to save context", "[failed again later")

Reason = Literal["threshold", "overflow"]


def compaction_threshold(run_ctx: RunContext, agent: Agent) -> int | None:
    """Where this run compacts (estimated prompt tokens), or None: never on its own."""
    if run_ctx.compact_at_tokens is not None:
        return run_ctx.compact_at_tokens if run_ctx.compact_at_tokens > 0 else None
    configured = agent.config.get("compact_at_tokens")
    if configured is not None:
        if configured is False or configured == 0:
            return None
        if isinstance(configured, bool) or not isinstance(configured, int) or configured < 0:
            raise UsageError(
                f"the agent's compact_at_tokens must be a positive number of tokens (or 0: "
                f"off), not {configured!r}"
            )
        return configured
    window = agent.model.context_window
    return window * 2 // 3 if window else None


# ── the passes (pure: messages in, messages out) ─────────────────────────────────


@dataclass(slots=True)
class PassOutcome:
    """A pass's rewritten history, how many results it rewrote, and the indexes of the
    messages it changed (the history keeps its length)."""

    messages: list[Message]
    count: int = 0
    changed: set[int] = field(default_factory=set)


def _is_note(content: str) -> bool:
    return content.startswith(_NOTES)


def _calls_by_id(messages: Sequence[Message]) -> dict[str, ToolCall]:
    return {
        call.id: call
        for message in messages
        if not isinstance(message, UserMessage)
        for call in message.tool_calls
    }


def _rewrite(messages: Sequence[Message], notes: dict[str, str]) -> PassOutcome:
    """`messages` with the results named in `notes` replaced by their note."""
    out = list(messages)
    outcome = PassOutcome(out, count=len(notes))
    if not notes:
        return outcome
    for index, message in enumerate(messages):
        if not isinstance(message, UserMessage) or not any(
            result.call_id in notes for result in message.tool_results
        ):
            continue
        results = tuple(
            result.model_copy(update={"content": notes[result.call_id]})
            if result.call_id in notes
            else result
            for result in message.tool_results
        )
        out[index] = message.model_copy(update={"tool_results": results})
        outcome.changed.add(index)
    return outcome


def supersede_results(messages: Sequence[Message], read_only: Callable[[str], bool]) -> PassOutcome:
    """Results of read-only calls that were made again later with the same arguments
    become a note naming the later call (lossless: the later result is the current one)."""
    calls = _calls_by_id(messages)
    latest: dict[tuple[str, bytes], str] = {}
    keyed: list[tuple[str, str, int, tuple[str, bytes]]] = []
    for message in messages:
        if not isinstance(message, UserMessage):
            continue
        for result in message.tool_results:
            call = calls.get(result.call_id)
            if call is None or not read_only(result.name):
                continue
            key = (result.name, canonical_arguments(call))
            latest[key] = result.call_id
            if not _is_note(result.content):
                keyed.append((result.call_id, result.name, len(result.content), key))
    notes: dict[str, str] = {}
    for call_id, name, size, key in keyed:
        newest = latest[key]
        if newest == call_id:
            continue
        note = (
            f"[superseded: {name} was called again later with the same arguments "
            f"(call {newest}); that result is the current one]"
        )
        if len(note) < size:
            notes[call_id] = note
    return _rewrite(messages, notes)


def collapse_failures(messages: Sequence[Message]) -> PassOutcome:
    """An error that the same tool reported again later, word for word, becomes a note
    naming the later failure."""
    latest: dict[tuple[str, str], str] = {}
    failures: list[tuple[str, tuple[str, str]]] = []
    for message in messages:
        if not isinstance(message, UserMessage):
            continue
        for result in message.tool_results:
            if not result.is_error or _is_note(result.content):
                continue
            key = (result.name, result.content)
            latest[key] = result.call_id
            failures.append((result.call_id, key))
    notes: dict[str, str] = {}
    for call_id, key in failures:
        newest = latest[key]
        if newest == call_id:
            continue
        note = f"[failed again later with the same error (call {newest})]"
        if len(note) < len(key[1]):
            notes[call_id] = note
    return _rewrite(messages, notes)


def thin_results(messages: Sequence[Message], keep_messages: int) -> PassOutcome:
    """Long results outside the newest `keep_messages` messages are cut to their first
    characters behind a note; their calls stay as they are."""
    notes: dict[str, str] = {}
    for message in messages[: max(len(messages) - keep_messages, 0)]:
        if not isinstance(message, UserMessage):
            continue
        for result in message.tool_results:
            content = result.content
            if (
                len(content) <= THIN_MIN_CHARS
                or result.name in CARRIED_STATE_TOOLS
                or _is_note(content)
            ):
                continue
            notes[result.call_id] = (
                f"[thinned to save context: the result had {len(content)} characters; the "
                f"call is kept, and the result began:]\n{content[:THIN_HEAD_CHARS]}…"
            )
    return _rewrite(messages, notes)


# ── one run's compaction ─────────────────────────────────────────────────────────


class _HasUsage(Protocol):
    @property
    def usage(self) -> Usage | None: ...


TurnT = TypeVar("TurnT", bound=_HasUsage)


@dataclass(slots=True)
class _Done:
    """What one compaction did: whether the history changed, and whether a model call
    was made (it spent budget)."""

    changed: bool = False
    called: bool = False


class Compaction:
    """The compaction of one run, driven by its model turns (see the module docstring)."""

    def __init__(self, run: RunParts, *, history_rewritten: Callable[[int], None]) -> None:
        self._run = run
        #: Told how many messages fewer the history has after a rewrite (the model
        #: turn's transcript check and the capture's offsets refer to the old one).
        self._history_rewritten = history_rewritten
        self.state = run.state
        self.threshold = compaction_threshold(run.run_ctx, run.agent)
        self.guard = LoopGuard(run.options.loop_guard_repeats)
        self._system_tokens = len(run.agent.system_prompt_for_run() or "") // 4
        # The prompt last sent (or about to be): its size in tokens (reported when the
        # provider said, else predicted), how many messages it had, and the estimate of
        # its last message then (text may be folded into that message afterwards).
        self._base: int | None = None
        self._base_len = 0
        self._base_last = 0
        # The provider rejected the previous prompt as too long and the run compacted:
        # the next call is the retry, and a second rejection fails the run.
        self._retrying = False
        # After a compaction that could do nothing: no other try before the history has
        # this many messages.
        self._quiet_until = 0

    # ── the loop's two calls ─────────────────────────────────────────────────────

    async def before_request(self) -> bool:
        """At the top of a step: feed the loop guard, compact if the prompt is due to
        reach the threshold. False: the step makes no call (the guard stopped the run,
        or a summary spent what was left of the budget)."""
        state = self.state
        armed = state.compaction.compactions and self.guard.repeats is not None
        if armed and self.guard.observe(state) is not None:
            return False
        threshold = self.threshold
        if threshold is None:
            return True
        predicted = self._predict()
        if predicted < threshold or len(state.messages) < self._quiet_until:
            return True
        keep_recent = self._run.options.compact_keep_recent
        done = await self._compact("threshold", predicted, keep_recent)
        if not done.changed:
            # Nothing could be done: try again once a few more exchanges came, not at
            # every step (each try reads the whole history).
            self._quiet_until = len(state.messages) + 2 * max(keep_recent, 1)
        # Compacting awaited (the audit write, maybe a summary): a run sharing the budget
        # may have spent it meanwhile, and the loop checked it before. Check it again
        # before the step reserves its call (law 7); the next step then stops the run.
        return self._run.run_ctx.budget.exceeded() is None

    async def model_turn(
        self, request: ModelRequest, call: Callable[[ModelRequest], Awaitable[TurnT]]
    ) -> TurnT | None:
        """`call(request)`, remembering the prompt size the provider reports. On a
        `ContextOverflow`, compact and return None: the next step makes the model call again."""
        state = self.state
        length, complete = len(state.messages), state.usage_complete
        try:
            turn = await call(request)
        except ContextOverflow as overflow:
            await self._overflowed(overflow, length, complete)
            return None
        self._retrying = False
        usage = turn.usage
        if self._base is not None and usage is not None and usage.input_tokens > 0:
            self._base = usage.input_tokens
        return turn

    # ── the trigger ──────────────────────────────────────────────────────────────

    def _predict(self) -> int:
        messages = self.state.messages
        base, count = self._base, self._base_len
        if base is None or len(messages) < count:
            size = self._system_tokens + sum(estimate_tokens(m) for m in messages)
        else:
            size = base
            if count:
                size += estimate_tokens(messages[count - 1]) - self._base_last
            for message in messages[count:]:
                size += estimate_tokens(message)
        self._mark(size)
        return size

    def _mark(self, size: int) -> None:
        messages = self.state.messages
        self._base = size
        self._base_len = len(messages)
        self._base_last = estimate_tokens(messages[-1]) if messages else 0

    # ── overflow ─────────────────────────────────────────────────────────────────

    async def _overflowed(self, overflow: ContextOverflow, length: int, complete: bool) -> None:
        """The provider refused the prompt as too long. The loop has already recorded the
        call as failed (stop cause `error`); undo that if compaction makes room."""
        state = self.state
        said = str(overflow).removeprefix(f"HTTP {overflow.status}: ")
        if self._retrying:
            self._retrying = False
            error = ContextOverflow(
                "the prompt was still too long for the model after the conversation was "
                f"compacted; the provider said: {said}",
                provider=overflow.provider,
                status=overflow.status,
            )
            state.error = str(error)
            raise error from overflow
        if len(state.messages) != length:
            raise overflow  # output was streamed and kept: not a prompt to send again
        done = await self._compact("overflow", None, keep_recent=0)
        if not done.changed:
            raise overflow  # nothing could be removed: the same prompt would fail again
        state.stop_cause = None
        state.error = None
        state.usage_complete = complete
        state.compaction.overflow_recoveries += 1
        self._retrying = True

    # ── compacting ───────────────────────────────────────────────────────────────

    def _read_only(self, name: str) -> bool:
        tool = self._run.agent.registry.get(name)
        return tool is not None and bool(tool.read_only)

    def _size(self, messages: Sequence[Message]) -> int:
        return self._system_tokens + sum(estimate_tokens(m) for m in messages)

    async def _compact(self, reason: Reason, predicted: int | None, keep_recent: int) -> _Done:
        """Run the passes, cheapest first, until the prompt is down to the target (all of
        them, for an overflow); keep the result if anything changed."""
        state = self.state
        original = list(state.messages)
        estimated = self._size(original)
        # In the provider's units when it reported; sizes after a pass are estimated, and
        # scaled to those units.
        before = predicted if predicted is not None else estimated
        threshold = self.threshold if reason == "threshold" else None
        target = None if threshold is None else threshold * TARGET_PERCENT // 100
        keep_messages = keep_recent * 2

        def scaled(messages: Sequence[Message]) -> int:
            return before * self._size(messages) // max(estimated, 1)

        def over(messages: Sequence[Message]) -> bool:
            return target is None or scaled(messages) > target

        messages = original
        passes: list[dict[str, Any]] = []
        changed: set[int] = set()
        cheap: list[tuple[str, Callable[[Sequence[Message]], PassOutcome]]] = [
            ("supersede", lambda m: supersede_results(m, self._read_only)),
            ("collapse_failures", collapse_failures),
            ("thin", lambda m: thin_results(m, keep_messages)),
        ]
        for name, run_pass in cheap:
            if not over(messages):
                break
            outcome = run_pass(messages)
            if outcome.count:
                messages = outcome.messages
                changed |= outcome.changed
                passes.append({"name": name, "results": outcome.count})
        done = _Done()
        failure: str | None = None
        cut = None
        if over(messages) and not state.compaction.gave_up:
            cut = summary_cut(messages, keep_messages)
            # Not worth a call when the kept tail is most of the prompt.
            small = cut is not None and self._size(messages[:cut]) * 4 < self._size(messages)
            if small and reason == "threshold":
                cut = None
        if cut is not None:
            summarised, failure, done.called = await self._summarise(messages, cut)
            if summarised is not None:
                messages = summarised
                changed |= set(range(cut))
                passes.append({"name": "summary", "messages": cut})
        if not passes:
            if failure is not None:
                self._emit(
                    reason,
                    passes,
                    before=before,
                    after=before,
                    original=original,
                    messages=original,
                    failure=failure,
                    key=None,
                )
            return done
        try:
            check_transcript(messages)  # the orphan guard: never keep an illegal history
        except TranscriptError:
            _logger.exception("compaction produced an illegal transcript; it was not kept")
            return done
        after = scaled(messages)
        key = await self._commit(reason, original, messages, changed, passes)
        self._mark(after)
        self._emit(
            reason,
            passes,
            before=before,
            after=after,
            original=original,
            messages=messages,
            failure=failure,
            key=key,
        )
        done.changed = True
        if self._run.trace is not None:
            self._run.trace.compacted(reason, before, after)
        return done

    async def _summarise(
        self, messages: list[Message], cut: int
    ) -> tuple[list[Message] | None, str | None, bool]:
        """The history with `messages[:cut]` summarised, or None and why not; and whether
        a model call was made."""
        run, state = self._run, self.state
        model = model_to_call(run.run_ctx, RunCalls(run.agent.model, state), state.model_spec)
        if run.trace is not None:  # the summary call is a `chat` span of the run's
            model = run.trace.traced_model(model, "compaction")
        window = model.context_window or (self.threshold * 3 // 2 if self.threshold else None)
        if window is None:
            window = max(self._size(messages) // 2, 1000)
        max_tokens = min(run.options.compact_summary_max_tokens, max(window // 4, 256))
        writer = SummaryWriter(
            model,
            run.agent.retry,
            run.run_ctx.budget,
            state,
            max_tokens=max_tokens,
            validate=run.options.compact_validate,
        )
        try:
            summary = await writer.write(
                messages[:cut], input_chars=input_chars_for(window, max_tokens)
            )
        except SummaryFailed as exc:
            if exc.give_up:
                state.compaction.gave_up = True
                state.compaction.gave_up_reason = exc.reason
            _logger.warning("compaction could not summarise the history: %s", exc.reason)
            return None, exc.reason, writer.calls > 0
        memory = state.compaction
        if memory.first_request is None:
            memory.first_request = first_request_of(messages, state.not_from_person)
        text = summary_message_text(
            summary, removed=cut, first_request=memory.first_request, tasks=state.tasks
        )
        head = UserMessage(id=run.agui.new_message_id(), text=text)
        # The model wrote it: never taken as the user's request. Folded texts that were
        # summarised away are no longer in the transcript: forgotten with them.
        kept = [m.text for m in messages[cut:] if isinstance(m, UserMessage) and m.text]
        state.not_from_person = [
            t for t in state.not_from_person if any(t in text_ for text_ in kept)
        ] + [text]
        return [head, *messages[cut:]], None, True

    async def _commit(
        self,
        reason: Reason,
        original: list[Message],
        messages: list[Message],
        changed: set[int],
        passes: list[dict[str, Any]],
    ) -> str | None:
        """Keep the new history, and the old one for audit; returns the audit's store key.

        The audit goes to the store first: a cancel while it is written leaves the run's
        history as it was. After it, the state changes with no `await` in between."""
        run, state = self._run, self.state
        memory = state.compaction
        record = RewrittenHistory(
            number=memory.compactions + 1,
            step=state.step,
            reason=reason,
            passes=[item["name"] for item in passes],
        )
        store = run.run_ctx.store
        if store is not None:
            key = f"{state.run_id}/{record.number:04d}"
            body = {
                "schema_version": 1,
                "run_id": state.run_id,
                **record.model_dump(mode="json", exclude={"originals", "store_key"}),
                "messages": [message.model_dump(mode="json") for message in original],
            }
            try:
                bucket = await store.kv(AUDIT_BUCKET)
                await bucket.put(key, orjson.dumps(body))
            except StoreError:
                _logger.exception("the history before compaction %s was not stored", key)
            else:
                record.store_key = key
        if record.store_key is None:
            record.originals = [original[index] for index in sorted(changed)]
        state.messages[:] = messages
        # Counts recorded at lengths that reach a rewritten message refer to the old
        # history (the messages before the first change are the same in both).
        state.history_rewritten_from(min(changed, default=0))
        # The loop's incremental checks and capture offsets refer to the old history.
        self._history_rewritten(len(original) - len(messages))
        memory.compactions = record.number
        if passes[-1]["name"] == "summary":
            memory.summaries += 1
        memory.rewritten.append(record)
        if len(memory.rewritten) > AUDIT_KEPT:
            del memory.rewritten[0]
            memory.rewritten_dropped += 1
        return record.store_key

    def _emit(
        self,
        reason: Reason,
        passes: list[dict[str, Any]],
        *,
        before: int,
        after: int,
        original: Sequence[Message],
        messages: Sequence[Message],
        failure: str | None,
        key: str | None,
    ) -> None:
        value: dict[str, Any] = {
            "reason": reason,
            "passes": passes,
            "tokensBefore": before,
            "tokensAfter": after,
            "messagesBefore": len(original),
            "messagesAfter": len(messages),
            "compactions": self.state.compaction.compactions,
        }
        if self.threshold is not None:
            value["threshold"] = self.threshold
        if failure is not None:
            value["summaryFailed"] = failure
        if key is not None:
            value["auditKey"] = key
        self._run.agui.emit(CustomEvent(COMPACTED_EVENT, value))
