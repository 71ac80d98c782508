"""Captures: a run's model calls and tool results, kept so the run can be replayed offline.

A run is captured by giving it a sink factory (`RunOptions.with_capture_sink(factory)`);
the loop then hands each run's sink a `ModelCallRecord` per model call (the messages added
since the previous call, the response, and the response's stream events) and a
`ToolResultRecord` per tool result. A `Capture` is those records in order, as versioned
JSON; `tiller.model.replay.ReplayModel` answers a run's model calls from one.

Two factories:

- `memory_capture()` keeps captures in a dict by run id (tests, one process);
- `bus_capture(bus)` writes each run's capture to a KV bucket of the store
  (`tiller-captures`, keyed by run id) when the run ends. `close()` is synchronous and must
  not block the run, so the write is a task on the running loop; `await factory.wait()`
  before closing the store (or before reading the capture back) so that no write is lost.

Both take an optional `redact(record) -> record`, applied to every record *before* it is
buffered, so an unredacted record never sits in memory waiting to be written (DESIGN §11).
A redacted capture still replays with `ReplayModel(strict=False)`; strict replay compares
the live run's messages with the recorded ones, which redaction changed on purpose.

Nothing here ever raises into a run: a redactor or a write that fails is logged, and the
record (or the capture) is dropped rather than stored unredacted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

import orjson

from ._schema_ledger import LEDGER, newer_problem, tiller_version, written_by_of
from .errors import NewerSchemaError, UsageError
from .store import Bus, RevisionConflict

__all__ = [
    "CAPTURE_BUCKET",
    "SCHEMA_VERSION",
    "CaptureFromNewerTiller",
    "BusCaptures",
    "Capture",
    "CaptureError",
    "CaptureRecord",
    "CaptureSink",
    "CaptureSinkFactory",
    "MemoryCaptures",
    "ModelCallRecord",
    "Redactor",
    "ToolResultRecord",
    "bus_capture",
    "load_capture",
    "memory_capture",
]

_logger = logging.getLogger(__name__)


# ── the records (what the loop hands a run's sink) ───────────────────────────────────


@dataclass(slots=True, frozen=True)
class ModelCallRecord:
    """One model call: the messages added since the previous call (JSON dicts, in the
    `tiller.conversation` shape), and the response (an `AssistantMessage` as JSON).

    `step` is the 1-based number of the call in the run. Known gap: text folded into a
    user message that an earlier record already carried (the nudge after an empty turn)
    is not recorded again."""

    run_id: str
    step: int
    new_messages: list[dict[str, Any]]
    response: dict[str, Any]
    usage: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    model: str = ""
    #: The model's stream events as JSON (`tiller.model._codec`), so a replay streams the
    #: very same deltas and the run's AG-UI stream comes out identical.
    stream: list[dict[str, Any]] = field(default_factory=list)
    #: The agent's side of the request (`tiller.model.replay.request_shape`: `system`,
    #: `tools`, `output_schema`), when it changed since the run's previous record (a run's
    #: first record always has it); None: as before, or, in a version 1 capture, never
    #: recorded. A replay diverges when the agent's differs.
    agent: dict[str, Any] | None = None


@dataclass(slots=True, frozen=True)
class ToolResultRecord:
    """One tool call's result, as the model read it."""

    run_id: str
    step: int
    call_id: str
    name: str
    content: str
    is_error: bool = False


@runtime_checkable
class CaptureSink(Protocol):
    """Receives one run's records. Must not raise and must not block."""

    def model_call(self, record: ModelCallRecord) -> None: ...

    def tool_result(self, record: ToolResultRecord) -> None: ...

    def close(self) -> None:
        """The run ended: flush what is buffered."""
        ...


#: `(run_id) -> sink`, called once per run.
CaptureSinkFactory = Callable[[str], CaptureSink]


# ── captures ─────────────────────────────────────────────────────────────────────────

#: The captures bucket's default name (DESIGN §7).
CAPTURE_BUCKET = "tiller-captures"
#: Bumped whenever the JSON shape changes; `Capture.from_json` refuses other versions
#: rather than replaying a capture it would misread.
SCHEMA_VERSION = LEDGER["capture"].current
#: The versions `Capture.from_json` reads: version 1 is version 2 without `agent`.
READABLE_VERSIONS = LEDGER["capture"].readable

CaptureRecord: TypeAlias = ModelCallRecord | ToolResultRecord
#: `(record) -> record`: scrubs a record before it is buffered (secrets, personal data).
Redactor: TypeAlias = Callable[[CaptureRecord], CaptureRecord]

_MODEL_CALL = "model_call"
_TOOL_RESULT = "tool_result"
_WRITE_ATTEMPTS = 5


class CaptureError(UsageError):
    """A capture could not be read: not JSON, the wrong shape, or another schema version."""


class CaptureFromNewerTiller(CaptureError, NewerSchemaError):
    """A capture of a schema newer than this tiller knows: a newer tiller wrote it
    (`written_by`, None when it does not say). Upgrade tiller to replay it."""

    def __init__(self, message: str, written_by: str | None) -> None:
        super().__init__(message)
        self.written_by = written_by


@dataclass(slots=True)
class Capture:
    """One run's records in the order they happened: model calls and tool results.

    The records hold only what is new per call (DESIGN §3), so a capture grows linearly
    with the run. `run_id` is kept because the run's AG-UI ids derive from it: a replay
    under the same run id produces the very same stream, ids included.
    """

    run_id: str
    records: list[CaptureRecord] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @property
    def model_calls(self) -> list[ModelCallRecord]:
        return [r for r in self.records if isinstance(r, ModelCallRecord)]

    @property
    def tool_results(self) -> list[ToolResultRecord]:
        return [r for r in self.records if isinstance(r, ToolResultRecord)]

    @property
    def model(self) -> str:
        """`provider:name` of the model that answered (the first call's), or ''."""
        for record in self.records:
            if isinstance(record, ModelCallRecord):
                return record.model
        return ""

    # ── JSON ─────────────────────────────────────────────────────────────────────

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape: records carry a `type`, and not the run id (said once)."""
        return {
            "schema_version": self.schema_version,
            "written_by": tiller_version(),
            "run_id": self.run_id,
            "records": [_record_to_dict(r) for r in self.records],
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    def to_jsonl(self) -> bytes:
        """A header line (`schema_version`, `run_id`), then one record per line: appendable,
        and readable with line tools."""
        header = {
            "schema_version": self.schema_version,
            "written_by": tiller_version(),
            "run_id": self.run_id,
        }
        lines = [orjson.dumps(header)]
        lines.extend(orjson.dumps(_record_to_dict(r)) for r in self.records)
        return b"\n".join(lines) + b"\n"

    @classmethod
    def from_dict(cls, data: Any) -> Capture:
        if not isinstance(data, Mapping):
            raise CaptureError(f"a capture is a JSON object, not {type(data).__name__}")
        run_id = _header(data)
        records = data.get("records")
        if not isinstance(records, list):
            raise CaptureError("a capture needs a `records` list")
        return cls(run_id, [_record_from_dict(r, run_id) for r in records])

    @classmethod
    def from_json(cls, data: bytes | str) -> Capture:
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CaptureError(f"a capture is not valid JSON: {exc}") from exc
        return cls.from_dict(parsed)

    @classmethod
    def from_jsonl(cls, data: bytes | str) -> Capture:
        raw = data.encode() if isinstance(data, str) else data
        lines = [line for line in raw.splitlines() if line.strip()]
        if not lines:
            raise CaptureError("an empty capture file has no header line")
        try:
            header, *rows = (orjson.loads(line) for line in lines)
        except orjson.JSONDecodeError as exc:
            raise CaptureError(f"a capture line is not valid JSON: {exc}") from exc
        if not isinstance(header, Mapping):
            raise CaptureError("a capture's first line is its header object")
        run_id = _header(header)
        return cls(run_id, [_record_from_dict(r, run_id) for r in rows])


def _header(data: Mapping[str, Any]) -> str:
    version = data.get("schema_version")
    if version not in READABLE_VERSIONS:
        problem = (
            f"capture schema version {version!r} is not supported "
            f"(this tiller reads versions {', '.join(map(str, READABLE_VERSIONS))})"
        )
        if isinstance(version, int) and version > SCHEMA_VERSION:
            writer = written_by_of(data)
            raise CaptureFromNewerTiller(f"{problem}: {newer_problem(writer)}", writer)
        raise CaptureError(problem)
    run_id = data.get("run_id")
    if not isinstance(run_id, str):
        raise CaptureError("a capture needs a string `run_id`")
    return run_id


def _record_to_dict(record: CaptureRecord) -> dict[str, Any]:
    kind = _MODEL_CALL if isinstance(record, ModelCallRecord) else _TOOL_RESULT
    body = asdict(record)
    del body["run_id"]
    return {"type": kind, **body}


def _record_from_dict(data: Any, run_id: str) -> CaptureRecord:
    if not isinstance(data, Mapping):
        raise CaptureError(f"a capture record is an object, not {data!r}")
    fields = dict(data)
    kind = fields.pop("type", None)
    try:
        if kind == _MODEL_CALL:
            return ModelCallRecord(run_id=run_id, **fields)
        if kind == _TOOL_RESULT:
            return ToolResultRecord(run_id=run_id, **fields)
    except TypeError as exc:
        raise CaptureError(f"a {kind} record has the wrong fields: {exc}") from exc
    raise CaptureError(f"unknown capture record type {kind!r}")


# ── sinks ────────────────────────────────────────────────────────────────────────────


class _BufferSink:
    """Buffers one run's records into `capture`; `on_close` gets it when the run ends.

    The loop already shields the run from a sink that raises, but a redactor is user code:
    it is guarded here too, so that a failing redactor drops that one record (never stores
    it unredacted) and the rest of the capture is still kept.
    """

    __slots__ = ("_closed", "_on_close", "_redact", "capture")

    def __init__(
        self,
        capture: Capture,
        redact: Redactor | None,
        on_close: Callable[[Capture], None] | None,
    ) -> None:
        self.capture = capture
        self._redact = redact
        self._on_close = on_close
        self._closed = False

    def model_call(self, record: ModelCallRecord) -> None:
        self._add(record)

    def tool_result(self, record: ToolResultRecord) -> None:
        self._add(record)

    def _add(self, record: CaptureRecord) -> None:
        if self._redact is not None:
            try:
                record = self._redact(record)
            except Exception:
                _logger.exception(
                    "the capture redactor failed; a record of run %s is not captured",
                    self.capture.run_id,
                )
                return
        self.capture.records.append(record)

    def close(self) -> None:
        if self._closed:  # idempotent: the records are written once
            return
        self._closed = True
        if self._on_close is not None:
            self._on_close(self.capture)


class MemoryCaptures(Mapping[str, Capture]):
    """A capture factory that keeps every run's capture in memory, by run id.

    Pass it as the factory (`options.with_capture_sink(captures)`) and read it as a
    mapping afterwards (`captures[run_id]`). A run id seen again (a resumed run) extends
    its capture, so a suspended-and-resumed run reads as one.
    """

    def __init__(self, *, redact: Redactor | None = None) -> None:
        self.captures: dict[str, Capture] = {}
        self._redact = redact

    def __call__(self, run_id: str) -> CaptureSink:
        capture = self.captures.setdefault(run_id, Capture(run_id))
        return _BufferSink(capture, self._redact, None)

    def __getitem__(self, run_id: str) -> Capture:
        return self.captures[run_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.captures)

    def __len__(self) -> int:
        return len(self.captures)


def memory_capture(*, redact: Redactor | None = None) -> MemoryCaptures:
    """A factory keeping captures in memory: `captures = memory_capture()`,
    `options.with_capture_sink(captures)`, then `captures[run_id]`."""
    return MemoryCaptures(redact=redact)


class BusCaptures:
    """A capture factory writing each run's capture to a KV bucket when the run ends.

    The write is scheduled on the running event loop from the sink's synchronous `close`
    (which the loop calls as the run ends and which must not block); `wait()` awaits the
    writes still pending. A failed write is logged, never raised into the run. A run id
    whose capture is already stored (a resumed run) gets its new records appended, with
    compare-and-set so two writers cannot lose each other's records.
    """

    def __init__(self, bus: Bus, bucket: str = CAPTURE_BUCKET, *, redact: Redactor | None) -> None:
        self.bus = bus
        self.bucket = bucket
        self._redact = redact
        self._pending: set[asyncio.Task[None]] = set()
        #: Writes that failed (logged as well): run ids, for callers that want to check.
        self.failed: list[str] = []

    def __call__(self, run_id: str) -> CaptureSink:
        return _BufferSink(Capture(run_id), self._redact, self._schedule)

    @property
    def pending(self) -> int:
        """How many writes have not finished yet."""
        return len(self._pending)

    async def wait(self) -> None:
        """Wait until every scheduled write has finished (failures are logged, not raised)."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def _schedule(self, capture: Capture) -> None:
        try:
            event_loop = asyncio.get_running_loop()
        except RuntimeError:
            self.failed.append(capture.run_id)
            _logger.error("capture of run %s not written: no running event loop", capture.run_id)
            return
        task = event_loop.create_task(self._write(capture), name=f"tiller-capture-{capture.run_id}")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write(self, capture: Capture) -> None:
        try:
            await _store(self.bus, self.bucket, capture)
        except Exception:
            self.failed.append(capture.run_id)
            _logger.exception(
                "capture of run %s could not be written to %r", capture.run_id, self.bucket
            )


def bus_capture(
    bus: Bus, bucket: str = CAPTURE_BUCKET, *, redact: Redactor | None = None
) -> BusCaptures:
    """A factory writing captures to `bucket` of `bus`, keyed by run id. Await
    `factory.wait()` before closing the store."""
    return BusCaptures(bus, bucket, redact=redact)


async def _store(bus: Bus, bucket: str, capture: Capture) -> None:
    kv = await bus.kv(bucket)
    for _ in range(_WRITE_ATTEMPTS):
        entry = await kv.get(capture.run_id)
        try:
            if entry is None:
                await kv.create(capture.run_id, capture.to_json())
            else:
                stored = Capture.from_json(entry.value)
                merged = Capture(capture.run_id, [*stored.records, *capture.records])
                await kv.update(capture.run_id, merged.to_json(), expected=entry.revision)
            return
        except RevisionConflict:
            continue  # another writer got there first: read theirs and append again
    raise RevisionConflict(bucket, capture.run_id, -1, None)


async def load_capture(bus: Bus, run_id: str, *, bucket: str = CAPTURE_BUCKET) -> Capture:
    """The capture of `run_id` stored by `bus_capture`; `CaptureError` if there is none."""
    kv = await bus.kv(bucket)
    entry = await kv.get(run_id)
    if entry is None:
        raise CaptureError(f"no capture of run {run_id!r} in bucket {bucket!r}")
    return Capture.from_json(entry.value)
