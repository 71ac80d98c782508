"""Eval specs: a Python file or module naming an `EvalSpec`, loaded by reference, and
every way a reference can be wrong said in one line."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiller.errors import UsageError
from tiller.evals import Case, EvalSpec, Includes, load_eval_spec
from tiller.store import Bus

from ._runner_support import answering

SPEC_FILE = """
from tiller.evals import Case, EvalSpec, Includes
from helper_agent import agent

spec = EvalSpec(agent=agent, cases=[Case("one", "hello", expected="hello")],
                scorers=[Includes()], name="greeting", epochs=2)

def nightly():
    return EvalSpec(agent=agent, cases=[Case("two", "bye", expected="bye")],
                    scorers=[Includes()], name="nightly")

not_a_spec = 42
"""

HELPER = """
from tiller.loop import Agent
from tiller.model import ScriptedModel

def agent():
    return Agent(ScriptedModel(lambda messages, info: messages[0].text))
"""


@pytest.fixture
def spec_dir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "evals.py").write_text(textwrap.dedent(SPEC_FILE))
    (tmp_path / "helper_agent.py").write_text(textwrap.dedent(HELPER))
    yield tmp_path
    sys.modules.pop("helper_agent", None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def test_a_file_names_its_spec_and_may_import_its_neighbours(spec_dir: Path) -> None:
    spec = load_eval_spec(str(spec_dir / "evals.py"))
    assert (spec.name, spec.epochs, [c.id for c in spec.cases]) == ("greeting", 2, ["one"])
    nightly = load_eval_spec(f"{spec_dir / 'evals.py'}:nightly")
    assert [c.id for c in nightly.cases] == ["two"]


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("{dir}/missing.py", r"missing.py' does not exist"),
        ("{dir}/evals.py:absent", r"has no attribute 'absent'"),
        ("{dir}/evals.py:not_a_spec", r"is a int, not a tiller.evals.EvalSpec"),
        ("no_such_module_anywhere:spec", r"cannot import eval spec module"),
        ("", r"a path to a .py file"),
    ],
)
def test_a_wrong_reference_says_what_to_fix(spec_dir: Path, reference: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_eval_spec(reference.format(dir=spec_dir))


def test_a_file_that_raises_on_import_is_a_usage_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(UsageError, match=r"importing eval spec file .*RuntimeError: boom"):
        load_eval_spec(str(broken))


def test_a_module_reference_defaults_to_its_spec_attribute(
    spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(spec_dir))
    try:
        assert load_eval_spec("evals").name == "greeting"
        assert load_eval_spec("evals:nightly").name == "nightly"
    finally:
        sys.modules.pop("evals", None)


def test_a_spec_reads_its_cases_once_and_refuses_a_single_case() -> None:
    cases = (Case(f"c{n}", "x") for n in range(3))
    spec = EvalSpec(agent="m:a", cases=cases, scorers=[Includes()])  # type: ignore[arg-type]
    assert [c.id for c in spec.cases] == ["c0", "c1", "c2"]
    with pytest.raises(UsageError, match="a Dataset or a sequence of Case"):
        EvalSpec(agent="m:a", cases=Case("one", "x"), scorers=[])  # type: ignore[arg-type]


async def test_build_gives_the_callers_store_and_id_and_overrides(bus: Bus) -> None:
    spec = EvalSpec(
        agent=answering(lambda prompt: prompt),
        cases=[Case("one", "hello", expected="hello")],
        scorers=[Includes()],
        name="my spec!",
        epochs=3,
    )
    fresh = spec.build(store=bus)
    assert fresh.eval_id.startswith("my-spec-") and fresh.epochs == 3
    ev = spec.build(store=bus, eval_id="chosen", epochs=1, concurrency=1)
    report = await ev.run()
    assert (report.eval_id, report.total, report.passed) == ("chosen", 1, 1)
