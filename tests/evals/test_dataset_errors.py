"""A dataset that cannot be loaded says where (file:line) and what to do: a malformed row
in each format, a duplicate id naming both lines, an unknown key with the known ones (a
typo like `expect` never drops the expected answer), an unknown suffix, a missing file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller.errors import UsageError
from tiller.evals import Case, Dataset, DatasetError


def _load_error(tmp_path: Path, name: str, text: str) -> tuple[DatasetError, str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DatasetError) as caught:
        Dataset.load(path)
    return caught.value, str(path)


def test_a_dataset_error_is_a_usage_error_carrying_its_place(tmp_path: Path) -> None:
    error, path = _load_error(tmp_path, "d.jsonl", '{"id": "a", "input": "x"}\nnot json\n')
    assert isinstance(error, UsageError)
    assert (error.source, error.line) == (path, 2)
    assert str(error).startswith(f"{path}:2: not a JSON object")


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ('{"id": "a", "input": "x"}\n{"id": "b", "input": \n', 2, "not a JSON object"),
        ('{"id": "a", "input": "x"}\n\n["b", "x"]\n', 3, "a case is a mapping"),
        ('{"input": "x"}\n', 1, "has no `id`: give every case a unique id"),
        ('{"id": 7, "input": "x"}\n', 1, "is not a string (int): quote it"),
        ('{"id": "a b", "input": "x"}\n', 1, "case id 'a b': use letters"),
        ('{"id": "a"}\n', 1, "case 'a' has no `input`"),
        ('{"id": "a", "input": "x", "tags": "slow"}\n', 1, "tags must be a list of strings"),
        ('{"id": "a", "input": "x", "metadata": [1]}\n', 1, "metadata must be a mapping"),
        ('{"id": "a", "input": "x", "budget": {"max_steps": 0}}\n', 1, "max_steps must be at"),
        ('{"id": "a", "input": "x", "budget": 5}\n', 1, "budget must be a mapping"),
        ('{"id": "a", "input": "x", "fixture": 3}\n', 1, "fixture must be a directory path"),
    ],
)
def test_a_malformed_jsonl_row_names_its_line_and_the_problem(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    error, path = _load_error(tmp_path, "d.jsonl", text)
    assert str(error).startswith(f"{path}:{line}: ")
    assert says in str(error)


def test_a_typo_in_a_key_is_refused_with_the_known_keys_and_a_guess(tmp_path: Path) -> None:
    error, path = _load_error(
        tmp_path, "d.jsonl", '{"id": "a", "input": "x", "expect": "y", "colour": 1}\n'
    )
    assert str(error) == (
        f"{path}:1: unknown key 'expect', 'colour' ('expect': did you mean 'expected'?); "
        "the known ones are id, input, expected, metadata, fixture, budget, tags"
    )


def test_a_typo_in_a_budget_key_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    error, path = _load_error(
        tmp_path, "d.jsonl", '{"id": "a", "input": "x", "budget": {"max_step": 2}}\n'
    )
    assert str(error) == (
        f"{path}:1: unknown budget key 'max_step' ('max_step': did you mean 'max_steps'?); "
        "the known ones are max_steps, max_output_tokens, max_cost_usd"
    )


def test_a_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    error, path = _load_error(
        tmp_path,
        "d.jsonl",
        '{"id": "a", "input": "x"}\n{"id": "b", "input": "x"}\n{"id": "a", "input": "y"}\n',
    )
    assert str(error) == (
        f"{path}:3: duplicate case id 'a': already used at line 1; case ids must be unique "
        "(rename one)"
    )


def test_a_yaml_error_names_the_line_its_case_starts_on(tmp_path: Path) -> None:
    text = "cases:\n  - id: a\n    input: x\n  - id: b\n    inptu: y\n"
    error, path = _load_error(tmp_path, "d.yaml", text)
    assert str(error).startswith(f"{path}:4: unknown key 'inptu' ('inptu': did you mean 'input'?)")


def test_a_yaml_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    text = "- id: a\n  input: x\n\n- id: b\n  input: x\n- {id: a, input: z}\n"
    error, path = _load_error(tmp_path, "d.yml", text)
    assert str(error).startswith(f"{path}:6: duplicate case id 'a': already used at line 1")


def test_a_yaml_key_given_twice_in_a_case_is_refused_at_its_line(tmp_path: Path) -> None:
    text = "- id: a\n  input: x\n  expected: 1\n  expected: 2\n"
    error, path = _load_error(tmp_path, "d.yaml", text)
    assert str(error) == (
        f"{path}:4: key 'expected' is given twice in this case (the case starts at line 1)"
    )


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("- id: a\n  input: [x\n", 3, "not valid YAML"),
        ("cases:\n  - id: a\n    input: x\ncasses: []\n", 4, "unknown dataset key 'casses'"),
        ("name: x\n", 1, "has no `cases`"),
        ("cases: {id: a}\n", 1, "`cases` must be a list"),
        ("just text\n", 1, "a YAML dataset is a list of cases"),
        ("- id: a\n  input: x\n- plain\n", 3, "a case is a mapping"),
        ("- id: 001\n  input: x\n", 1, "is not a string (int): quote it"),
    ],
)
def test_a_malformed_yaml_dataset_names_the_line(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    error, path = _load_error(tmp_path, "d.yaml", text)
    assert str(error).startswith(f"{path}:{line}: ")
    assert says in str(error)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "the file is empty"),
        ("budget: {max_stepz: 1}\ncases: []\n", "unknown default budget key 'max_stepz'"),
        ("budget: {max_steps: 0}\ncases: []\n", "the default budget: a case budget's max_steps"),
        ("tags: slow\ncases: []\n", "the default tags must be a list"),
    ],
)
def test_a_bad_yaml_dataset_setting_names_the_file(tmp_path: Path, text: str, says: str) -> None:
    error, path = _load_error(tmp_path, "d.yaml", text)
    assert str(error).startswith(f"{path}: ")
    assert says in str(error)


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("id,input\na,x\nb\n", 3, "the record has 1 cells but the header has 2 columns"),
        ("id,input,max_steps\na,x,3.5\n", 2, "column 'max_steps': '3.5' is not a whole number"),
        ("id,input,max_cost_usd\na,x,cheap\n", 2, "column 'max_cost_usd': 'cheap' is not a"),
        ('id,input\na,"x\nstill x"\n,y\n', 4, "has no `id`"),
        ("id,input\na,\n", 2, "case 'a' has no `input`"),
        ("id,input\na,x\na,y\n", 3, "duplicate case id 'a': already used at line 2"),
        ("id,input,expect\na,x,y\n", 1, "column 'expect': did you mean 'expected'?"),
        ("id,expected\na,x\n", 1, "the header has no 'input' column"),
        ("id,input,id\na,x,a\n", 1, "column 'id' appears twice"),
        ("id,input,budget\na,x,3\n", 1, "no column 'budget': give the budget as columns"),
        ("id,input,max_steps\na,x,0\n", 2, "max_steps must be at least 1"),
    ],
)
def test_a_malformed_csv_row_names_the_line_its_record_starts_on(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    error, path = _load_error(tmp_path, "d.csv", text)
    assert str(error).startswith(f"{path}:{line}: ")
    assert says in str(error)


@pytest.mark.parametrize(
    ("name", "text"),
    [("d.jsonl", "\n\n"), ("d.csv", "id,input\n"), ("d.yaml", "[]\n"), ("d.yml", "cases: []\n")],
)
def test_a_dataset_file_with_no_cases_is_refused(tmp_path: Path, name: str, text: str) -> None:
    error, path = _load_error(tmp_path, name, text)
    assert str(error) == f"{path}: the dataset has no cases: add at least one"


def test_an_unknown_suffix_says_which_are_supported(tmp_path: Path) -> None:
    error, path = _load_error(tmp_path, "d.json", "[]")
    assert str(error) == (
        f"{path}: unsupported dataset suffix '.json': use .jsonl (JSONL), .yaml (YAML), "
        ".yml (YAML), .csv (CSV)"
    )


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"nope\.jsonl: no such dataset file"):
        Dataset.load(tmp_path / "nope.jsonl")


def test_a_file_that_is_not_utf8_says_to_save_it_as_utf8(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_bytes(b"id,input\na,caf\xe9\n")
    with pytest.raises(DatasetError, match=r"not UTF-8 text .*: save it as UTF-8"):
        Dataset.load(path)


def test_a_python_case_list_with_a_duplicate_or_a_non_case_names_the_positions() -> None:
    with pytest.raises(DatasetError) as caught:
        Dataset([Case("a", "x"), Case("b", "x"), Case("a", "y")])
    assert str(caught.value) == (
        "<cases>: case #3: duplicate case id 'a': already used at case #1; case ids must be "
        "unique (rename one)"
    )
    with pytest.raises(DatasetError, match="case #2: dict is not a Case"):
        Dataset([Case("a", "x"), {"id": "b", "input": "x"}])  # type: ignore[list-item]
    with pytest.raises(UsageError, match="wrap a single case in a list"):
        Dataset(Case("a", "x"))  # type: ignore[arg-type]
