"""A dataset as JSONL: one case per line, a JSON object with the row keys (not API).

Blank lines are skipped. `write_jsonl` is the inverse of `read_jsonl`: a dataset built in
Python is stored with it and loads back equal (typed inputs and expected values are
written as their JSON; load with the same `input_type`/`expected_type` to get the models
back).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ..errors import UsageError
from ._case import Case
from ._dataset_error import DatasetError
from ._dataset_rows import RowPlace, RowReader, unique_cases

__all__ = ["read_jsonl", "write_jsonl"]


def read_jsonl(path: Path, text: str, reader: RowReader) -> list[Case]:
    placed = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        place = RowPlace(str(path), number)
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise place.error(
                f"not a JSON object: {exc.msg} at column {exc.colno}; each line of a JSONL "
                "dataset is one case, a JSON object on a single line"
            ) from None
        placed.append((reader.case(row, place), place))
    return unique_cases(placed)


def _jsonable(value: Any, what: str, case: Case) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise UsageError(f"case {case.id!r}: its {what} cannot be written as JSON: {exc}") from None


def _fixture_for(fixture: Path, directory: Path) -> str:
    """The fixture as the saved file should name it: relative to the file's directory when
    it lies under it (the dataset and its fixtures move together), else absolute."""
    absolute = Path(os.path.abspath(fixture))
    try:
        return absolute.relative_to(directory).as_posix()
    except ValueError:
        return str(absolute)


def case_row(case: Case, directory: Path) -> dict[str, Any]:
    """The row `read_jsonl` reads back as `case`; keys left at their defaults are left out."""
    row: dict[str, Any] = {"id": case.id, "input": _jsonable(case.input, "input", case)}
    if case.expected is not None:
        row["expected"] = _jsonable(case.expected, "expected", case)
    if case.metadata:
        row["metadata"] = _jsonable(dict(case.metadata), "metadata", case)
    if case.fixture is not None:
        row["fixture"] = _fixture_for(case.fixture, directory)
    if case.budget is not None:
        budget = {
            name: getattr(case.budget, name)
            for name in ("max_steps", "max_output_tokens", "max_cost_usd")
            if getattr(case.budget, name) is not None
        }
        row["budget"] = budget
    if case.tags:
        row["tags"] = list(case.tags)
    return row


def _line(case: Case, directory: Path) -> bytes:
    try:
        return orjson.dumps(case_row(case, directory)) + b"\n"
    except orjson.JSONEncodeError as exc:  # e.g. an int beyond 64 bits
        raise UsageError(f"case {case.id!r} cannot be written as JSON: {exc}") from None


def write_jsonl(cases: Sequence[Case], path: Path) -> None:
    """Write `cases` to `path`, replacing it whole: a reader never sees half a dataset."""
    directory = Path(os.path.abspath(path)).parent
    data = b"".join(_line(case, directory) for case in cases)
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise DatasetError(path, f"cannot write the dataset: {exc.strerror}") from None
