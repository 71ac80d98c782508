"""`bench/hot_path.py` (issue 19's one-run benchmark) starts, and judges its targets from
the figures of one round.

No timing here: the figures themselves live in BENCHMARKS.md. The rounds below are made
up; they check the arithmetic that turns a round's records into a target's verdict.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "hot_path.py"
IMPORT_BENCH = SCRIPT.parent / "anchors" / "import_bench.py"


def _hot_path() -> ModuleType:
    return _load("hot_path_under_test", SCRIPT)


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _target(hp: ModuleType, starts: str) -> Any:
    (found,) = [t for t in hp.targets() if t.name.startswith(starts)]
    return found


def test_help_works() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout and "--rounds" in done.stdout


def test_a_runs_fixed_cost_is_a_one_step_run_minus_a_step() -> None:
    hp = _hot_path()
    target = _target(hp, "a run's fixed cost")
    rnd = {hp.TILLER.step_key: {"small_wall_us_step": 100.0, "one_wall_us_run": 250.0}}
    assert target.value(rnd, False) == 1.5
    assert target.met(1.5)
    rnd[hp.TILLER.step_key]["one_wall_us_run"] = 350.0
    assert target.value(rnd, False) == 2.5
    assert not target.met(2.5)


def test_a_step_is_compared_with_the_floor_and_langgraph_of_its_own_round() -> None:
    hp = _hot_path()
    floor = _target(hp, "step (sync tool, 20 steps) / typed floor's")
    langgraph = _target(hp, "LangGraph `create_agent`'s step / tiller's (sync tool")
    rounds = [
        {
            hp.TILLER.step_key: {"small_wall_us_step": 200.0},
            hp.FLOOR.step_key: {"small_wall_us_step": 20.0},
            hp.LANGGRAPH.step_key: {"small_wall_us_step": 4000.0},
        },
        {
            hp.TILLER.step_key: {"small_wall_us_step": 100.0},
            hp.FLOOR.step_key: {"small_wall_us_step": 25.0},
            hp.LANGGRAPH.step_key: {"small_wall_us_step": 1000.0},
        },
    ]
    assert floor.per_round(rounds) == [10.0, 4.0]
    assert langgraph.per_round(rounds) == [20.0, 10.0]


def test_a_durable_step_is_judged_against_three_steps_and_a_commit() -> None:
    hp = _hot_path()
    target = _target(hp, "durable step / (3 x a step + one SQLite commit), 20 steps")
    rnd = {
        hp.TILLER.step_key: {"small_wall_us_step": 100.0},
        hp.TILLER_DURABLE.step_key: {"small_wall_us_step": 500.0},
        "durable": {"commit_us": 200.0},
    }
    assert target.value(rnd, False) == 1.0
    assert target.met(1.0)


def test_a_failed_process_leaves_its_targets_unmeasured_and_is_reported() -> None:
    hp = _hot_path()
    rnd = {
        "_load": {"start": (1.0, 1.0, 1.0), "end": (1.0, 1.0, 1.0)},
        hp.TILLER.step_key: {"error": "Traceback ...\nRuntimeError: boom"},
        hp.FLOOR.step_key: {"small_wall_us_step": 20.0},
    }
    rows, met, known = hp.targets_table([rnd])
    (row,) = [r for r in rows if r.startswith("| step (sync tool, 20 steps)")]
    assert row.endswith("| not measured |")
    assert met == 0 and known == 0
    assert hp.errors([rnd]) == [f"- round 1, `{hp.TILLER.step_key}` failed: RuntimeError: boom"]


def test_a_batch_with_failed_runs_gives_no_memory_figure() -> None:
    hp = _hot_path()
    target = _target(hp, "1,000 runs: RSS growth")
    ok = {"ok_runs": 1000, "errors": 0, "delta_mb": 12.0}
    assert target.value({hp.TILLER.mem_key: ok}, False) == 12.0
    failed = {**ok, "ok_runs": 998, "errors": 2}
    assert target.value({hp.TILLER.mem_key: failed}, False) is None


def test_a_run_on_a_loaded_machine_says_so() -> None:
    hp = _hot_path()
    cores = float(os.cpu_count() or 1)
    quiet = {"_load": {"start": (0.2, 0.2, 0.2), "end": (cores, 0.5, 0.5)}}
    busy = {"_load": {"start": (0.2, 0.2, 0.2), "end": (cores + 1, 0.5, 0.5)}}
    assert hp._busy([quiet]) == ""
    assert hp._busy([quiet, busy]).startswith("**BUSY**")


def test_tiller_s_import_figure_loads_its_agent_as_the_anchors_figures_do() -> None:
    """The per-runtime import column sets tiller's row beside `from pydantic_ai import
    Agent` and `from langchain.agents import create_agent`: it has to load tiller's `Agent`
    too, not only the front door, which imports `Agent` on first use (so `import tiller`
    alone costs next to nothing)."""
    hp = _hot_path()
    statement = _load("import_bench_under_test", IMPORT_BENCH).TARGETS[hp.TILLER.import_target]
    assert hp.TILLER.import_target in hp.IMPORTS
    code = f"{statement}\nimport sys\nprint('Agent' in vars(sys.modules['tiller']))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "True"


def test_the_import_targets_read_import_tiller_and_the_front_door_in_use() -> None:
    hp = _hot_path()
    bare = _target(hp, "`import tiller` / `import pydantic`")
    in_use = _target(hp, "`from tiller import Agent` / `import pydantic`")
    rnd = {
        "imports": {
            "pydantic": {"net_ms": 40.0},
            "tiller": {"net_ms": 20.0},
            "tiller Agent": {"net_ms": 200.0},
        }
    }
    assert bare.value(rnd, False) == 0.5
    assert in_use.value(rnd, False) == 5.0
    assert not in_use.met(5.0)


def test_a_traced_batch_with_failed_runs_gives_no_tracemalloc_peak() -> None:
    """The traced batch is a second gather: its own count of finished runs decides."""
    hp = _hot_path()
    target = _target(hp, "1,000 runs: tracemalloc peak")
    ok = {"ok_runs": 1000, "errors": 0, "tracemalloc_peak_mb": 30.0, "tracemalloc_ok_runs": 1000}
    assert target.value({hp.TILLER.mem_key: ok}, False) == 30.0
    failed = {**ok, "tracemalloc_ok_runs": 400}
    assert target.value({hp.TILLER.mem_key: failed}, False) is None
