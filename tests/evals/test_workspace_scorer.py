"""WorkspaceCheck: the files the agent left (must exist, must not, must contain or
match), and a command run in the case's bubblewrap sandbox after the agent finished."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tiller.errors import UsageError
from tiller.evals import Case, CaseOutcome, WorkspaceCheck
from tiller.state import StopCause
from tiller.tools import DEFAULT_SANDBOX, Sandbox

sandboxed = pytest.mark.skipif(
    not DEFAULT_SANDBOX.probe().available,
    reason=f"bwrap is unavailable: {DEFAULT_SANDBOX.probe().reason}",
)


def outcome(workspace: Path | None) -> CaseOutcome:
    return CaseOutcome(Case("c1", "fix it"), 0, "fixed", StopCause.COMPLETED, workspace=workspace)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "invoice.py").write_text("def total(lines):\n    return sum(lines)\n")
    return root


async def test_file_checks_give_the_fraction_that_holds_and_name_the_failing(ws: Path) -> None:
    scorer = WorkspaceCheck(
        exists=["src/invoice.py", "CHANGELOG.md"],
        absent=["src/invoice.py.orig"],
        contains={"src/invoice.py": "sum(lines)"},
        matches={"src/invoice.py": r"def total\(\w+\):"},
    )
    score = await scorer.score(outcome(ws))
    assert score.value == pytest.approx(4 / 5) and not score.passed
    assert score.explanation == "4 of 5 checks hold; failing: CHANGELOG.md is missing"
    (ws / "CHANGELOG.md").write_text("fixed\n")
    score = await scorer.score(outcome(ws))
    assert score.passed and score.explanation.startswith("all 5 checks hold: ")


async def test_a_symlink_out_of_the_workspace_fails_its_check(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("token=abc")
    (ws / "leak").symlink_to(tmp_path / "secret")
    score = await WorkspaceCheck(contains={"leak": "token"}).score(outcome(ws))
    assert score.explanation == "0 of 1 checks hold; failing: leak leads outside the workspace"


async def test_absent_under_a_linked_directory_leading_outside_fails_its_check(
    ws: Path, tmp_path: Path
) -> None:
    """`absent=` looked through a directory the agent had replaced by a link out of the
    workspace: `build/out.o` was "absent" because the outside directory had none (and
    "existed" when it had one), where every other check fails such a path."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("token=abc")
    (ws / "build").symlink_to(outside)
    score = await WorkspaceCheck(absent=["build/out.o", "build/secret"]).score(outcome(ws))
    assert score.explanation == (
        "0 of 2 checks hold; failing: build/out.o leads outside the workspace; "
        "build/secret leads outside the workspace"
    )
    # A link inside the workspace is followed; the last component itself is not.
    (ws / "inner").symlink_to(ws / "src")
    (ws / "dangling").symlink_to(ws / "nowhere")
    scorer = WorkspaceCheck(absent=["inner/invoice.py", "inner/gone.py", "dangling"])
    score = await scorer.score(outcome(ws))
    assert score.explanation == (
        "1 of 3 checks hold; failing: inner/invoice.py exists; dangling exists"
    )


async def test_a_fifo_the_agent_left_fails_its_check_instead_of_hanging_the_eval(
    ws: Path,
) -> None:
    """Reading a FIFO blocks until someone writes to it: the scorer must not open one."""
    pipe = ws / "answer.txt"
    os.mkfifo(pipe)
    scorer = WorkspaceCheck(contains={"answer.txt": "42"})
    try:
        async with asyncio.timeout(10):  # a hang guard, not a timing assertion
            score = await scorer.score(outcome(ws))
    finally:
        with contextlib.suppress(OSError):  # free a reader stuck on the FIFO, if any
            os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
    assert not score.passed
    assert "answer.txt is not a regular file" in score.explanation


async def test_an_outcome_without_a_workspace_is_an_error_score(tmp_path: Path) -> None:
    scorer = WorkspaceCheck(exists=["a"])
    score = await scorer.score(outcome(None))
    assert score.error is not None and "has no workspace" in score.explanation
    score = await scorer.score(outcome(tmp_path / "gone"))
    assert score.error is not None and "is not a directory" in score.explanation


@sandboxed
async def test_a_command_that_exits_zero_passes_with_its_output_tail(ws: Path) -> None:
    scorer = WorkspaceCheck(command="grep -c sum src/invoice.py && echo 'all tests passed'")
    score = await scorer.score(outcome(ws))
    assert score.passed, score.explanation
    assert "ended with exit code 0" in score.explanation
    assert score.explanation.endswith("output ends:\n1\nall tests passed")


@sandboxed
async def test_a_failing_command_fails_the_check_showing_the_end_of_its_output(ws: Path) -> None:
    command = "for i in $(seq 1 50); do echo line $i; done; echo '2 failed'; exit 3"
    score = await WorkspaceCheck(command=command).score(outcome(ws))
    assert (score.value, score.passed) == (0.0, False)
    assert "ended with exit code 3" in score.explanation
    assert score.explanation.endswith("line 50\n2 failed")
    assert "line 30\n" not in score.explanation  # only the tail


@sandboxed
async def test_the_command_runs_in_the_sandbox_on_the_workspace_alone(
    ws: Path, tmp_path: Path
) -> None:
    beside = tmp_path / "beside.txt"
    beside.write_text("the host's file")
    # Outside the workspace the host is hidden; the workspace itself is writable.
    command = f'test ! -e {beside} && test -z "$(ls -A $HOME)" && echo ran > from-sandbox.txt'
    score = await WorkspaceCheck(command=command).score(outcome(ws))
    assert score.passed, score.explanation
    assert (ws / "from-sandbox.txt").read_text() == "ran\n"


@sandboxed
async def test_a_command_that_runs_too_long_is_killed_and_fails(ws: Path) -> None:
    score = await WorkspaceCheck(command="echo started; sleep 60", timeout=0.5).score(outcome(ws))
    assert not score.passed
    assert "timed out after 0.5s; output ends:\nstarted" in score.explanation


async def test_no_sandbox_is_an_error_score_never_an_unsandboxed_run(ws: Path) -> None:
    scorer = WorkspaceCheck(command="touch ran", sandbox=Sandbox(ws / "no-such-bwrap"))
    score = await scorer.score(outcome(ws))
    assert score.error is not None and "sandbox" in score.explanation
    assert "not installed" in score.explanation
    assert not (ws / "ran").exists()


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({}, "nothing to check"),
        ({"exists": ["/etc/passwd"]}, "inside the workspace"),
        ({"absent": ["../x"]}, "without '..'"),
        ({"exists": "a.py"}, "list of paths"),
        ({"matches": {"a.py": "(x"}}, "does not compile"),
        ({"command": "  "}, "shell command"),
        ({"command": "true", "timeout": 0}, "positive number"),
    ],
)
def test_bad_checks_are_refused_at_construction(options: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        WorkspaceCheck(**options)  # type: ignore[arg-type]


def _processes_running(argv: list[str]) -> int:
    wanted = "\0".join(argv).encode() + b"\0"
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            count += (entry / "cmdline").read_bytes() == wanted
        except OSError:
            continue
    return count


async def until(condition: Callable[[], bool]) -> None:
    """Wait until `condition()` holds (the timeout is a hang guard, not a measurement)."""
    async with asyncio.timeout(20.0):
        while not condition():  # noqa: ASYNC110  # a file and /proc share no event
            await asyncio.sleep(0.01)


@sandboxed
async def test_a_cancelled_score_leaves_no_command_running(ws: Path) -> None:
    scorer = WorkspaceCheck(command="touch started; sleep 61.25; touch finished")
    task = asyncio.create_task(scorer.score(outcome(ws)))
    await until(lambda: (ws / "started").exists() and _processes_running(["sleep", "61.25"]) > 0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _processes_running(["sleep", "61.25"]) == 0
    assert not (ws / "finished").exists()
