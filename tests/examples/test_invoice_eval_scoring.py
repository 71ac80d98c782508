"""The invoice eval's `tests` scorer cannot be talked into a pass by files the agent
leaves in its copy: a module that shadows `unittest`, an extra test module that exits 0
when discovered, an `invoice.py` that exits 0 while it is imported, a `sitecustomize.py`.
Each trick is planted in a copy whose bug is still there, and the score must fail."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tiller.evals import CaseOutcome, Score
from tiller.examples.invoice_eval import invoice_eval_spec
from tiller.state import StopCause
from tiller.tools import DEFAULT_SANDBOX

pytestmark = pytest.mark.skipif(
    not DEFAULT_SANDBOX.probe().available,
    reason=f"the invoice eval runs its tests in bwrap: {DEFAULT_SANDBOX.probe().reason}",
)

#: Files an agent could leave beside the buggy code, each a way to end the test run
#: "successfully" without running the real tests.
TRICKS = {
    "shadowed-unittest": {"unittest.py": "raise SystemExit(0)\n"},
    "discovered-module-exits": {"test_zz.py": "import os\nos._exit(0)\n"},
    "sitecustomize-exits": {"sitecustomize.py": "import os\nos._exit(0)\n"},
    "pth-exits": {"zz.pth": "import os; os._exit(0)\n"},
    "fake-unittest-package": {"unittest/__init__.py": "raise SystemExit(0)\n"},
}


async def _score(
    tmp_path: Path, plant: dict[str, str], *, case_id: str = "tax-subtracted"
) -> tuple[Score, Path]:
    spec = invoice_eval_spec(cache_root=tmp_path / "cache")
    case = next(case for case in spec.cases if case.id == case_id)
    assert case.fixture is not None
    workspace = tmp_path / "ws"
    shutil.copytree(case.fixture, workspace)
    for name, text in plant.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    tests = next(s for s in spec.scorers if s.name == "tests")
    outcome = CaseOutcome(case, 0, "fixed", StopCause.COMPLETED, workspace=workspace)
    return await tests.score(outcome), workspace


@pytest.mark.parametrize("trick", list(TRICKS))
async def test_a_planted_file_does_not_pass_the_buggy_code(tmp_path: Path, trick: str) -> None:
    score, _ = await _score(tmp_path, TRICKS[trick])
    assert not score.passed, score.explanation
    assert "FAILED (failures=" in score.explanation, score.explanation


async def test_code_under_test_that_exits_0_on_import_does_not_pass(tmp_path: Path) -> None:
    spec = invoice_eval_spec(cache_root=tmp_path / "cache")
    case = next(case for case in spec.cases if case.id == "tax-subtracted")
    assert case.fixture is not None
    buggy = (case.fixture / "invoice.py").read_text()
    # It even prints what a passing run prints, before it ends the process with 0.
    fake = "import os, sys\nsys.stderr.write('Ran 26 tests in 0.001s\\n\\nOK\\n')\nos._exit(0)\n"
    score, _ = await _score(tmp_path, {"invoice.py": fake + buggy})
    assert not score.passed, score.explanation
    assert "did not finish" in score.explanation, score.explanation


async def test_code_under_test_that_exits_0_inside_a_test_does_not_pass(tmp_path: Path) -> None:
    spec = invoice_eval_spec(cache_root=tmp_path / "cache")
    case = next(case for case in spec.cases if case.id == "tax-subtracted")
    assert case.fixture is not None
    buggy = (case.fixture / "invoice.py").read_text()
    exits = buggy.replace(
        "def tax_amount(",
        "def tax_amount(*a, **k):\n    import os\n    os._exit(0)\n\n\ndef _old_tax_amount(",
        1,
    )
    assert exits != buggy
    score, _ = await _score(tmp_path, {"invoice.py": exits})
    assert not score.passed, score.explanation


async def test_code_under_test_that_hides_the_tests_does_not_pass(tmp_path: Path) -> None:
    """Zero tests run is an `OK` run to unittest: the runner counts them."""
    spec = invoice_eval_spec(cache_root=tmp_path / "cache")
    case = next(case for case in spec.cases if case.id == "tax-subtracted")
    assert case.fixture is not None
    buggy = (case.fixture / "invoice.py").read_text()
    hides = "import unittest\nunittest.TestLoader.testMethodPrefix = 'nothing_'\n"
    score, _ = await _score(tmp_path, {"invoice.py": hides + buggy})
    assert not score.passed, score.explanation
    assert "FAILED (ran 0 tests, not the 26 there are)" in score.explanation, score.explanation


async def test_the_fixed_code_passes_and_leaves_the_copy_as_it_was(tmp_path: Path) -> None:
    spec = invoice_eval_spec(cache_root=tmp_path / "cache")
    pristine = spec.cases[0].fixture.parents[1] / "pristine"  # type: ignore[union-attr]
    score, workspace = await _score(tmp_path, {"invoice.py": (pristine / "invoice.py").read_text()})
    assert score.passed, score.explanation
    assert "Ran 26 tests" in score.explanation and "\nOK" in score.explanation
    assert sorted(p.name for p in workspace.iterdir()) == sorted(p.name for p in pristine.iterdir())
