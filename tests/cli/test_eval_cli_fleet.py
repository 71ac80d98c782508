"""`tiller eval run SPEC --fleet URL`: the cases run on the fleet's workers (a real
`tiller worker` process on a SQLite fleet store), the results are recorded in `--store`
as in process; a spec whose agent a worker cannot load is refused in one line."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tiller.evals import EvalReport, load_report
from tiller.fleet import Fleet
from tiller.store import open_bus

SRC = Path(__file__).resolve().parents[2] / "src"

AGENTS = """
from tiller.loop import Agent
from tiller.model import ScriptedModel


def echo():
    return Agent(ScriptedModel(lambda messages, info: "said: " + messages[0].text))
"""

SPEC = """
from tiller.evals import Case, EvalSpec, Includes

spec = EvalSpec(
    agent="fleet_agents:echo",
    cases=[Case(name, name, expected=name) for name in ("one", "two", "three")],
    scorers=[Includes()],
    name="on-fleet",
)

local = EvalSpec(
    agent=lambda: None,
    cases=[Case("one", "one", expected="one")],
    scorers=[Includes()],
)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path)])}


def _tiller(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiller", *args],
        cwd=tmp_path,
        env=_env(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_an_eval_runs_on_the_fleets_workers_and_is_recorded_in_its_store(
    tmp_path: Path,
) -> None:
    (tmp_path / "fleet_agents.py").write_text(textwrap.dedent(AGENTS))
    (tmp_path / "evals.py").write_text(textwrap.dedent(SPEC))
    fleet_url = f"sqlite:///{tmp_path / 'fleet.db'}"
    store = f"sqlite:///{tmp_path / 'evals.db'}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "tiller", "worker", "--store", fleet_url, "--name", "w1"],
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        done = _tiller(
            tmp_path, "eval", "run", "evals.py", "--fleet", fleet_url, "--store", store,
            "--id", "onfleet",
        )  # fmt: skip
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "runs 3  scored 3  passed 3 (100.0%)" in done.stdout

    async def read() -> tuple[EvalReport, list[str | None]]:
        async with await open_bus(store) as bus:
            report = await load_report(bus, "onfleet")
        async with await open_bus(fleet_url) as bus:
            fleet = Fleet(bus)
            workers = [(await fleet.handle(r.run_id).result(10)).worker for r in report.results]
        return report, workers

    report, workers = asyncio.run(read())
    assert [(r.case.id, r.passed, r.outcome.text) for r in report.results] == [
        ("one", True, "said: one"),
        ("three", True, "said: three"),
        ("two", True, "said: two"),
    ]
    assert workers == ["w1", "w1", "w1"]  # run by the worker, not by `tiller eval`


def test_a_spec_a_worker_cannot_load_is_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "evals.py").write_text(textwrap.dedent(SPEC))
    fleet_url = f"sqlite:///{tmp_path / 'fleet.db'}"
    done = _tiller(
        tmp_path, "eval", "run", "evals.py:local", "--fleet", fleet_url,
        "--store", f"sqlite:///{tmp_path / 'evals.db'}",
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "module:attr" in done.stderr or "reference" in done.stderr
    assert not (tmp_path / "evals.db").exists()
