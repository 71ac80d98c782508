"""What the held-approval and outbox records share: stable ids, taint as names, strict
decoding, and the compare-and-set loop their status changes go through.

Both buckets hold one JSON record per tool call, written by one process (the run's gate)
and changed by others (a person at `tiller approve`, `tiller outbox send`), so:

- an id is derived from the run id and the call id (`ap-1a2b3c4d`): staging or holding the
  same call twice finds the record already there instead of making a second one; in the
  rare case that the short hash is taken by another call, a longer one is used;
- taint is stored by flag name (`["private_data"]`), readable in a store browser and
  stable if the flags are ever renumbered;
- reading a record checks its `schema_version` and every field; anything else raises the
  bucket's `Malformed...` error naming the bucket and key, never a bare `KeyError`; a
  version newer than this tiller knows raises `RecordFromNewerTiller` (a `MalformedRecord`
  too), naming the tiller that wrote it: every record says so in `written_by`;
- a status change reads the record, checks the transition, and writes it at the revision
  it read; if another writer got there first it reads again and re-checks, so of two
  people deciding at once exactly one wins and the other is told why.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any, ClassVar, Generic, TypeVar

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
)

from .._schema_ledger import LEDGER, newer_problem, tiller_version, written_by_of
from ..conversation import Taint, ToolCall
from ..errors import NewerSchemaError, UsageError
from ._bus import Bus, KeyValue, RevisionConflict, StoreError

__all__ = [
    "SCHEMA_VERSION",
    "MalformedRecord",
    "Record",
    "RecordFromNewerTiller",
    "RecordStore",
    "TaintNames",
    "call_arguments",
    "candidate_ids",
    "change",
    "create_or_get",
    "decode",
    "encode",
    "json_object",
]

SCHEMA_VERSION = 1

#: Hex digits of the derived id, shortest first: short ids for people to type, longer
#: ones only when a shorter one is already another call's.
_ID_LENGTHS = (8, 12, 16, 32, 64)

R = TypeVar("R", bound="Record")


class MalformedRecord(StoreError):
    """A record does not have the shape this tiller writes (written by something else, or
    damaged). `bucket` and `key` name it; the message says what is wrong."""

    def __init__(self, bucket: str, key: str, problem: str) -> None:
        super().__init__(f"{bucket}/{key}: {problem}")
        self.bucket = bucket
        self.key = key
        self.problem = problem


class RecordFromNewerTiller(MalformedRecord, NewerSchemaError):
    """A record whose schema version is newer than this tiller knows: a newer tiller wrote
    it (`written_by`, None when the record does not say). Upgrade tiller to read it."""

    def __init__(self, bucket: str, key: str, problem: str, written_by: str | None) -> None:
        super().__init__(bucket, key, problem)
        self.written_by = written_by


def _taint_from_names(value: Any) -> Taint:
    if isinstance(value, Taint):
        return value
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ValueError("taint must be a list of flag names")
    taint = Taint.NONE
    for name in value:
        try:
            taint |= Taint[name.upper()]
        except KeyError:
            known = ", ".join(flag.name.lower() for flag in Taint if flag.name and flag.value)
            raise ValueError(f"unknown taint {name!r}; the flags are: {known}") from None
    return taint


def _taint_names(taint: Taint) -> list[str]:
    return [flag.name.lower() for flag in Taint if flag.value and flag in taint and flag.name]


#: A `Taint` field stored as its flag names.
TaintNames = Annotated[
    Taint,
    PlainValidator(_taint_from_names),
    PlainSerializer(_taint_names, return_type=list[str]),
]


class Record(BaseModel):
    """A stored record: frozen, and strict about its fields (no extras, no coercion)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    #: Its kind in the schema-version ledger (`tiller._schema_ledger.LEDGER`).
    ledger_kind: ClassVar[str]

    schema_version: int = SCHEMA_VERSION
    #: The tiller that wrote it; None for a record written before the field existed.
    written_by: str | None = Field(default_factory=tiller_version)


def encode(record: Record) -> bytes:
    """The record as stored: written by this tiller, whoever wrote what it was made from
    (a status change of an older record rewrites it)."""
    current = tiller_version()
    if record.written_by != current:
        record = record.model_copy(update={"written_by": current})
    return record.model_dump_json().encode()


def decode(kind: type[R], bucket: str, key: str, value: bytes) -> R:
    """The record stored under `key`, checked field by field (`MalformedRecord` if not)."""
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise MalformedRecord(bucket, key, f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise MalformedRecord(bucket, key, "not a JSON object")
    version = data.get("schema_version")
    current = LEDGER[kind.ledger_kind].current
    if version != current:
        problem = f"schema version {version!r}; this tiller reads {current}"
        if isinstance(version, int) and not isinstance(version, bool) and version > current:
            writer = written_by_of(data)
            raise RecordFromNewerTiller(bucket, key, f"{problem}: {newer_problem(writer)}", writer)
        raise MalformedRecord(bucket, key, problem)
    try:
        record = kind.model_validate_json(value, strict=True)
    except ValidationError as exc:
        raise MalformedRecord(bucket, key, _describe(exc)) from None
    if "written_by" not in data:
        record = record.model_copy(update={"written_by": None})  # written before it existed
    if getattr(record, "id", key) != key:
        raise MalformedRecord(bucket, key, f"its id is {getattr(record, 'id', None)!r}")
    return record


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "the record"
        problems.append(f"field {where!r}: {error['msg']}")
    return "; ".join(problems)


def candidate_ids(prefix: str, run_id: str, call_id: str) -> Iterator[str]:
    """The ids a call's record may have, shortest first (`prefix-<hex>`)."""
    digest = hashlib.sha256(f"{run_id}\x00{call_id}".encode()).hexdigest()
    for length in _ID_LENGTHS:
        yield f"{prefix}-{digest[:length]}"


def json_object(arguments: Mapping[str, Any], what: str) -> dict[str, Any]:
    """`arguments` as a plain JSON-ready dict (`UsageError` if it is not one)."""
    if not isinstance(arguments, Mapping):
        raise UsageError(f"{what} must be a JSON object, not {type(arguments).__name__}")
    plain = dict(arguments)
    try:
        return dict(orjson.loads(orjson.dumps(plain)))
    except TypeError as exc:
        raise UsageError(f"{what} must be JSON: {exc}") from None


def call_arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as the model drafted them (a JSON object, or `UsageError`: a
    call whose arguments are not an object can never run, so it is neither held nor
    staged — answer it with the registry's error instead)."""
    try:
        parsed = call.parsed_arguments()
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"the arguments of call {call.id} are not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise UsageError(f"the arguments of call {call.id} are not a JSON object")
    return parsed


async def change(
    kv: KeyValue,
    key: str,
    read: Callable[[str, bytes], R],
    missing: Callable[[], StoreError],
    step: Callable[[R], R],
) -> R:
    """Compare-and-set `key`: read the record, let `step` check it (raising to refuse) and
    return the new one, write that at the revision read. When another writer changed the
    record meanwhile, read it again and ask `step` again: its check then sees the other
    writer's change (and refuses, say, a second decision)."""
    while True:
        entry = await kv.get(key)
        if entry is None:
            raise missing()
        current = read(key, entry.value)
        updated = step(current)
        try:
            await kv.update(key, encode(updated), expected=entry.revision)
        except RevisionConflict:
            continue
        return updated


async def create_or_get(kv: KeyValue, key: str, value: bytes) -> bytes | None:
    """Create `key`; None if it was created, else the value already there."""
    while True:
        try:
            await kv.create(key, value)
        except RevisionConflict:
            existing = await kv.get(key)
            if existing is None:
                continue  # deleted between the two calls: create it after all
            return existing.value
        return None


class RecordStore(Generic[R]):
    """One bucket of `record_type` records in a `Bus`: the bucket opened once, and every
    record read strictly, a bad one raising the store's own `malformed` error."""

    record_type: ClassVar[type[Record]]
    malformed: ClassVar[type[MalformedRecord]]
    #: The `malformed` error of a record from a newer tiller (a `RecordFromNewerTiller` too).
    newer: ClassVar[type[RecordFromNewerTiller]]

    def __init__(self, bus: Bus, bucket: str) -> None:
        self.bus = bus
        self.bucket = bucket
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    async def _get_record(
        self, key: str, *, valid: Callable[[str], bool], unknown: Callable[[], StoreError]
    ) -> R:
        """The record at `key` (`unknown()` raised when the key is not a record's, or
        there is none)."""
        if not valid(key):
            raise unknown()
        kv = await self._bucket()
        entry = await kv.get(key)
        if entry is None:
            raise unknown()
        return self._read(key, entry.value)

    async def _records(self, prefix: str, *, valid: Callable[[str], bool]) -> list[R]:
        """Every record whose key starts with `prefix` and is `valid`, in key order."""
        kv = await self._bucket()
        found: list[R] = []
        for key in await kv.keys(prefix):
            entry = await kv.get(key)
            if entry is None or not valid(key):
                continue  # deleted meanwhile, or a key of another kind
            found.append(self._read(key, entry.value))
        return found

    def _read(self, key: str, value: bytes) -> R:
        try:
            record = decode(self.record_type, self.bucket, key, value)
        except RecordFromNewerTiller as exc:
            raise self.newer(exc.bucket, exc.key, exc.problem, exc.written_by) from None
        except MalformedRecord as exc:
            raise self.malformed(exc.bucket, exc.key, exc.problem) from None
        return record  # type: ignore[return-value]  # record_type is R by construction


#: `encode` and `decode` under the names other packages import them by (`tiller.store`).
encode_record = encode
decode_record = decode
