"""One dataset row to one `Case`: the keys a row may have, checked the same way whatever
format the row came from (not API).

A row is a mapping: `id` and `input` (required), `expected`, `metadata`, `fixture`,
`budget` (`max_steps`, `max_output_tokens`, `max_cost_usd`) and `tags`. An unknown key is
refused with the known ones, so a typo (`expect`) cannot silently drop the expected answer.
Ids are required, never made up from the row's position: a case id keys the case's stored
results, so an id that moved when a row was inserted above it would make a resumed eval
skip the wrong cases and a comparison pair the wrong ones.

A relative `fixture` resolves against the dataset's fixture root (the dataset file's
directory, or its `fixture_root`); whether it exists is the case's business when it runs
("a missing fixture fails that case, not the eval"), so it is not checked here.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import PydanticSchemaGenerationError, TypeAdapter, ValidationError

from ..errors import UsageError
from ._case import Case, CaseBudget
from ._dataset_error import DatasetError

__all__ = [
    "BUDGET_KEYS",
    "ROW_KEYS",
    "RowDefaults",
    "RowPlace",
    "RowReader",
    "near_miss",
    "unique_cases",
    "unknown_keys_message",
]

ROW_KEYS = ("id", "input", "expected", "metadata", "fixture", "budget", "tags")
BUDGET_KEYS = ("max_steps", "max_output_tokens", "max_cost_usd")


def near_miss(word: str, known: Sequence[str]) -> str | None:
    """The known word `word` is probably a typo of, if any."""
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.8)
    return close[0] if close else None


def unknown_keys_message(what: str, unknown: Sequence[str], known: Sequence[str]) -> str:
    hints = [
        f" ({key!r}: did you mean {hint!r}?)" for key in unknown if (hint := near_miss(key, known))
    ]
    return (
        f"unknown {what} {', '.join(repr(k) for k in unknown)}{''.join(hints)}; "
        f"the known ones are {', '.join(known)}"
    )


def _adapter(name: str, of: Any) -> TypeAdapter[Any] | None:
    if of is None:
        return None
    try:
        return TypeAdapter[Any](of)
    except PydanticSchemaGenerationError:
        raise UsageError(
            f"{name}={of!r} is not a type pydantic can validate: pass a pydantic model, a "
            "dataclass or a type such as int or list[str]"
        ) from None


@dataclass(frozen=True, slots=True)
class RowPlace:
    """Where a row is: its file (or `<cases>` for Python) and line, or its position."""

    source: str
    line: int | None = None
    label: str = ""  # "case #3" for a row with no line

    def error(self, message: str) -> DatasetError:
        prefix = f"{self.label}: " if self.label else ""
        return DatasetError(self.source, prefix + message, line=self.line)


@dataclass(frozen=True, slots=True)
class RowDefaults:
    """What every row of a dataset gets unless it says otherwise (YAML's dataset-level
    keys): `fixture_root` resolves relative fixtures, `budget` keys are the default of
    each case's, `metadata` is merged under each case's, `tags` come before each case's."""

    fixture_root: Path | None = None
    budget: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()


class RowReader:
    """Turns rows into cases, validating `input` and `expected` with pydantic when the
    dataset is typed (`input_type`, `expected_type`: a model or any type pydantic knows).
    `cells_are_text`: the values came from CSV cells, so a typed value is decoded from
    JSON when its cell holds an object or array (`{"total": 3}`), and read as text else."""

    def __init__(
        self,
        *,
        defaults: RowDefaults | None = None,
        input_type: Any = None,
        expected_type: Any = None,
        cells_are_text: bool = False,
    ) -> None:
        self._defaults = defaults or RowDefaults()
        self._input_type = input_type
        self._expected_type = expected_type
        # Built once per dataset: a TypeAdapter compiles a validator, which is not cheap.
        self._input = _adapter("input_type", input_type)
        self._expected = _adapter("expected_type", expected_type)
        self._cells_are_text = cells_are_text

    def case(self, row: object, place: RowPlace) -> Case:
        if not isinstance(row, Mapping):
            raise place.error(
                f"a case is a mapping with keys {', '.join(ROW_KEYS)}, not {type(row).__name__}"
            )
        unknown = [str(key) for key in row if key not in ROW_KEYS]
        if unknown:
            raise place.error(unknown_keys_message("key", unknown, ROW_KEYS))
        case_id = row.get("id")
        if case_id is None:
            raise place.error(
                "the case has no `id`: give every case a unique id (its results are stored "
                "under it, so it must not depend on the row's position)"
            )
        if not isinstance(case_id, str):
            raise place.error(
                f"case id {case_id!r} is not a string ({type(case_id).__name__}): quote it"
            )
        if row.get("input") is None:
            raise place.error(f"case {case_id!r} has no `input`: say what the agent is asked")
        try:
            return Case(
                id=case_id,
                input=self._typed("input", row["input"], self._input, self._input_type, place),
                expected=self._expected_value(row.get("expected"), place),
                metadata=self._metadata(row.get("metadata"), place),
                fixture=self._fixture(row.get("fixture"), place),
                budget=self._budget(row.get("budget"), place),
                tags=self._tags(row.get("tags"), place),
            )
        except DatasetError:
            raise
        except UsageError as exc:  # the case's own checks: its id, its budget's ceilings
            raise place.error(str(exc)) from None

    def retyped(self, case: Case, place: RowPlace) -> Case:
        """`case` with its input and expected value validated (and converted) by type."""
        return dataclasses.replace(
            case,
            input=self._typed("input", case.input, self._input, self._input_type, place),
            expected=self._expected_value(case.expected, place),
        )

    def _expected_value(self, value: Any, place: RowPlace) -> Any:
        if value is None:
            return None
        return self._typed("expected", value, self._expected, self._expected_type, place)

    def _typed(
        self, name: str, value: Any, adapter: TypeAdapter[Any] | None, of: Any, place: RowPlace
    ) -> Any:
        if adapter is None:
            return value
        try:
            return self._validate(value, adapter)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join([name, *(str(part) for part in error['loc'])])}: {error['msg']}"
                for error in exc.errors()
            )
            type_name = getattr(of, "__name__", repr(of))
            raise place.error(
                f"{name} does not fit {type_name}: {problems} (fix the row, or the type)"
            ) from None

    def _validate(self, value: Any, adapter: TypeAdapter[Any]) -> Any:
        if not (self._cells_are_text and isinstance(value, str)):
            return adapter.validate_python(value)
        if value.lstrip()[:1] not in ("{", "["):
            return adapter.validate_python(value)
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            return adapter.validate_python(value)  # text that starts with a bracket
        try:
            return adapter.validate_python(decoded)
        except ValidationError:
            try:  # a type that takes the text itself ("[WIP] fix it" for a str input)
                return adapter.validate_python(value)
            except ValidationError:
                pass
            raise

    def _metadata(self, value: Any, place: RowPlace) -> dict[str, Any]:
        if value is None:
            value = {}
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise place.error(f"metadata must be a mapping with string keys, not {value!r}")
        return {**self._defaults.metadata, **value}

    def _fixture(self, value: Any, place: RowPlace) -> Path | None:
        if value is None:
            return None
        if not isinstance(value, str | Path) or not str(value):
            raise place.error(f"fixture must be a directory path, not {value!r}")
        path = Path(value)
        root = self._defaults.fixture_root
        return path if root is None or path.is_absolute() else root / path

    def _budget(self, value: Any, place: RowPlace) -> CaseBudget | None:
        if value is None and not self._defaults.budget:
            return None
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise place.error(
                f"budget must be a mapping with keys {', '.join(BUDGET_KEYS)}, not {value!r}"
            )
        unknown = [str(key) for key in value if key not in BUDGET_KEYS]
        if unknown:
            raise place.error(unknown_keys_message("budget key", unknown, BUDGET_KEYS))
        return CaseBudget(**{**self._defaults.budget, **value})

    def _tags(self, value: Any, place: RowPlace) -> tuple[str, ...]:
        if value is None:
            value = ()
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise place.error(f"tags must be a list of strings, not {value!r}")
        if not all(isinstance(tag, str) and tag for tag in value):
            raise place.error(f"tags must be non-empty strings, not {list(value)!r}")
        return tuple(dict.fromkeys((*self._defaults.tags, *value)))


def unique_cases(placed: Sequence[tuple[Case, RowPlace]]) -> list[Case]:
    """The cases, or a `DatasetError` naming both places of the first repeated id."""
    first: dict[str, RowPlace] = {}
    for case, place in placed:
        seen = first.setdefault(case.id, place)
        if seen is not place:
            where = f"line {seen.line}" if seen.line is not None else seen.label
            raise place.error(
                f"duplicate case id {case.id!r}: already used at {where}; case ids must be "
                "unique (rename one)"
            )
    return [case for case, _ in placed]
