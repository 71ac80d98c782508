"""`Dataset`: the cases of an eval, in order, each id once.

A dataset is a value: built from `Case`s in Python, or loaded from a file a person wrote
(JSONL, YAML or CSV; see `Dataset.load`), and stored back as JSONL (`to_jsonl`). It never
changes; `select` returns a new one. Loading checks everything it can without running a
case (keys, ids, budgets, typed inputs) and names the file and line of what it refuses;
a fixture directory that does not exist is kept as it is written, since a missing fixture
fails that case when it runs, not the whole eval.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from ..errors import UsageError
from ._case import Case
from ._dataset_csv import read_csv
from ._dataset_error import DatasetError
from ._dataset_jsonl import read_jsonl, write_jsonl
from ._dataset_rows import RowDefaults, RowPlace, RowReader, unique_cases
from ._dataset_yaml import read_yaml

__all__ = ["DATASET_SUFFIXES", "Dataset"]

#: The file suffixes `Dataset.load` reads, each to its format.
DATASET_SUFFIXES: Mapping[str, str] = {
    ".jsonl": "JSONL",
    ".yaml": "YAML",
    ".yml": "YAML",
    ".csv": "CSV",
}
_PYTHON = "<cases>"


class Dataset:
    """An ordered, immutable collection of cases with unique ids.

    Iterate it for its cases in order; `len(dataset)`; `dataset["case-id"]` (a `KeyError`
    naming close ids when there is none), `"case-id" in dataset`, `dataset.get(id)`.
    `name` names the dataset in results and reports."""

    __slots__ = ("_by_id", "_cases", "_name")

    def __init__(self, cases: Iterable[Case], *, name: str = "dataset") -> None:
        if isinstance(cases, Case | str | Mapping):
            raise UsageError("Dataset takes a sequence of cases; wrap a single case in a list")
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"a dataset's name must be a non-empty string, not {name!r}")
        placed = []
        for number, case in enumerate(cases, start=1):
            place = RowPlace(_PYTHON, label=f"case #{number}")
            if not isinstance(case, Case):
                raise place.error(
                    f"{type(case).__name__} is not a Case: build cases with Case(...), "
                    "or rows (mappings) with Dataset.from_cases"
                )
            placed.append((case, place))
        self._cases = tuple(unique_cases(placed))
        self._by_id = {case.id: case for case in self._cases}
        self._name = name

    # ── building ──────────────────────────────────────────────────────────────────────

    @classmethod
    def from_cases(
        cls,
        cases: Iterable[Case | Mapping[str, Any]],
        *,
        name: str = "dataset",
        input_type: Any = None,
        expected_type: Any = None,
    ) -> Dataset:
        """A dataset of `cases`: `Case`s, or rows (mappings with the keys of a dataset
        file's rows). With `input_type`/`expected_type` (a pydantic model or any type
        pydantic validates), each input and expected value is validated and converted
        (a dict becomes the model); a value that does not fit raises `DatasetError`
        naming the case and the field."""
        reader = RowReader(input_type=input_type, expected_type=expected_type)
        typed = input_type is not None or expected_type is not None
        built: list[Case] = []
        for number, item in enumerate(cases, start=1):
            place = RowPlace(_PYTHON, label=f"case #{number}")
            if isinstance(item, Case):
                built.append(reader.retyped(item, place) if typed else item)
            else:
                built.append(reader.case(item, place))
        return cls(built, name=name)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        name: str | None = None,
        input_type: Any = None,
        expected_type: Any = None,
    ) -> Dataset:
        """Load a dataset file, by its suffix: `.jsonl` (one JSON object per line),
        `.yaml`/`.yml` (a list of cases, or a mapping with `cases` and dataset-level
        `name`, `fixture_root`, `budget`, `metadata`, `tags`) or `.csv` (a header row;
        columns `id`, `input`, `expected`, `tags` separated by `|`, `fixture`,
        `max_steps`, `max_output_tokens`, `max_cost_usd`, every other column metadata).

        A row's keys are `id` (required: results are stored under it), `input`
        (required), `expected`, `metadata`, `fixture`, `budget` and `tags`; an unknown
        key is refused. A relative fixture resolves against the file's directory (YAML:
        its `fixture_root`). `input_type`/`expected_type` validate each row's values
        with pydantic. The name defaults to the YAML's `name`, else the file's stem.

        Raises `DatasetError` naming the file and line of the first bad row, or saying
        the file has no cases at all."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in DATASET_SUFFIXES:
            supported = ", ".join(f"{s} ({f})" for s, f in DATASET_SUFFIXES.items())
            raise DatasetError(path, f"unsupported dataset suffix {path.suffix!r}: use {supported}")
        try:
            text = path.read_text(encoding="utf-8-sig")  # -sig: spreadsheets write a BOM
        except FileNotFoundError:
            raise DatasetError(path, "no such dataset file (check the path)") from None
        except IsADirectoryError:
            raise DatasetError(path, "is a directory: name the dataset file") from None
        except UnicodeDecodeError as exc:
            raise DatasetError(path, f"not UTF-8 text ({exc.reason}): save it as UTF-8") from None
        except OSError as exc:
            raise DatasetError(path, f"cannot read the dataset: {exc.strerror}") from None
        if DATASET_SUFFIXES[suffix] == "YAML":
            loaded = read_yaml(path, text, input_type, expected_type)
            cases, name = loaded.cases, name or loaded.name
        else:
            reader = RowReader(
                defaults=RowDefaults(fixture_root=path.parent),
                input_type=input_type,
                expected_type=expected_type,
                cells_are_text=suffix == ".csv",
            )
            cases = (read_csv if suffix == ".csv" else read_jsonl)(path, text, reader)
        if not cases:  # a truncated export or the wrong file, more often than not
            raise DatasetError(path, "the dataset has no cases: add at least one")
        return cls(cases, name=name or path.stem)

    def to_jsonl(self, path: str | Path) -> Path:
        """Store the dataset as JSONL at `path` (replaced whole), so `Dataset.load(path)`
        gives it back; typed values are written as their JSON (load with the same types
        to get the models back). A fixture under the file's directory is written relative
        to it, any other absolute. Returns the path."""
        path = Path(path)
        if path.suffix.lower() != ".jsonl":
            raise UsageError(f"{path}: a dataset is saved as JSONL: name the file *.jsonl")
        write_jsonl(self._cases, path)
        return path

    # ── reading ───────────────────────────────────────────────────────────────────────

    @property
    def name(self) -> str:
        return self._name

    @property
    def cases(self) -> tuple[Case, ...]:
        return self._cases

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self._by_id)

    @property
    def tags(self) -> frozenset[str]:
        """Every tag some case carries."""
        return frozenset(tag for case in self._cases for tag in case.tags)

    def __iter__(self) -> Iterator[Case]:
        return iter(self._cases)

    def __len__(self) -> int:
        return len(self._cases)

    def __contains__(self, case_id: object) -> bool:
        return case_id in self._by_id

    def __getitem__(self, case_id: str) -> Case:
        try:
            return self._by_id[case_id]
        except KeyError:
            raise KeyError(self._no_case(case_id)) from None

    @overload
    def get(self, case_id: str) -> Case | None: ...
    @overload
    def get(self, case_id: str, default: Case) -> Case: ...
    def get(self, case_id: str, default: Case | None = None) -> Case | None:
        return self._by_id.get(case_id, default)

    def select(
        self, *, tags: Sequence[str] | None = None, ids: Sequence[str] | None = None
    ) -> Dataset:
        """The cases carrying at least one of `tags` and (when given too) whose id is in
        `ids`, in the dataset's order, as a dataset of the same name. An id or a tag no
        case has is refused (`UsageError`): it is a typo more often than not."""
        for what, given in (("tags", tags), ("ids", ids)):
            if isinstance(given, str):
                raise UsageError(f"select({what}=...) takes a list, not the string {given!r}")
        wanted_ids = set(ids) if ids is not None else None
        wanted_tags = set(tags) if tags is not None else None
        if wanted_ids is not None and (missing := sorted(wanted_ids - set(self._by_id))):
            raise UsageError("; ".join(self._no_case(case_id) for case_id in missing))
        if wanted_tags is not None and (unknown := sorted(wanted_tags - self.tags)):
            known = ", ".join(sorted(self.tags)) or "none"
            raise UsageError(
                f"dataset {self._name!r}: no case has tag(s) {', '.join(unknown)} "
                f"(the tags are: {known})"
            )
        chosen = [
            case
            for case in self._cases
            if (wanted_ids is None or case.id in wanted_ids)
            and (wanted_tags is None or not wanted_tags.isdisjoint(case.tags))
        ]
        return Dataset(chosen, name=self._name)

    def _no_case(self, case_id: object) -> str:
        close = difflib.get_close_matches(str(case_id), list(self._by_id), n=3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        return f"dataset {self._name!r} has no case {case_id!r}{hint}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Dataset):
            return NotImplemented
        return (self._name, self._cases) == (other._name, other._cases)

    __hash__ = None  # type: ignore[assignment]  # cases hold mappings: equal, not hashable

    def __repr__(self) -> str:
        return f"Dataset(name={self._name!r}, cases={len(self._cases)})"
