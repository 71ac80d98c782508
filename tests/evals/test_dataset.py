"""A dataset is an ordered, immutable collection of cases with unique ids: iterable,
sized, looked up by id, narrowed by `select`; typed inputs and expected values are
validated with pydantic (the error names the field); a dataset built in Python is stored
as JSONL and loads back equal; 10,000 rows load in linear time."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from pydantic import BaseModel

import tiller.evals
from tiller.errors import UsageError
from tiller.evals import Case, CaseBudget, Dataset, DatasetError


class Invoice(BaseModel):
    number: str
    total: float


class Answer(BaseModel):
    total: float


def _dataset() -> Dataset:
    return Dataset(
        [
            Case("a", "x", tags=("fast", "math")),
            Case("b", "y", tags=("slow",)),
            Case("c", "z", tags=("fast",)),
        ],
        name="three",
    )


def test_a_dataset_keeps_its_order_and_is_looked_up_by_id() -> None:
    dataset = _dataset()
    assert [case.id for case in dataset] == ["a", "b", "c"]
    assert (len(dataset), dataset.ids, dataset.name) == (3, ("a", "b", "c"), "three")
    assert dataset["b"] == Case("b", "y", tags=("slow",))
    assert "c" in dataset and "d" not in dataset
    assert dataset.get("d") is None
    assert repr(dataset) == "Dataset(name='three', cases=3)"


def test_an_unknown_id_is_a_key_error_naming_close_ids() -> None:
    with pytest.raises(KeyError, match=r"dataset 'three' has no case 'aa' \(did you mean 'a'\?\)"):
        _dataset()["aa"]


def test_a_dataset_cannot_be_changed() -> None:
    dataset = _dataset()
    with pytest.raises(AttributeError):
        dataset.extra = 1  # type: ignore[attr-defined]
    assert isinstance(dataset.cases, tuple)


def test_select_keeps_cases_with_any_of_the_tags_and_the_given_ids_in_order() -> None:
    dataset = _dataset()
    assert dataset.select(tags=["fast"]).ids == ("a", "c")
    assert dataset.select(tags=["slow", "math"]).ids == ("a", "b")
    assert dataset.select(ids=["c", "a"]).ids == ("a", "c")
    assert dataset.select(tags=["fast"], ids=["c", "b"]).ids == ("c",)
    assert dataset.select(tags=["fast"]).name == "three"


def test_select_refuses_an_id_or_a_tag_no_case_has_and_a_bare_string() -> None:
    dataset = _dataset()
    with pytest.raises(UsageError, match=r"has no case 'd'"):
        dataset.select(ids=["a", "d"])
    with pytest.raises(UsageError, match=r"no case has tag\(s\) quick \(the tags are: fast, math"):
        dataset.select(tags=["quick"])
    with pytest.raises(UsageError, match="takes a list, not the string 'fast'"):
        dataset.select(tags="fast")


def test_a_typed_dataset_validates_and_converts_each_row(tmp_path: Path) -> None:
    path = tmp_path / "invoices.jsonl"
    path.write_text(
        '{"id": "i1", "input": {"number": "7", "total": "1.5"}, "expected": {"total": 1.5}}\n'
    )
    case = Dataset.load(path, input_type=Invoice, expected_type=Answer)["i1"]
    assert case.input == Invoice(number="7", total=1.5)
    assert case.expected == Answer(total=1.5)


def test_a_row_that_does_not_fit_its_type_names_the_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "invoices.jsonl"
    path.write_text(
        '{"id": "i1", "input": {"number": "7", "total": 2}}\n'
        '{"id": "i2", "input": {"number": "8", "total": "lots"}}\n'
    )
    with pytest.raises(DatasetError) as caught:
        Dataset.load(path, input_type=Invoice)
    message = str(caught.value)
    assert message.startswith(f"{path}:2: input does not fit Invoice: input.total: Input should")
    assert message.endswith("(fix the row, or the type)")


def test_a_typed_expected_value_that_misses_a_field_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("- id: i1\n  input: x\n  expected: {sum: 3}\n")
    with pytest.raises(
        DatasetError,
        match=r"d\.yaml:1: expected does not fit Answer: "
        r"expected\.total: Field required",
    ):
        Dataset.load(path, expected_type=Answer)


def test_a_typed_csv_decodes_json_cells_and_validates_text_cells(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text('id,input,expected\ni1,"{""number"": ""7"", ""total"": 2}",2.5\n')
    case = Dataset.load(path, input_type=Invoice, expected_type=float)["i1"]
    assert (case.input, case.expected) == (Invoice(number="7", total=2.0), 2.5)


def test_a_typed_csv_keeps_text_that_only_looks_like_json_when_the_type_is_text(
    tmp_path: Path,
) -> None:
    path = tmp_path / "d.csv"
    path.write_text('id,input\ni1,[WIP] fix it\ni2,"[""a""]"\n')
    assert [case.input for case in Dataset.load(path, input_type=str)] == ["[WIP] fix it", '["a"]']


def test_a_typed_csv_cell_that_does_not_fit_names_its_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text('id,input\ni1,"{""number"": ""7"", ""total"": 2}"\ni2,"{""total"": 2}"\n')
    with pytest.raises(DatasetError) as caught:
        Dataset.load(path, input_type=Invoice)
    assert str(caught.value).startswith(
        f"{path}:3: input does not fit Invoice: input.number: Field required"
    )


def test_from_cases_builds_from_rows_and_validates_typed_cases() -> None:
    dataset = Dataset.from_cases(
        [
            Case("i1", {"number": "7", "total": 2}),
            {"id": "i2", "input": {"number": "8", "total": 3}, "tags": ["new"]},
        ],
        name="typed",
        input_type=Invoice,
    )
    assert [case.input for case in dataset] == [
        Invoice(number="7", total=2.0),
        Invoice(number="8", total=3.0),
    ]
    assert dataset["i2"].tags == ("new",)
    with pytest.raises(
        DatasetError,
        match=r"<cases>: case #2: input does not fit Invoice: "
        r"input\.number: Field required",
    ):
        Dataset.from_cases(
            [Case("i1", {"number": "7", "total": 2}), Case("i2", {"total": 1})], input_type=Invoice
        )
    with pytest.raises(DatasetError, match=r"<cases>: case #1: unknown key 'expect'"):
        Dataset.from_cases([{"id": "i1", "input": "x", "expect": "y"}])


def test_a_type_pydantic_cannot_validate_is_refused_when_the_dataset_is_built() -> None:
    class Plain:
        pass

    with pytest.raises(UsageError, match=r"input_type=.*Plain.* is not a type pydantic can"):
        Dataset.from_cases([Case("a", "x")], input_type=Plain)


def test_a_python_built_dataset_is_stored_as_jsonl_and_loads_back_equal(tmp_path: Path) -> None:
    elsewhere = tmp_path / "shared" / "fixture"
    built = Dataset(
        [
            Case(
                "i1",
                Invoice(number="7", total=2.5),
                expected=Answer(total=2.5),
                metadata={"source": "hand", "weights": [1, 2]},
                fixture=tmp_path / "store" / "fixtures" / "one",
                budget=CaseBudget(max_steps=4, max_output_tokens=100, max_cost_usd=0.2),
                tags=("typed", "slow"),
            ),
            Case("i2", Invoice(number="8", total=1.0), fixture=elsewhere, budget=CaseBudget()),
        ],
        name="store",
    )
    (tmp_path / "store").mkdir()
    path = built.to_jsonl(tmp_path / "store" / "store.jsonl")
    lines = path.read_text().splitlines()
    assert lines[0] == (
        '{"id":"i1","input":{"number":"7","total":2.5},"expected":{"total":2.5},'
        '"metadata":{"source":"hand","weights":[1,2]},"fixture":"fixtures/one",'
        '"budget":{"max_steps":4,"max_output_tokens":100,"max_cost_usd":0.2},'
        '"tags":["typed","slow"]}'
    )
    assert f'"fixture":"{elsewhere}"' in lines[1]  # outside the file's directory: absolute
    assert Dataset.load(path, input_type=Invoice, expected_type=Answer) == built
    assert Dataset.load(path)["i1"].input == {"number": "7", "total": 2.5}  # untyped: its JSON


def test_saving_a_loaded_dataset_elsewhere_keeps_where_its_fixtures_are(tmp_path: Path) -> None:
    source = tmp_path / "src" / "d.yaml"
    source.parent.mkdir()
    source.write_text("fixture_root: fx\ncases:\n  - {id: a, input: x, fixture: one}\n")
    loaded = Dataset.load(source)
    (tmp_path / "out").mkdir()
    again = Dataset.load(loaded.to_jsonl(tmp_path / "out" / "d.jsonl"), name="d")
    assert again == loaded
    assert again["a"].fixture == tmp_path / "src" / "fx" / "one"


def test_a_dataset_is_saved_only_as_jsonl(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"saved as JSONL: name the file \*\.jsonl"):
        _dataset().to_jsonl(tmp_path / "d.json")


def test_a_dataset_that_cannot_be_written_says_why(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"d\.jsonl: cannot write the dataset: No such file"):
        _dataset().to_jsonl(tmp_path / "missing" / "d.jsonl")
    odd = Dataset([Case("a", "x", metadata={"handle": object()})])
    with pytest.raises(UsageError, match="case 'a': its metadata cannot be written as JSON"):
        odd.to_jsonl(tmp_path / "d.jsonl")
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind


def _lines_run_loading(path: Path) -> int:
    """How many lines of tiller.evals run to load `path`: a count that does not depend on
    the machine's speed, so the cost of loading is compared without a clock."""
    count = 0
    evals = str(Path(tiller.evals.__file__).parent)

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        count += event == "line"
        return local

    def calls(frame: FrameType, event: str, arg: object) -> Any:
        return local if frame.f_code.co_filename.startswith(evals) else None

    sys.settrace(calls)
    try:
        Dataset.load(path)
    finally:
        sys.settrace(None)
    return count


def _rows(suffix: str, n: int) -> str:
    if suffix == ".csv":
        return "id,input,expected,tags\n" + "".join(
            f"case-{i},question {i},{i},t\n" for i in range(n)
        )
    if suffix == ".yaml":
        return "".join(
            f"- {{id: case-{i}, input: question {i}, expected: '{i}', tags: [t]}}\n"
            for i in range(n)
        )
    return "".join(
        f'{{"id": "case-{i}", "input": "question {i}", "expected": "{i}", "tags": ["t"]}}\n'
        for i in range(n)
    )


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".yaml"])
def test_ten_thousand_rows_load_without_quadratic_cost(tmp_path: Path, suffix: str) -> None:
    small, large = tmp_path / f"small{suffix}", tmp_path / f"large{suffix}"
    small.write_text(_rows(suffix, 1_000))
    large.write_text(_rows(suffix, 10_000))
    dataset = Dataset.load(large)
    assert (len(dataset), dataset.ids[-1], dataset["case-9999"]) == (
        10_000,
        "case-9999",
        Case("case-9999", "question 9999", expected="9999", tags=("t",)),
    )
    # Ten times the rows runs at most ten times the lines (a quadratic loader: ~100 times).
    assert _lines_run_loading(large) <= 10 * _lines_run_loading(small)
