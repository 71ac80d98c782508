"""Each dataset format loads to the same cases: JSONL, YAML (a list, or a mapping with
dataset-level defaults) and CSV (budget columns, `|`-separated tags, other columns as
metadata); relative fixtures resolve against the file's directory and a missing fixture
directory is kept, not refused."""

from __future__ import annotations

from pathlib import Path

from tiller.evals import Case, CaseBudget, Dataset


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_jsonl_dataset_reads_one_case_per_line_and_skips_blank_lines(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "smoke.jsonl",
        '{"id": "add", "input": "2+2?", "expected": "4", "tags": ["math"]}\n'
        "\n"
        '{"id": "fix", "input": {"task": "fix"}, "metadata": {"level": 2}, "fixture": "fx/a",'
        ' "budget": {"max_steps": 3, "max_cost_usd": 0.5}}\n',
    )
    dataset = Dataset.load(path)
    assert dataset.name == "smoke"
    assert list(dataset) == [
        Case("add", "2+2?", expected="4", tags=("math",)),
        Case(
            "fix",
            {"task": "fix"},
            metadata={"level": 2},
            fixture=tmp_path / "fx" / "a",
            budget=CaseBudget(max_steps=3, max_cost_usd=0.5),
        ),
    ]


def test_a_missing_fixture_directory_is_kept_for_the_case_to_fail_on(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", '{"id": "a", "input": "x", "fixture": "nowhere"}\n')
    case = Dataset.load(path)["a"]
    assert case.fixture == tmp_path / "nowhere"
    assert not case.fixture.exists()


def test_an_absolute_fixture_is_kept_as_written(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", '{"id": "a", "input": "x", "fixture": "/srv/fx"}\n')
    assert Dataset.load(path)["a"].fixture == Path("/srv/fx")


def test_a_yaml_list_of_cases_loads(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "cases.yml",
        "- id: a\n  input: say hi\n  expected: hi\n- id: b\n  input: [1, 2]\n  tags: [slow]\n",
    )
    dataset = Dataset.load(path)
    assert (dataset.name, dataset.ids) == ("cases", ("a", "b"))
    assert dataset["b"] == Case("b", [1, 2], tags=("slow",))


def test_yaml_dataset_defaults_apply_to_every_case_and_a_case_overrides_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "evals").mkdir()
    path = _write(
        tmp_path / "evals" / "invoices.yaml",
        """\
name: invoice-bugs
fixture_root: fixtures
budget: {max_steps: 8, max_cost_usd: 0.25}
metadata: {suite: smoke, project: invoice}
tags: [invoice]
cases:
  - id: rounding
    input: fix the rounding of totals
    fixture: rounding
    budget: {max_steps: 3}
    metadata: {suite: regression}
    tags: [slow, invoice]
  - id: no-fixture
    input: explain the tax rule
""",
    )
    dataset = Dataset.load(path)
    assert dataset.name == "invoice-bugs"
    rounding, plain = dataset
    assert rounding == Case(
        "rounding",
        "fix the rounding of totals",
        fixture=tmp_path / "evals" / "fixtures" / "rounding",
        budget=CaseBudget(max_steps=3, max_cost_usd=0.25),
        metadata={"suite": "regression", "project": "invoice"},
        tags=("invoice", "slow"),
    )
    assert plain == Case(
        "no-fixture",
        "explain the tax rule",
        budget=CaseBudget(max_steps=8, max_cost_usd=0.25),
        metadata={"suite": "smoke", "project": "invoice"},
        tags=("invoice",),
    )


def test_a_csv_dataset_reads_budget_columns_pipe_separated_tags_and_metadata(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path / "qa.csv",
        "id,input,expected,tags,fixture,max_steps,max_cost_usd,difficulty,metadata.expect\n"
        'q1,"What is 2+2, roughly?",4,math | easy,,3,0.1,low,yes\n'
        "\n"
        'q2,"two\nlines",,,fx/q2,,,high,\n',
    )
    dataset = Dataset.load(path)
    assert list(dataset) == [
        Case(
            "q1",
            "What is 2+2, roughly?",
            expected="4",
            tags=("math", "easy"),
            budget=CaseBudget(max_steps=3, max_cost_usd=0.1),
            metadata={"difficulty": "low", "expect": "yes"},
        ),
        Case(
            "q2",
            "two\nlines",
            fixture=tmp_path / "fx" / "q2",
            metadata={"difficulty": "high", "expect": ""},
        ),
    ]


def test_a_csv_written_by_a_spreadsheet_with_a_bom_and_crlf_loads(tmp_path: Path) -> None:
    path = tmp_path / "sheet.csv"
    path.write_bytes("\ufeffid,input\r\na,hello\r\nb,world\r\n".encode())
    assert Dataset.load(path).ids == ("a", "b")


def test_a_suffix_in_capitals_is_read_by_its_format(tmp_path: Path) -> None:
    path = _write(tmp_path / "D.JSONL", '{"id": "a", "input": "x"}\n')
    assert Dataset.load(path).ids == ("a",)


def test_the_name_given_to_load_wins_over_the_files(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.yaml", "name: inner\ncases: [{id: a, input: x}]\n")
    assert Dataset.load(path, name="outer").name == "outer"


def test_a_yaml_dataset_loads_after_yaml_was_imported_again(tmp_path: Path) -> None:
    """PyYAML's C loader keeps the node classes of the first `import yaml`; a process that
    imports yaml afresh (pytester does, a plugin reloading modules may) must still read a
    dataset. Run in a subprocess so this test's own modules stay as they are."""
    import subprocess
    import sys

    dataset = tmp_path / "cases.yaml"
    dataset.write_text("cases:\n  - id: a\n    input: hi\n  - id: b\n    input: ho\n")
    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tiller.evals import Dataset\n"
        f"path = Path({str(dataset)!r})\n"
        "assert len(Dataset.load(path).cases) == 2\n"
        "for name in [m for m in sys.modules if m == 'yaml' or m.startswith('yaml.')]:\n"
        "    del sys.modules[name]\n"
        "import yaml\n"
        "print(len(Dataset.load(path).cases))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"
