"""`RunOptions`: how the loop behaves for one run (not what it may touch: that is
`RunContext`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import _public
from ..errors import UsageError
from ._capture import CaptureSinkFactory
from ._guardrails import Guardrail
from ._review import NeverReview, ReviewPolicy

if TYPE_CHECKING:  # (imported when a run is traced: `import tiller` stays light)
    from ..telemetry import Telemetry

__all__ = ["RunOptions"]

DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024


@dataclass(slots=True, frozen=True)
class RunOptions:
    """Tunables of the loop. Immutable: `with_*` returns a new value.

    - `max_steps`: hard cap on steps (the graceful one is `Budget.max_steps`).
    - `max_history_tokens`: the history window sent to the model (estimated tokens);
      it always keeps the first request and the newest exchange (shortening the newest
      results, with a marker, if they alone are over it) and never separates a tool call
      from its result. None: everything.
    - `max_response_bytes`: per streaming cycle (text, reasoning and tool arguments);
      exceeding it ends the run with a clear error.
    - `guardrails`: checked before and after every model call, in order.
    - `output_retries`: how often an invalid structured output goes back to the model.
    - `empty_turn_nudges`: how often an empty answer is nudged before `no_output`.
    - `max_tokens`: the per-call output cap asked of the model (the budget may lower it).
    - `temperature`: passed to the model when set.
    - `capture_sink`: a factory of per-run capture sinks (see `tiller.loop.CaptureSink`).
    - `telemetry`: OpenTelemetry GenAI spans and metrics (`with_telemetry`); None: none.
    - `compact_keep_recent`, `compact_summary_max_tokens`, `compact_validate`,
      `loop_guard_repeats`: how compaction works once the prompt reaches the run's
      `compact_at_tokens` (see `tiller.loop._compaction`).
    """

    max_steps: int = 100
    max_history_tokens: int | None = None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    guardrails: Sequence[Guardrail] = field(default_factory=tuple)
    output_retries: int = 2
    empty_turn_nudges: int = 3
    max_tokens: int | None = None
    temperature: float | None = None
    #: `(run_id) -> CaptureSink`: one sink per run, recording model calls and tool results.
    capture_sink: CaptureSinkFactory | None = None
    #: With `RunContext.store`: the bucket for checkpoints (None: the checkpoint travels
    #: only inside a suspended result). The CLI and the server use `tiller-run-checkpoints`.
    checkpoint_bucket: str | None = None
    review_policy: ReviewPolicy = field(default_factory=NeverReview)
    #: A durable run awaits it with the call's id after a tool call ran and before its
    #: completion is recorded, so the journal never says a call completed before what it
    #: did is kept: a fleet worker keeps a snapshot run's files here (a killed worker then
    #: loses no completed call's writes). If it raises, the completion is not recorded
    #: and the run ends in that error (the call stays uncertain, law 5).
    before_call_recorded: Callable[[str], Awaitable[None]] | None = None
    #: Durable mode: how long the run's lease lasts between renewals (seconds). A crashed
    #: process's run can be recovered without `--force` once this has passed.
    lease_ttl: float = 30.0
    #: How long an interrupt stays answerable (seconds; None: until answered). Its
    #: `expiresAt` tells the client; a resume after it is refused.
    interrupt_ttl: float | None = None
    #: Publish the run's usage, budget and outbox in its AG-UI state (under `tiller`)
    #: after every step, for a page to show (the server sets it; off, it costs nothing).
    publish_run_state: bool = False
    #: Events per record of the durable event log: smaller batches let an observer in
    #: another process (a reattaching client) follow the run more closely.
    event_log_batch: int = 256
    #: Compaction leaves the newest this many exchanges (an assistant turn and its
    #: results) untouched when it thins old results, and keeps them verbatim after a
    #: summary. A prompt the provider rejects as too long is compacted with 0.
    compact_keep_recent: int = 4
    #: The summary request's own output cap (the budget may lower it).
    compact_summary_max_tokens: int = 8192
    #: Check each summary with a second call that lists what it left out, and regenerate
    #: it once with those facts (two more model calls a summary, charged to the budget).
    compact_validate: bool = False
    #: After a compaction, stop the run (stop cause `loop`) when the same calls come back
    #: with the same results this many steps in a row. None: no loop guard.
    loop_guard_repeats: int | None = 3
    #: Where the run's OpenTelemetry spans and metrics go (`tiller.telemetry`). None (the
    #: default): the loop records nothing and skips every hook.
    telemetry: Telemetry | None = None

    def __post_init__(self) -> None:
        # A value: a list the caller keeps (and appends to later) must not change it.
        object.__setattr__(self, "guardrails", tuple(self.guardrails))
        if self.max_steps < 1:
            raise UsageError("max_steps must be at least 1")
        if self.max_response_bytes < 1:
            raise UsageError("max_response_bytes must be positive")
        if self.interrupt_ttl is not None and not self.interrupt_ttl > 0:
            raise UsageError("interrupt_ttl must be positive seconds (or None: no expiry)")
        if self.event_log_batch < 1:
            raise UsageError("event_log_batch must be at least 1")
        if self.compact_keep_recent < 0:
            raise UsageError("compact_keep_recent must not be negative")
        if self.compact_summary_max_tokens < 1:
            raise UsageError("compact_summary_max_tokens must be at least 1")
        if self.loop_guard_repeats is not None and self.loop_guard_repeats < 2:
            raise UsageError("loop_guard_repeats must be at least 2 (or None: no loop guard)")

    def _with(self, **changes: Any) -> RunOptions:
        return dataclasses.replace(self, **changes)

    def with_max_steps(self, max_steps: int) -> RunOptions:
        return self._with(max_steps=max_steps)

    def with_max_history_tokens(self, tokens: int | None) -> RunOptions:
        return self._with(max_history_tokens=tokens)

    def with_max_response_bytes(self, limit: int) -> RunOptions:
        return self._with(max_response_bytes=limit)

    def with_guardrails(self, *guardrails: Guardrail) -> RunOptions:
        return self._with(guardrails=tuple(guardrails))

    def with_output_retries(self, retries: int) -> RunOptions:
        return self._with(output_retries=retries)

    def with_max_tokens(self, max_tokens: int | None) -> RunOptions:
        return self._with(max_tokens=max_tokens)

    def with_temperature(self, temperature: float | None) -> RunOptions:
        return self._with(temperature=temperature)

    def with_capture_sink(self, factory: CaptureSinkFactory | None) -> RunOptions:
        return self._with(capture_sink=factory)

    def with_checkpoint_bucket(self, bucket: str | None) -> RunOptions:
        return self._with(checkpoint_bucket=bucket)

    def with_review_policy(self, policy: ReviewPolicy) -> RunOptions:
        return self._with(review_policy=policy)

    def with_interrupt_ttl(self, seconds: float | None) -> RunOptions:
        return self._with(interrupt_ttl=seconds)

    def with_publish_run_state(self, publish: bool = True) -> RunOptions:
        return self._with(publish_run_state=publish)

    def with_compaction(
        self,
        *,
        keep_recent: int | None = None,
        summary_max_tokens: int | None = None,
        validate: bool | None = None,
    ) -> RunOptions:
        """The compaction tunables given here changed, the others as they are."""
        changes: dict[str, Any] = {}
        if keep_recent is not None:
            changes["compact_keep_recent"] = keep_recent
        if summary_max_tokens is not None:
            changes["compact_summary_max_tokens"] = summary_max_tokens
        if validate is not None:
            changes["compact_validate"] = validate
        return self._with(**changes)

    def with_loop_guard(self, repeats: int | None) -> RunOptions:
        return self._with(loop_guard_repeats=repeats)

    def with_telemetry(self, telemetry: Telemetry | None) -> RunOptions:
        """Trace the run (and its subagents) with `telemetry`; None: not traced."""
        return self._with(telemetry=telemetry)


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
