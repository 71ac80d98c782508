"""The schema-version ledger: every stored record kind is in it, docs/schema-versions.md is
generated from it, records say which tiller wrote them, an older record is migrated and a
newer one refused with a message naming its writer."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import orjson
import pytest

import tiller
import tiller.store
from tiller._schema_ledger import LEDGER, render_markdown
from tiller.capture import Capture, CaptureError
from tiller.conversation import UserMessage
from tiller.errors import NewerSchemaError
from tiller.state import RunState, RunStateError
from tiller.store import (
    APPROVALS_BUCKET,
    CheckpointStore,
    EventLog,
    MalformedApproval,
    MemoryBus,
    StoreError,
)
from tiller.store import ApprovalStore as ApprovalStore

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tiller"
NEWER = 10**6  # a schema version no tiller writes yet
RUN_STATE_VERSION = LEDGER["run_state"].current


def test_the_doc_is_generated_from_the_ledger() -> None:
    doc = (ROOT / "docs" / "schema-versions.md").read_text()
    assert doc == render_markdown(), (
        "docs/schema-versions.md is stale: write render_markdown() from "
        "tiller._schema_ledger into it"
    )


def test_every_module_that_writes_a_schema_version_has_a_ledger_entry() -> None:
    """Walks the code: a module that stores a versioned record names its kind's code."""
    covered = {module for kind in LEDGER.values() for module in kind.code}
    writers = {
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if re.search(r"[\"']schema_version[\"']\s*:|schema_version\s*:\s*int", path.read_text())
        and "examples" not in path.parts
    }
    assert writers - covered == set()
    assert {module for module in covered if not (SRC / module).is_file()} == set()


def _record_classes() -> list[type]:
    from tiller.store._records import Record

    for module in pkgutil.iter_modules(tiller.store.__path__, "tiller.store."):
        importlib.import_module(module.name)
    found: list[type] = []
    pending = list(Record.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_every_record_class_has_a_ledger_entry_at_its_version() -> None:
    classes = _record_classes()
    assert len(classes) >= 8  # approvals, outbox, mail (3), control (4)
    for cls in classes:
        kind = LEDGER[cls.ledger_kind]  # type: ignore[attr-defined]
        assert cls.model_fields["schema_version"].default == kind.current, cls  # type: ignore[attr-defined]


def test_each_version_says_what_changed_and_who_first_wrote_it() -> None:
    for kind in LEDGER.values():
        numbers = [version.number for version in kind.versions]
        assert numbers == list(range(1, len(numbers) + 1)), kind.name
        assert set(kind.readable) <= set(numbers)
        for version in kind.versions:
            assert version.change and re.fullmatch(r"\d+\.\d+\.\d+", version.since)


# ── written_by ───────────────────────────────────────────────────────────────────────


def _state() -> RunState:
    return RunState(run_id="r1", thread_id="t1", messages=[UserMessage(text="hi")])


def test_a_run_state_says_which_tiller_wrote_it() -> None:
    assert orjson.loads(_state().to_json())["written_by"] == tiller.__version__


def test_a_state_written_before_written_by_still_loads() -> None:
    raw = orjson.loads(_state().to_json())
    del raw["written_by"]
    raw["schema_version"] = 1
    loaded = RunState.from_json(orjson.dumps(raw))
    assert (loaded.schema_version, loaded.run_id) == (RUN_STATE_VERSION, "r1")  # migrated


def test_a_state_says_its_writer_truly_as_the_stored_records_do() -> None:
    # Read: a state that does not say who wrote it is not claimed by this tiller.
    raw = orjson.loads(_state().to_json())
    del raw["written_by"]
    assert RunState.from_json(orjson.dumps(raw)).written_by is None
    # Written: the tiller writing it now, not the one that wrote it before.
    raw["written_by"] = "0.0.1"
    loaded = RunState.from_json(orjson.dumps(raw))
    assert loaded.written_by == "0.0.1"
    assert orjson.loads(loaded.to_json())["written_by"] == tiller.__version__


async def test_a_stored_record_says_which_tiller_wrote_it_and_old_ones_load() -> None:
    bus = MemoryBus()
    kv = await bus.kv(APPROVALS_BUCKET)
    old = {
        "schema_version": 1,
        "id": "ap-old",
        "run_id": "r",
        "thread_id": "t",
        "call_id": "c",
        "tool": "x",
        "arguments": {},
        "risk": None,
        "reason": "r",
        "taint": [],
        "workspace": None,
        "created_at": 1.0,
        "status": "pending",
        "decided_at": None,
        "decision_reason": None,
        "edited_arguments": None,
    }
    await kv.put("ap-old", orjson.dumps(old))
    store = ApprovalStore(bus)
    assert (await store.get("ap-old")).written_by is None
    decided = await store.decide("ap-old", approve=True)
    assert decided.status == "approved"
    entry = await kv.get("ap-old")
    assert entry is not None
    assert orjson.loads(entry.value)["written_by"] == tiller.__version__  # rewritten by us


async def test_checkpoints_and_event_logs_say_which_tiller_wrote_them() -> None:
    bus = MemoryBus()
    await CheckpointStore(bus).save(_state(), "suspended")
    entry = await (await bus.kv("tiller-run-checkpoints")).get("r1")
    assert entry is not None
    record = orjson.loads(entry.value)
    assert record["written_by"] == record["state"]["written_by"] == tiller.__version__


# ── a newer record is refused, naming its writer ─────────────────────────────────────


def _upgrade(writer: str | None) -> str:
    who = f"tiller {writer}" if writer else "an unknown, newer tiller"
    return f"it was written by {who} (this is tiller {tiller.__version__}): upgrade tiller"


@pytest.mark.parametrize("writer", ["9.1.0", None])
def test_a_newer_run_state_is_refused_naming_its_writer(writer: str | None) -> None:
    raw = {"schema_version": NEWER, "run_id": "r", "a_field_of_the_future": 1}
    if writer:
        raw["written_by"] = writer
    with pytest.raises(RunStateError) as caught:
        RunState.from_json(orjson.dumps(raw))
    assert isinstance(caught.value, NewerSchemaError)
    assert _upgrade(writer) in str(caught.value)
    assert caught.value.written_by == writer  # type: ignore[attr-defined]


@pytest.mark.parametrize("writer", ["9.1.0", None])
async def test_a_newer_stored_record_is_refused_naming_its_writer(writer: str | None) -> None:
    bus = MemoryBus()
    record: dict[str, object] = {"schema_version": NEWER, "id": "ap-new", "new": True}
    if writer:
        record["written_by"] = writer
    await (await bus.kv(APPROVALS_BUCKET)).put("ap-new", orjson.dumps(record))
    with pytest.raises(MalformedApproval) as caught:
        await ApprovalStore(bus).get("ap-new")
    assert isinstance(caught.value, NewerSchemaError)
    assert _upgrade(writer) in str(caught.value)


async def test_a_newer_checkpoint_or_state_inside_one_is_refused() -> None:
    bus = MemoryBus()
    kv = await bus.kv("tiller-run-checkpoints")
    await kv.put("r1", orjson.dumps({"schema_version": NEWER, "written_by": "9.1.0"}))
    with pytest.raises(StoreError) as caught:
        await CheckpointStore(bus).load("r1")
    assert isinstance(caught.value, NewerSchemaError)
    assert _upgrade("9.1.0") in str(caught.value)
    state = {"schema_version": NEWER, "run_id": "r1"}
    await kv.put("r1", orjson.dumps({"schema_version": 1, "status": "suspended", "state": state}))
    with pytest.raises(NewerSchemaError, match="an unknown, newer tiller"):
        await CheckpointStore(bus).load("r1")


async def test_a_state_inside_a_checkpoint_is_read_by_the_ledger_as_from_json_reads_it() -> None:
    bus = MemoryBus()
    kv = await bus.kv("tiller-run-checkpoints")
    older = orjson.loads(_state().to_json())
    del older["written_by"]
    older["schema_version"] = 1
    await kv.put("r1", orjson.dumps({"schema_version": 1, "status": "suspended", "state": older}))
    loaded = (await CheckpointStore(bus).load("r1")).state
    # Migrated as read, and saved again as the current version: not a v2 body labelled v1.
    assert (loaded.schema_version, loaded.written_by) == (RUN_STATE_VERSION, None)
    # A version the ledger never had is refused, as `RunState.from_json` refuses it.
    older["schema_version"] = 0
    await kv.put("r1", orjson.dumps({"schema_version": 1, "status": "suspended", "state": older}))
    with pytest.raises(RunStateError, match="schema version 0 is not supported"):
        await CheckpointStore(bus).load("r1")


async def test_a_newer_event_log_batch_is_refused() -> None:
    bus = MemoryBus()
    log = EventLog(bus)
    kv = await log.kv()
    await kv.put("r1/00000000", orjson.dumps({"schema_version": NEWER, "start": 0}))
    with pytest.raises(NewerSchemaError, match="an unknown, newer tiller"):
        await log.read("r1")


def test_a_newer_capture_is_refused_and_an_old_one_reads() -> None:
    with pytest.raises(CaptureError) as caught:
        Capture.from_json(orjson.dumps({"schema_version": NEWER, "written_by": "9.1.0"}))
    assert isinstance(caught.value, NewerSchemaError)
    assert _upgrade("9.1.0") in str(caught.value)
    old = Capture.from_json(b'{"schema_version": 1, "run_id": "r", "records": []}')
    assert orjson.loads(old.to_json())["written_by"] == tiller.__version__
