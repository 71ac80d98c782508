"""Ctrl+C during `tiller eval run`, in a real child process: the eval is cancelled through
its token (what ran is kept), the command says how to resume, and `run --id` then makes
only the runs that were not scored.

No timing: the agent writes a marker file when the case that blocks begins, the test
waits for it (a hang guard, not a measurement) and only then sends SIGINT.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tiller.evals import EvalReport, load_report
from tiller.store import open_bus

SPEC = """
from pathlib import Path

from tiller.evals import Case, EvalSpec, Includes
from tiller.loop import Agent
from tiller.model import ScriptedModel

HERE = Path(__file__).parent


def answer(messages, info):
    prompt = messages[0].text
    with (HERE / "prompts.log").open("a") as log:
        log.write(prompt + "\\n")
    if prompt == "blocks" and not (HERE / "release").exists():
        (HERE / "blocking").write_text("started")
        return {"text": "too late", "delay": 600}
    return prompt


spec = EvalSpec(
    agent=lambda: Agent(ScriptedModel(answer)),
    cases=[Case(name, name, expected=name) for name in ("one", "two", "blocks", "four", "five")],
    scorers=[Includes()],
    concurrency=1,
)
"""


def stored(store: str, eval_id: str) -> EvalReport:
    async def read() -> EvalReport:
        async with await open_bus(store) as bus:
            return await load_report(bus, eval_id)

    return asyncio.run(read())


def wait_for(path: Path, proc: subprocess.Popen[str], guard_s: float = 60) -> None:
    deadline = time.monotonic() + guard_s
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"tiller ended first: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"never saw {path}")
        time.sleep(0.05)


def test_ctrl_c_cancels_the_eval_and_run_with_its_id_resumes_it(tmp_path: Path) -> None:
    (tmp_path / "evals.py").write_text(textwrap.dedent(SPEC))
    store = f"sqlite:///{tmp_path / 'evals.db'}"
    command = [sys.executable, "-m", "tiller", "eval", "run", str(tmp_path / "evals.py")]
    command += ["--id", "interrupted", "--epochs", "1", "--store", store]
    env = {**os.environ, "TILLER_STORE": "memory://"}  # --store wins over the variable
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wait_for(tmp_path / "blocking", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err
    assert "cancelling: the running cases stop, what ran is kept" in err
    assert (
        f"cancelled: what ran is kept; resume with: tiller eval run {tmp_path / 'evals.py'} "
        f"--id interrupted --epochs 1 --store {store}"
    ) in out
    assert "runs 5  scored 2  passed 2 (100.0%)  errors 0  not run 0  cancelled 1" in out
    cut = stored(store, "interrupted")
    assert [(r.case.id, r.status) for r in cut.results] == [
        ("blocks", "cancelled"),
        ("one", "scored"),
        ("two", "scored"),
    ]
    assert (tmp_path / "prompts.log").read_text().split() == ["one", "two", "blocks"]

    (tmp_path / "release").write_text("")
    (tmp_path / "prompts.log").unlink()
    resumed = subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, env=env
    )
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
    assert (tmp_path / "prompts.log").read_text().split() == ["blocks", "four", "five"]
    assert "runs 5  scored 5  passed 5 (100.0%)" in resumed.stdout
    whole = stored(store, "interrupted")
    assert all(result.status == "scored" and result.passed for result in whole.results)
    assert whole.for_case("blocks")[0].attempt == 1


def test_a_killed_eval_resumed_makes_only_the_runs_not_scored(tmp_path: Path) -> None:
    """SIGKILL, not Ctrl+C: nothing gets to record the run in flight. Run again under its
    id, the eval makes that run and the ones never started, and not the scored ones."""
    (tmp_path / "evals.py").write_text(textwrap.dedent(SPEC))
    store = f"sqlite:///{tmp_path / 'evals.db'}"
    command = [sys.executable, "-m", "tiller", "eval", "run", str(tmp_path / "evals.py")]
    command += ["--id", "killed", "--store", store]
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for(tmp_path / "blocking", proc)
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    cut = stored(store, "killed")
    assert [(r.case.id, r.status) for r in cut.results] == [("one", "scored"), ("two", "scored")]

    (tmp_path / "release").write_text("")
    (tmp_path / "prompts.log").unlink()
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
    assert (tmp_path / "prompts.log").read_text().split() == ["blocks", "four", "five"]
    whole = stored(store, "killed")
    assert [(r.case.id, r.status, r.passed) for r in whole.results] == [
        (name, "scored", True) for name in ("blocks", "five", "four", "one", "two")
    ]


def test_a_cancelled_eval_whose_report_cannot_be_written_still_says_how_to_resume(
    tmp_path: Path,
) -> None:
    """The report path was fine when checked, then became a folder while the eval ran:
    the cancelled eval still exits 130 with its id and resume command; the write's
    failure is one line on stderr."""
    (tmp_path / "evals.py").write_text(
        textwrap.dedent(SPEC).replace(
            '(HERE / "blocking").write_text("started")',
            '(HERE / "report.json").mkdir(); (HERE / "blocking").write_text("started")',
        )
    )
    store = f"sqlite:///{tmp_path / 'evals.db'}"
    command = [sys.executable, "-m", "tiller", "eval", "run", str(tmp_path / "evals.py")]
    command += ["--id", "lost", "--store", store, "--json", str(tmp_path / "report.json")]
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for(tmp_path / "blocking", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "eval id: lost" in out
    assert f"resume with: tiller eval run {tmp_path / 'evals.py'} --id lost" in out
    assert f"cannot write {str(tmp_path / 'report.json')!r}" in err
    assert "Traceback" not in err
