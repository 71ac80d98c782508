"""The records of the fleet-limits bucket: how they are written and read, and the error a
damaged one raises.

Each record is JSON with a `schema_version` and `written_by`, changed only by
compare-and-set (`tiller.fleet._limits`). A reader refuses what it cannot trust with
`MalformedLimitRecord` naming the key, so a worker meeting a damaged record stops with a
message saying what to delete instead of looping on a parse error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .._schema_ledger import current_version, newer_problem, tiller_version, written_by_of
from ..store import StoreError

__all__ = [
    "Holders",
    "MalformedLimitRecord",
    "dump_record",
    "holders_of",
    "load_record",
    "number_of",
]

_LEDGER_KIND = "fleet_limit"


class MalformedLimitRecord(StoreError):
    """A record of the limits bucket is not one this tiller wrote (or one a newer tiller
    wrote). The message names the bucket and key: delete that key to reset the limit."""

    def __init__(self, bucket: str, key: str, why: str) -> None:
        super().__init__(
            f"{bucket}/{key}: {why}; delete the key to reset this limit (its live slots "
            "are then forgotten, so the limit may be exceeded until they finish)"
        )
        self.bucket = bucket
        self.key = key


#: A slot record's holders: slot id → (holder, expires_at, token).
Holders = dict[str, tuple[str, float, str]]


def dump_record(body: Mapping[str, Any]) -> bytes:
    record = {
        "schema_version": current_version(_LEDGER_KIND),
        "written_by": tiller_version(),
        **body,
    }
    return json.dumps(record, separators=(",", ":")).encode()


def load_record(bucket: str, key: str, value: bytes) -> dict[str, Any]:
    try:
        record = json.loads(value)
    except ValueError as exc:
        raise MalformedLimitRecord(bucket, key, f"not JSON ({exc})") from exc
    if not isinstance(record, dict):
        raise MalformedLimitRecord(bucket, key, "not a JSON object")
    version = record.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise MalformedLimitRecord(bucket, key, "no schema_version")
    if version > current_version(_LEDGER_KIND):
        raise MalformedLimitRecord(
            bucket,
            key,
            f"schema version {version}; this tiller reads {current_version(_LEDGER_KIND)}: "
            + newer_problem(written_by_of(record)),
        )
    return record


def holders_of(bucket: str, key: str, record: Mapping[str, Any]) -> Holders:
    raw = record.get("holders")
    if not isinstance(raw, dict):
        raise MalformedLimitRecord(bucket, key, "no `holders` object")
    holders: Holders = {}
    for slot, entry in raw.items():
        if (
            not isinstance(entry, list)
            or len(entry) != 3
            or not isinstance(entry[0], str)
            or not isinstance(entry[1], int | float)
            or isinstance(entry[1], bool)
            or not isinstance(entry[2], str)
        ):
            raise MalformedLimitRecord(
                bucket, key, f"holder {slot!r} is not [holder, expires_at, token]"
            )
        holders[slot] = (entry[0], float(entry[1]), entry[2])
    return holders


def number_of(bucket: str, key: str, record: Mapping[str, Any], field: str) -> float:
    value = record.get(field)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MalformedLimitRecord(bucket, key, f"`{field}` is not a number")
    return float(value)
