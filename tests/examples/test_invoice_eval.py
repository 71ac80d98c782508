"""The bundled invoice eval (`tiller eval run examples/invoice_eval/eval.py`): its seeded
fixtures really fail their tests, its whole run gives the scorecard the scripted agent's
stated limits predict, and every case works on a private copy."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tiller.evals import Case, CaseOutcome, Eval, EvalReport, load_eval_spec
from tiller.examples.invoice_eval import (
    DEMO_REPAIR,
    PROJECT,
    SeededBug,
    SeededBugError,
    build_fixtures,
    invoice_cases,
    invoice_eval_spec,
)
from tiller.fleet import load_diff
from tiller.state import StopCause
from tiller.store import open_bus
from tiller.tools import DEFAULT_SANDBOX

REPO = Path(__file__).resolve().parents[2]
SPEC = "examples/invoice_eval/eval.py"

if not DEFAULT_SANDBOX.probe().available and os.environ.get("CI"):
    # CI installs bwrap (scripts/setup-system.sh): missing there is a broken setup.
    pytest.fail(f"bwrap is unavailable in CI: {DEFAULT_SANDBOX.probe().reason}")
sandboxed = pytest.mark.skipif(
    not DEFAULT_SANDBOX.probe().available,
    reason=f"the invoice eval runs its tests in bwrap: {DEFAULT_SANDBOX.probe().reason}",
)

#: What each case should come to, and why (see tiller/examples/invoice_eval/_fixer.py):
#: (passes, the agent's final words, or the start of them).
SCORECARD = {
    "discount-as-amount": (True, "Fixed the bug in invoice.py; all tests pass."),
    "tax-subtracted": (True, "Fixed the bug in invoice.py; all tests pass."),
    "total-not-rounded": (True, "Fixed the bug in invoice.py; all tests pass."),
    "subtotal-ignores-quantity": (True, "Fixed the bug in invoice.py; all tests pass."),
    "line-total-adds": (True, "Fixed the bug in invoice.py; all tests pass."),
    "round-half-even": (True, "Fixed the bug in invoice.py; all tests pass."),
    "clamp-upper-missing": (True, "Fixed the bug in invoice.py; all tests pass."),
    # A line went missing: it cannot tell which line is wrong, and gives up unedited.
    "clamp-removed": (False, "Around line 48 of invoice.py something is missing or extra"),
    "tax-percent-scale": (True, "Fixed the bug in invoice.py; all tests pass."),
    "bulk-top-tier-off-by-one": (True, "Fixed the bug in invoice.py; all tests pass."),
    # Two changed places: its one edit fixes the first; the tests still fail.
    "bulk-both-tiers-off-by-one": (
        False,
        "I changed invoice.py, but the tests still fail (FAILED (failures=1)).",
    ),
    # Its edit quotes a line that now occurs twice: edit_file refuses it.
    "bulk-tier-rate-duplicated": (
        False,
        "My edit of invoice.py was refused (old matches 2 times in invoice.py",
    ),
    "installments-off-by-one": (True, "Fixed the bug in invoice.py; all tests pass."),
    "installments-truncate-cents": (True, "Fixed the bug in invoice.py; all tests pass."),
    "late-fee-no-grace": (True, "Fixed the bug in invoice.py; all tests pass."),
    "overdue-fee-swapped-arguments": (True, "Fixed the bug in invoice.py; all tests pass."),
    "due-date-subtracts": (True, "Fixed the bug in invoice.py; all tests pass."),
    "overdue-on-due-date": (True, "Fixed the bug in invoice.py; all tests pass."),
    "invoice-number-padding": (True, "Fixed the bug in invoice.py; all tests pass."),
    # Held to 2 steps: it has run the tests and asked for the file when the budget ends.
    "page-count-floor": (False, "These tests fail: test_page_count. Reading invoice.py."),
}


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _unittest(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-B", "-m", "unittest", "-q"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system temporary directory, for this test only: the fixtures' cache and the
    cases' workspaces go there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_pristine_project_passes_and_every_seeded_fixture_fails(private_tmp: Path) -> None:
    cases = invoice_cases()
    assert [case.id for case in cases] == list(SCORECARD)
    fixtures = {case.id: case.fixture for case in cases}
    pristine = _unittest(next(iter(fixtures.values())).parents[1] / "pristine")
    assert pristine.returncode == 0 and pristine.stderr.rstrip().endswith("OK"), pristine.stderr
    contents = set()
    for case_id, fixture in fixtures.items():
        assert fixture is not None and fixture.is_relative_to(private_tmp)
        ran = _unittest(fixture)
        # A failed assertion, not a crash: each bug is a wrong answer the tests catch.
        assert ran.returncode == 1, (case_id, ran.stderr)
        assert "FAILED (failures=" in ran.stderr and "ERROR:" not in ran.stderr, ran.stderr
        contents.add((fixture / "invoice.py").read_text())
    assert len(contents) == 20  # twenty different bugs


def test_the_bundled_project_keeps_the_demos_bug() -> None:
    """`tiller demo` fixes the bundled project's own bug; the eval starts from it repaired."""
    ran = _unittest(PROJECT)
    assert ran.stderr.rstrip().endswith("FAILED (failures=2)"), ran.stderr
    assert DEMO_REPAIR.old in (PROJECT / "invoice.py").read_text()


def test_fixtures_are_cached_by_what_they_are_made_of(tmp_path: Path) -> None:
    bug = SeededBug("c1", "invoice.py", "return today > due", "return today >= due")
    first = build_fixtures([bug], cache_root=tmp_path)
    (first.cases["c1"] / "marker").write_text("kept")  # the same directory is reused
    again = build_fixtures([bug], cache_root=tmp_path)
    assert again.root == first.root and (again.cases["c1"] / "marker").exists()
    other = build_fixtures(
        [SeededBug("c1", "invoice.py", "return today > due", "return today < due")],
        cache_root=tmp_path,
    )
    assert other.root != first.root
    assert "return today < due" in (other.cases["c1"] / "invoice.py").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.root.name, other.root.name])


def test_a_bug_that_is_not_in_the_project_is_refused_with_its_case(tmp_path: Path) -> None:
    missing = SeededBug("lost", "invoice.py", "no such text", "other text")
    with pytest.raises(SeededBugError, match=r"case 'lost'.*does not occur in invoice\.py"):
        build_fixtures([missing], cache_root=tmp_path)
    twice = SeededBug("twice", "invoice.py", "amount", "sum")
    with pytest.raises(SeededBugError, match=r"case 'twice'.*occurs \d+ times"):
        build_fixtures([twice], cache_root=tmp_path)
    with pytest.raises(SeededBugError, match="changes nothing"):
        SeededBug("same", "invoice.py", "x", "x")
    with pytest.raises(SeededBugError, match="inside the project"):
        SeededBug("out", "../invoice.py", "x", "y")
    assert list(tmp_path.iterdir()) == []  # nothing half-built is left


@sandboxed
async def test_the_whole_eval_scores_as_the_agents_limits_predict(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)  # as `tiller eval run examples/invoice_eval/eval.py` runs it
    spec = load_eval_spec(SPEC)
    assert spec.name == "invoice-fixes" and len(spec.cases) == 20
    fixtures = {case.id: case.fixture for case in spec.cases}
    before = {case_id: _tree_digest(path) for case_id, path in fixtures.items() if path}
    project_before = _tree_digest(PROJECT)
    store = f"sqlite:///{private_tmp / 'evals.db'}"

    report = await spec.build(store=store, eval_id="invoice", concurrency=4).run()

    scorecard = {r.case.id: (r.passed, r.outcome.text) for r in report.results}
    assert set(scorecard) == set(SCORECARD)
    for case_id, (passes, said) in SCORECARD.items():
        got_pass, got_text = scorecard[case_id]
        assert got_pass is passes, (case_id, got_text)
        assert got_text.startswith(said), (case_id, got_text)
    _check_why_the_failures_fail(report)
    # Private copies: the bundled project and every fixture are as they were.
    assert _tree_digest(PROJECT) == project_before
    assert {case_id: _tree_digest(path) for case_id, path in fixtures.items() if path} == before
    await _check_diffs(store, report)


def _check_why_the_failures_fail(report: EvalReport) -> None:
    by_id = {r.case.id: r for r in report.results}
    for case_id, (passes, _) in SCORECARD.items():
        result = by_id[case_id]
        tests = result.scores["tests"]
        assert tests.passed is passes, (case_id, tests.explanation)
        if passes:
            assert result.outcome.stop_cause.value == "completed"
            assert "ended with exit code 0" in tests.explanation and "\nOK" in tests.explanation
        else:
            assert "FAILED (failures=" in tests.explanation, tests.explanation
    # Each failure for its own reason: only the budget case stopped early.
    assert by_id["page-count-floor"].outcome.stop_cause.value == "step_budget"
    for case_id in ("clamp-removed", "bulk-both-tiers-off-by-one", "bulk-tier-rate-duplicated"):
        assert by_id[case_id].outcome.stop_cause.value == "completed"
    edits = {
        r.case.id: [e for e in r.outcome.tool_trace if e.name == "edit_file"]
        for r in report.results
    }
    assert edits["clamp-removed"] == [] and edits["page-count-floor"] == []
    assert [e.is_error for e in edits["bulk-tier-rate-duplicated"]] == [True]
    assert [e.is_error for e in edits["bulk-both-tiers-off-by-one"]] == [False]
    # The half-fixed case did check its work: the trace scorer passes it.
    assert by_id["bulk-both-tiers-off-by-one"].scores["verified"].passed


async def _check_diffs(store: str, report: EvalReport) -> None:
    """Each case's stored diff is its own fix: only invoice.py, different per case."""
    async with await open_bus(store) as bus:
        diffs = {}
        for result in report.results:
            if result.diff_ref is None:
                continue
            diff = await load_diff(bus, result.diff_ref)
            diffs[result.case.id] = diff
    # Run as root, the sandbox hands the copy to an unprivileged uid, which changes the
    # files' modes: those changes carry no text diff and are left out here.
    edited = {
        case_id: {c.path: c.text_diff for c in diff.changes if c.text_diff is not None}
        for case_id, diff in diffs.items()
    }
    for case_id, (passes, _) in SCORECARD.items():
        assert all(c.change == "modified" for c in diffs[case_id].changes), case_id
        made_an_edit = passes or case_id == "bulk-both-tiers-off-by-one"
        assert list(edited[case_id]) == (["invoice.py"] if made_an_edit else []), case_id
    tax = edited["tax-subtracted"]["invoice.py"]
    due = edited["due-date-subtracts"]["invoice.py"]
    assert tax != due
    assert "-    amount = amount * (1 - tax_percent / 100)" in tax
    assert "+    amount = amount * (1 + tax_percent / 100)" in tax
    assert "+    return issued + timedelta(days=terms_days)" in due


@sandboxed
async def test_the_score_is_the_pristine_tests_even_if_the_copy_s_tests_were_changed(
    tmp_path: Path,
) -> None:
    """An agent that made the copy's tests pass by rewriting them is still failed."""
    spec = invoice_eval_spec(cache_root=tmp_path / "cache")
    case = next(case for case in spec.cases if case.id == "tax-subtracted")
    assert case.fixture is not None
    workspace = tmp_path / "ws"
    shutil.copytree(case.fixture, workspace)
    (workspace / "test_invoice.py").write_text(
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n"
    )
    assert _unittest(workspace).returncode == 0  # the rewritten tests pass
    tests = next(s for s in spec.scorers if s.name == "tests")
    outcome = CaseOutcome(case, 0, "fixed", StopCause.COMPLETED, workspace=workspace)
    score = await tests.score(outcome)
    assert not score.passed and "FAILED (failures=" in score.explanation


@sandboxed
async def test_without_the_cases_approver_every_edit_and_command_is_blocked(
    tmp_path: Path,
) -> None:
    """The eval runs in ask mode: the approver is what lets a case edit its copy."""
    spec = invoice_eval_spec(cache_root=tmp_path / "cache")
    case = next(case for case in spec.cases if case.id == "tax-subtracted")
    report = await Eval(spec.agent, [case], spec.scorers, workspace_root=tmp_path).run()
    (result,) = report.results
    assert not result.passed
    refused = [e.name for e in result.outcome.tool_trace if e.denied]
    assert refused == ["execute_command", "edit_file"], result.outcome.text
    assert result.outcome.text.startswith("My edit of invoice.py was refused (Blocked by policy")


@sandboxed
async def test_on_the_pristine_project_the_agent_finds_nothing_to_fix(tmp_path: Path) -> None:
    fixtures = build_fixtures([], cache_root=tmp_path / "cache")
    case = Case("pristine", "Fix the invoice tests.", fixture=fixtures.pristine)
    spec = invoice_eval_spec(cache_root=tmp_path / "cache")
    report = await Eval(
        spec.agent, [case], spec.scorers, approver=spec.approver, workspace_root=tmp_path
    ).run()
    (result,) = report.results
    assert result.outcome.text == "The tests already pass; I found nothing to fix."
    assert result.scores["tests"].passed and not result.scores["verified"].passed
    assert [e.name for e in result.outcome.tool_trace] == ["execute_command"]


@pytest.fixture
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This user's cache directory (`$XDG_CACHE_HOME`), for this test only."""
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


def test_a_shared_directory_someone_else_made_first_does_not_block_the_eval(
    private_tmp: Path, user_cache: Path
) -> None:
    """Another local user who makes `tiller-UID` first cannot stop the eval: the
    fixtures go to this user's own cache directory instead."""
    squatted = private_tmp / f"tiller-{os.getuid()}"
    squatted.mkdir(mode=0o755)
    os.chown(squatted, 65534, 65534)  # nobody's: tests run as root
    cases = invoice_cases()
    assert len(cases) == 20
    for case in cases:
        assert case.fixture is not None and case.fixture.is_relative_to(user_cache / "tiller")
    assert list(squatted.iterdir()) == []


def test_a_shared_directory_others_can_write_is_not_used(
    private_tmp: Path, user_cache: Path
) -> None:
    shared = private_tmp / f"tiller-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)  # another user could plant fixtures here
    (case, *_) = invoice_cases()
    assert case.fixture is not None and case.fixture.is_relative_to(user_cache / "tiller")
    shared.chmod(0o700)
    (case, *_) = invoice_cases()
    assert case.fixture is not None and case.fixture.is_relative_to(shared)


def test_a_link_in_place_of_the_shared_directory_is_not_followed(
    private_tmp: Path, user_cache: Path
) -> None:
    elsewhere = private_tmp / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (private_tmp / f"tiller-{os.getuid()}").symlink_to(elsewhere)
    (case, *_) = invoice_cases()
    assert case.fixture is not None and case.fixture.is_relative_to(user_cache / "tiller")
    assert list(elsewhere.iterdir()) == []


def test_a_temporary_directory_anyone_may_rename_in_is_not_used(
    tmp_path: Path, user_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """World-writable without the sticky bit, anyone could swap `tiller-UID` for their
    own after it was checked: the fixtures are not kept there."""
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    (case, *_) = invoice_cases()
    assert case.fixture is not None and case.fixture.is_relative_to(user_cache / "tiller")
    shared.chmod(0o1777)  # sticky: only the owner renames what it made
    (case, *_) = invoice_cases()
    assert case.fixture is not None and case.fixture.is_relative_to(shared)


def test_a_build_left_by_a_killed_process_is_cleaned_up(tmp_path: Path) -> None:
    bug = SeededBug("c1", "invoice.py", "return today > due", "return today >= due")
    stale = tmp_path / ".building-killed"
    (stale / "pristine").mkdir(parents=True)
    an_hour_ago = stale.stat().st_mtime - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))
    recent = tmp_path / ".building-still-running"
    recent.mkdir()
    fixtures = build_fixtures([bug], cache_root=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fixtures.root.name, recent.name])


def test_with_no_safe_cache_the_fixtures_are_built_in_a_private_directory(
    private_tmp: Path, user_cache: Path
) -> None:
    for squatted in (private_tmp / f"tiller-{os.getuid()}", user_cache / "tiller"):
        squatted.mkdir(parents=True, mode=0o755)
        os.chown(squatted, 65534, 65534)
    (case, *_) = invoice_cases()
    assert case.fixture is not None
    private = case.fixture.parents[2]
    assert private.parent == private_tmp and private.name.startswith(f"tiller-{os.getuid()}-")
    assert private.stat().st_uid == os.getuid() and private.stat().st_mode & 0o077 == 0
