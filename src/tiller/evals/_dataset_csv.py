"""A dataset as CSV (not API): a header row, then one case per record.

Columns: `id` and `input` (required), `expected`, `tags` (separated by `|`, as in
`slow|invoice`: `|` rather than `;`, which is the field separator of many spreadsheets'
CSV), `fixture`, and the budget's `max_steps`, `max_output_tokens`, `max_cost_usd`. Every
other column is metadata under its own name; a column whose name is one letter or two
from a known one (`expect`, `max_step`) is refused as the typo it probably is: if it
really is metadata, name it `metadata.<key>` (`metadata.expect`). An empty cell is an
absent value. Cells are text; a typed dataset decodes an `input`/`expected` cell holding
a JSON object or array (`{"total": 3}`), falling back to the text when the type takes
that instead, and validates any other cell as text, which pydantic turns into numbers or
booleans where the type asks for one.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ._case import Case
from ._dataset_rows import BUDGET_KEYS, RowPlace, RowReader, near_miss, unique_cases

__all__ = ["CSV_COLUMNS", "TAG_SEPARATOR", "read_csv"]

CSV_COLUMNS = ("id", "input", "expected", "tags", "fixture", *BUDGET_KEYS)
TAG_SEPARATOR = "|"
_METADATA_PREFIX = "metadata."
_NOT_COLUMNS = {
    "metadata": "every column that is not a case's own is metadata: name it by its key",
    "budget": f"give the budget as columns {', '.join(BUDGET_KEYS)}",
}


def _check_header(header: list[str], source: str) -> None:
    place = RowPlace(source, 1)
    seen: set[str] = set()
    for column in header:
        if not column:
            raise place.error("a column has no name: name every column of the header row")
        if column in seen:
            raise place.error(f"column {column!r} appears twice in the header")
        seen.add(column)
        if column in _NOT_COLUMNS:
            raise place.error(f"no column {column!r}: {_NOT_COLUMNS[column]}")
        hint = near_miss(column, CSV_COLUMNS) if column not in CSV_COLUMNS else None
        if hint is not None and not column.startswith(_METADATA_PREFIX):
            raise place.error(
                f"column {column!r}: did you mean {hint!r}? The known columns are "
                f"{', '.join(CSV_COLUMNS)}; any other column is metadata (to keep this one "
                f"as metadata, name it {_METADATA_PREFIX + column!r})"
            )
    for required in ("id", "input"):
        if required not in seen:
            raise place.error(
                f"the header has no {required!r} column (columns: {', '.join(header)}); "
                f"a CSV dataset needs {', '.join(CSV_COLUMNS[:2])}"
            )


def _number(cell: str, column: str, place: RowPlace) -> int | float:
    try:
        return float(cell) if column == "max_cost_usd" else int(cell)
    except ValueError:
        kind = "a number" if column == "max_cost_usd" else "a whole number"
        raise place.error(f"column {column!r}: {cell!r} is not {kind}") from None


def _row(header: list[str], cells: list[str], place: RowPlace) -> dict[str, Any]:
    if len(cells) != len(header):
        raise place.error(
            f"the record has {len(cells)} cells but the header has {len(header)} columns "
            "(quote a cell that holds a comma)"
        )
    row: dict[str, Any] = {}
    budget: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for column, cell in zip(header, cells, strict=True):
        if column in BUDGET_KEYS:
            if cell.strip():
                budget[column] = _number(cell.strip(), column, place)
        elif column == "tags":
            row["tags"] = [tag.strip() for tag in cell.split(TAG_SEPARATOR) if tag.strip()]
        elif column in CSV_COLUMNS:
            if cell != "":
                row[column] = cell.strip() if column in ("id", "fixture") else cell
        else:
            metadata[column.removeprefix(_METADATA_PREFIX)] = cell
    if budget:
        row["budget"] = budget
    if metadata:
        row["metadata"] = metadata
    return row


def read_csv(path: Path, text: str, reader: RowReader) -> list[Case]:
    source = str(path)
    records = csv.reader(text.splitlines(keepends=True), strict=True)
    try:
        header = [column.strip() for column in next(records)]
    except StopIteration:
        raise RowPlace(source).error(
            "the file is empty: write a header row, then the cases"
        ) from None
    except csv.Error as exc:
        raise RowPlace(source, 1).error(f"not valid CSV: {exc}") from None
    _check_header(header, source)
    placed = []
    end = records.line_num
    while True:
        start = end + 1  # a record may span lines (a quoted cell with a newline)
        try:
            cells = next(records)
        except StopIteration:
            break
        except csv.Error as exc:
            raise RowPlace(source, start).error(f"not valid CSV: {exc}") from None
        end = records.line_num
        if not cells:
            continue  # a blank line
        place = RowPlace(source, start)
        placed.append((reader.case(_row(header, cells, place), place), place))
    return unique_cases(placed)
