"""Issue 19's hot path in one run: tiller beside the typed floor, LangGraph's `create_agent`
and Pydantic AI, and whether each of the issue's targets is met.

Every figure comes from a fresh process. A round runs each process once, in an order
shuffled per round, so every runtime sees the same machine; the targets' ratios are taken
within a round, and the tables show medians over the rounds (the targets also each round's
value). The processes:

- `bench/anchors/step_bench.py child FW VARIANT`: µs per step at 20 steps (median of 5
  runs) and at 200 steps (one run), wall and CPU, and a 1-step run (median of 21), whose
  excess over a step is a run's fixed cost. A step is one model turn calling `add` plus the
  runtime running it (`bench/anchors/README.md`). tiller runs its `explicit_usage` (sync
  tool) and `async_explicit_usage` variants, and `durable` (SQLite, a checkpoint every
  step) beside LangGraph's SQLite checkpointer.
- `bench/anchors/mem_bench.py child`: 1,000 concurrent 5-step runs, the model awaiting
  10 ms a turn: wall, RSS growth, and (tiller and the floors, in the first round: it is a
  size, and slow to take) a tracemalloc peak.
- `bench/anchors/import_bench.py`: `python -c STMT` in fresh processes, net of a bare
  interpreter measured in the same loop, including `import tiller`, `from tiller import
  Agent` (tiller's row beside the anchors' own `Agent` imports) and `tiller --help`.
- tiller only, where the anchors have nothing alike, through those scripts' functions:
  `bench/loop.py`'s per-step cost at 20 and 400 steps (its instant model), `bench/durable.py`'s
  50-step run with and without checkpoints plus one SQLite commit (`kv.put`), and
  `bench/events.py`'s event pipeline.

Run from the repository root with the anchors' environment (`scripts/setup-bench-anchors.sh`):

    .venv-anchors/bin/python bench/hot_path.py            # 3 rounds, for BENCHMARKS.md
    .venv-anchors/bin/python bench/hot_path.py --quick    # 1 round, fewer repetitions

It prints markdown on stdout and its progress on stderr; `--json PATH` keeps every child's
record. The children import tiller from this checkout's `src/` (put first on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
ANCHORS = BENCH / "anchors"

CONCURRENT_RUNS, CONCURRENT_STEPS, MODEL_DELAY_S = 1_000, 5, 0.01
EVENTS_BUDGET = 200_000

Record = dict[str, Any]
Round = dict[str, Record]


@dataclass(frozen=True)
class Variant:
    """One runtime's variant in the anchor harness."""

    label: str
    fw: str
    variant: str
    import_target: str | None = None  # its row in import_bench.py

    @property
    def step_key(self) -> str:
        return f"step:{self.fw}:{self.variant}"

    @property
    def mem_key(self) -> str:
        return f"mem:{self.fw}:{self.variant}"


FLOOR = Variant("typed floor (pydantic messages and arguments)", "fw_floor", "typed", "pydantic")
BARE = Variant("bare loop (dict messages)", "fw_floor", "direct")
TILLER = Variant("tiller, sync tool", "fw_tiller", "explicit_usage", "tiller Agent")
TILLER_ASYNC = Variant("tiller, async tool", "fw_tiller", "async_explicit_usage")
TILLER_DURABLE = Variant("tiller, durable (SQLite, checkpoint every step)", "fw_tiller", "durable")
LANGGRAPH = Variant(
    "LangGraph `create_agent`", "fw_langgraph", "create_agent", "langchain create_agent"
)
LANGGRAPH_SQLITE = Variant("LangGraph, SQLite checkpointer", "fw_langgraph", "sqlite")
PYDANTIC_AI = Variant("Pydantic AI, sync tool", "fw_pydantic_ai", "sync_tool", "pydantic_ai")
PYDANTIC_AI_ASYNC = Variant("Pydantic AI, async tool", "fw_pydantic_ai", "async_tool")

STEP_VARIANTS = (
    FLOOR,
    BARE,
    TILLER,
    TILLER_ASYNC,
    TILLER_DURABLE,
    LANGGRAPH,
    LANGGRAPH_SQLITE,
    PYDANTIC_AI,
    PYDANTIC_AI_ASYNC,
)
MEM_VARIANTS = (BARE, FLOOR, TILLER, LANGGRAPH, PYDANTIC_AI)
#: `tiller Agent` (`from tiller import Agent`) is tiller's row beside `from pydantic_ai import
#: Agent`: `import tiller` alone loads the front door, whose names load on first use.
IMPORTS = (
    "pydantic",
    "tiller",
    "tiller Agent",
    "tiller --help",
    "pydantic_ai",
    "langchain create_agent",
)
TRACED = (BARE, FLOOR, TILLER)  # tracemalloc slows a batch several times: only where needed


# ── the processes of a round ─────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Job:
    key: str
    argv: tuple[str, ...]
    timeout: float
    out_file: bool = False  # the record is the JSON file named by the last argument


def jobs(python: str, quick: bool, out_dir: Path, *, traced: bool) -> list[Job]:
    """Every process of one round, in the matrix's order (the caller shuffles). `traced`:
    whether the concurrent batches of `TRACED` add their tracemalloc batch (slow, and a
    size, not a time: the first round measures it)."""
    listed = [
        Job(v.step_key, (python, "step_bench.py", "child", v.fw, v.variant), 900)
        for v in STEP_VARIANTS
    ]
    for v in MEM_VARIANTS:
        trace = "1" if traced and v in TRACED else "0"
        shape = (str(CONCURRENT_RUNS), str(CONCURRENT_STEPS), str(MODEL_DELAY_S), trace)
        listed.append(
            Job(v.mem_key, (python, "mem_bench.py", "child", v.fw, v.variant, *shape), 1800)
        )
    reps = "3" if quick else "5"
    only = ",".join(IMPORTS)
    imports = (
        python,
        "import_bench.py",
        "--reps",
        reps,
        "--only",
        only,
        "--out",
        str(out_dir / "imports.json"),
    )
    listed.append(Job("imports", imports, 1800, out_file=True))
    own = (python, str(Path(__file__).resolve()), *(["--quick"] if quick else []), "--child")
    listed += [Job(name, (*own, name), 900) for name in ("loop", "durable", "events")]
    return listed


def child_env() -> dict[str, str]:
    """The environment of every child: this checkout's tiller first on the path."""
    env = dict(os.environ)
    paths = [str(ROOT / "src"), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_job(job: Job) -> Record:
    """One fresh process; its JSON record, or `{"error": ...}` saying why there is none."""
    try:
        done = subprocess.run(
            job.argv,
            capture_output=True,
            text=True,
            cwd=ANCHORS,
            env=child_env(),
            timeout=job.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {job.timeout:.0f} s"}
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout)[-1500:]}
    try:
        if job.out_file:
            record: Record = json.loads(Path(job.argv[-1]).read_text())
        else:
            record = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError) as error:
        return {"error": f"no JSON record ({error}): {done.stdout[-500:]}"}
    return record


def _load() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def run_rounds(python: str, rounds: int, quick: bool, seed: int) -> list[Round]:
    rng = random.Random(seed)
    results: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="tiller-hot-path-") as name:
        for number in range(rounds):
            order = jobs(python, quick, Path(name), traced=number == 0)
            rng.shuffle(order)
            current: Round = {"_load": {"start": _load()}}
            for job in order:
                started = time.perf_counter()
                current[job.key] = run_job(job)
                elapsed = time.perf_counter() - started
                failed = (
                    " FAILED: " + current[job.key]["error"][-300:]
                    if "error" in current[job.key]
                    else ""
                )
                print(
                    f"round {number + 1}/{rounds} {job.key} {elapsed:.1f} s{failed}",
                    file=sys.stderr,
                )
            current["_load"]["end"] = _load()
            results.append(current)
    return results


# ── figures out of one round's records ───────────────────────────────────────────────


def get(rnd: Round, key: str, *path: str | int) -> float | None:
    """`rnd[key][path...]` as a float, or None where the process failed or has no such figure."""
    value: Any = rnd.get(key)
    for part in path:
        if isinstance(value, dict):
            value = value.get(str(part) if isinstance(part, int) else part)
        elif isinstance(value, list) and isinstance(part, int) and part < len(value):
            value = value[part]
        else:
            return None
    return float(value) if isinstance(value, int | float) else None


def step_us(rnd: Round, v: Variant, steps: int, cpu: bool = False) -> float | None:
    size = "small" if steps == 20 else "big"
    return get(rnd, v.step_key, f"{size}_{'cpu' if cpu else 'wall'}_us_step")


def one_step_run_us(rnd: Round, v: Variant, cpu: bool = False) -> float | None:
    return get(rnd, v.step_key, f"one_{'cpu' if cpu else 'wall'}_us_run")


def fixed_us(rnd: Round, v: Variant, cpu: bool = False) -> float | None:
    """A run's fixed cost: a 1-step run minus a step (at 20 steps)."""
    return _sub(one_step_run_us(rnd, v, cpu), step_us(rnd, v, 20, cpu))


def flatness(rnd: Round, v: Variant, cpu: bool = False) -> float | None:
    return _div(step_us(rnd, v, 200, cpu), step_us(rnd, v, 20, cpu))


def mem(rnd: Round, v: Variant, figure: str) -> float | None:
    record = rnd.get(v.mem_key, {})
    if record.get("errors") or record.get("ok_runs", CONCURRENT_RUNS) != CONCURRENT_RUNS:
        return None  # a batch with failed runs measures something else
    traced = record.get("tracemalloc_ok_runs", CONCURRENT_RUNS)
    if figure.startswith("tracemalloc") and traced != CONCURRENT_RUNS:
        return None  # the traced batch is a second gather, with its own failures
    return get(rnd, v.mem_key, figure)


def import_ms(rnd: Round, target: str | None, figure: str = "net_ms") -> float | None:
    return None if target is None else get(rnd, "imports", target, figure)


def commit_us(rnd: Round) -> float | None:
    return get(rnd, "durable", "commit_us")


def events_rate(rnd: Round) -> float | None:
    """Events/s through sink + verifier + SSE encoding (bench/events.py's second row)."""
    return get(rnd, "events", 1, 2)


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def loop_step_us(rnd: Round, steps: int, cpu: bool = False) -> float | None:
    """`bench/loop.py`'s µs per step of tiller (its figures are µs per run)."""
    per_run = get(rnd, "loop", "tiller_cpu" if cpu else "tiller", steps)
    return None if per_run is None else per_run / steps


def loop_flatness(rnd: Round, cpu: bool = False) -> float | None:
    return _div(loop_step_us(rnd, 400, cpu), loop_step_us(rnd, 20, cpu))


def durable_budget_ratio(rnd: Round, steps: int, cpu: bool = False) -> float | None:
    """A durable step over its budget: 3x a non-durable step plus one SQLite commit."""
    plain, commit = step_us(rnd, TILLER, steps, cpu), commit_us(rnd)
    budget = None if plain is None or commit is None else 3 * plain + commit
    return _div(step_us(rnd, TILLER_DURABLE, steps, cpu), budget)


# ── targets ──────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Target:
    name: str
    budget: str
    value: Callable[[Round, bool], float | None]  # (round, by CPU time) -> the figure
    met: Callable[[float], bool]
    unit: str = "x"
    by_cpu: bool = True  # whether a CPU-time reading exists

    def per_round(self, rounds: Sequence[Round], cpu: bool = False) -> list[float | None]:
        return [self.value(r, cpu) for r in rounds]


Figure = Callable[[Round, bool], float | None]


def _step_ratio(top: Variant, bottom: Variant) -> Figure:
    """`top`'s step over `bottom`'s, at 20 steps."""
    return lambda r, c: _div(step_us(r, top, 20, c), step_us(r, bottom, 20, c))


def _flatness(v: Variant) -> Figure:
    return lambda r, c: flatness(r, v, c)


def _durable_budget(steps: int) -> Figure:
    return lambda r, c: durable_budget_ratio(r, steps, c)


def targets() -> list[Target]:
    """Issue 19's targets, each a figure of one round (wall time unless it says CPU)."""
    found: list[Target] = []
    for v, tool in ((TILLER, "sync"), (TILLER_ASYNC, "async")):
        found += [
            Target(
                f"step ({tool} tool, 20 steps) / typed floor's",
                "≤ 8x",
                _step_ratio(v, FLOOR),
                lambda x: x <= 8,
            ),
            Target(
                f"LangGraph `create_agent`'s step / tiller's ({tool} tool, 20 steps)",
                "≥ 15x",
                _step_ratio(LANGGRAPH, v),
                lambda x: x >= 15,
            ),
            Target(
                f"step at 200 steps / at 20 ({tool} tool)",
                "≤ 1.2x",
                _flatness(v),
                lambda x: x <= 1.2,
            ),
        ]
    found += [
        Target(
            "a run's fixed cost (1-step run - a step) / a step",
            "≤ 2x",
            lambda r, c: _div(fixed_us(r, TILLER, c), step_us(r, TILLER, 20, c)),
            lambda x: x <= 2,
        ),
        Target(
            "step at 400 steps / at 20 (`bench/loop.py`, instant model)",
            "≤ 1.2x",
            loop_flatness,
            lambda x: x <= 1.2,
        ),
        Target(
            f"{CONCURRENT_RUNS:,} concurrent {CONCURRENT_STEPS}-step runs: wall / bare loop's",
            "≤ 4x",
            lambda r, c: _div(mem(r, TILLER, "wall_s"), mem(r, BARE, "wall_s")),
            lambda x: x <= 4,
            by_cpu=False,
        ),
        Target(
            f"{CONCURRENT_RUNS:,} runs: tracemalloc peak",
            "< 40 MB",
            lambda r, c: mem(r, TILLER, "tracemalloc_peak_mb"),
            lambda x: x < 40,
            unit=" MB",
            by_cpu=False,
        ),
        Target(
            f"{CONCURRENT_RUNS:,} runs: RSS growth",
            "< 40 MB",
            lambda r, c: mem(r, TILLER, "delta_mb"),
            lambda x: x < 40,
            unit=" MB",
            by_cpu=False,
        ),
        Target(
            "durable step at 200 steps / at 20",
            "≤ 1.2x",
            _flatness(TILLER_DURABLE),
            lambda x: x <= 1.2,
        ),
    ]
    found += [
        Target(
            f"durable step / (3 x a step + one SQLite commit), {steps} steps",
            "≤ 1x",
            _durable_budget(steps),
            lambda x: x <= 1,
            by_cpu=False,  # the commit is a wall time: a CPU reading would mix the two
        )
        for steps in (20, 200)
    ]
    found += [
        Target(
            "`import tiller` / `import pydantic` (net of a bare interpreter)",
            "≤ 1.5x",
            lambda r, c: _div(import_ms(r, "tiller"), import_ms(r, "pydantic")),
            lambda x: x <= 1.5,
            by_cpu=False,
        ),
        Target(
            "`from tiller import Agent` / `import pydantic` (net; the same budget for the "
            "front door in use, as `bench/imports.py` reads it: `import tiller` defers Agent)",
            "≤ 1.5x",
            lambda r, c: _div(import_ms(r, "tiller Agent"), import_ms(r, "pydantic")),
            lambda x: x <= 1.5,
            by_cpu=False,
        ),
        Target(
            "`tiller --help` / `import pydantic` (net)",
            "≤ 2x",
            lambda r, c: _div(import_ms(r, "tiller --help"), import_ms(r, "pydantic")),
            lambda x: x <= 2,
            by_cpu=False,
        ),
        Target(
            f"events/s (sink + verifier + SSE) / the {EVENTS_BUDGET:,} budget",
            "≥ 4x",
            lambda r, c: _div(events_rate(r), EVENTS_BUDGET),
            lambda x: x >= 4,
            by_cpu=False,
        ),
    ]
    return found


# ── the report ───────────────────────────────────────────────────────────────────────


def median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def fmt(value: float | None, spec: str = ".0f", unit: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{unit}"


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


@dataclass(frozen=True)
class Sitting:
    """What a run's header says about it, read when it starts."""

    python: str
    started: datetime
    quick: bool
    commit: str  # the checkout measured, as `abc1234` (+ whether src/ or bench/ differ)


def checkout() -> str:
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--", "src", "bench")
    return f"`{commit}`" + (" (with uncommitted changes in src/ or bench/)" if dirty else "")


def header(sitting: Sitting, rounds: list[Round]) -> list[str]:
    python, started, quick = sitting.python, sitting.started, sitting.quick
    about = _about(python)
    loads = "; ".join(
        f"round {n}: {_loadavg(r['_load']['start'])} → {_loadavg(r['_load']['end'])}"
        for n, r in enumerate(rounds, 1)
    )
    return [
        "### Issue 19: the hot path beside the anchors (`bench/hot_path.py`)",
        "",
        f"`bench/hot_path.py{' --quick' if quick else ''}` at {sitting.commit}, "
        f"{started:%Y-%m-%d %H:%M} UTC, {len(rounds)} round(s), every figure from a fresh "
        f"process in an order shuffled per round; {os.cpu_count()} CPUs, "
        f"{about.get('python', '?')}. "
        f"Load average (1/5/15 min) {loads}.",
        "",
        "Versions: "
        + ", ".join(f"{k} {v}" for k, v in about.get("versions", {}).items())
        + f"; tiller imported from `{about.get('tiller', '?')}`.",
    ]


def _loadavg(load: Sequence[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def _about(python: str) -> dict[str, Any]:
    """The children's interpreter, the anchors' versions and where tiller comes from."""
    script = (
        "import json, platform, importlib.metadata as m, tiller\n"
        "names = ('pydantic', 'pydantic-ai-slim', 'langgraph', 'langchain', 'langchain-core',"
        " 'langgraph-checkpoint-sqlite')\n"
        "versions = {}\n"
        "for n in names:\n"
        "    try: versions[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: versions[n] = None\n"
        "print(json.dumps({'python': platform.python_implementation() + ' '"
        " + platform.python_version(), 'versions': versions, 'tiller': tiller.__file__}))"
    )
    try:
        done = subprocess.run(
            [python, "-c", script], capture_output=True, text=True, env=child_env(), check=False
        )
        about: dict[str, Any] = json.loads(done.stdout)
    except (OSError, ValueError):
        return {}  # it does not run, or cannot import tiller
    return about


def figures_table(rounds: list[Round]) -> list[str]:
    rows = [
        "| runtime | µs/step, 20 steps | µs/step, 200 steps | 200 / 20 | CPU µs/step, 20 steps "
        "| 1-step run, µs | fixed cost, µs | 1,000 runs of 5 steps, wall | RSS growth "
        "| tracemalloc peak | import, ms (net) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in STEP_VARIANTS:
        m = {k: median([f(r) for r in rounds]) for k, f in _figures(v).items()}
        rows.append(
            f"| {v.label} | {fmt(m['s20'], '.1f')} | {fmt(m['s200'], '.1f')} "
            f"| {fmt(m['flat'], '.2f', 'x')} "
            f"| {fmt(m['c20'], '.1f')} | {fmt(m['one'])} | {fmt(m['fixed'])} "
            f"| {fmt(m['wall'], '.2f', ' s')} | {fmt(m['rss'], '.1f', ' MB')} "
            f"| {fmt(m['traced'], '.1f', ' MB')} | {fmt(m['import'], '.0f')} |"
        )
    return rows


def _figures(v: Variant) -> dict[str, Callable[[Round], float | None]]:
    in_mem = v in MEM_VARIANTS
    return {
        "s20": lambda r: step_us(r, v, 20),
        "s200": lambda r: step_us(r, v, 200),
        "flat": lambda r: flatness(r, v),
        "c20": lambda r: step_us(r, v, 20, cpu=True),
        "one": lambda r: one_step_run_us(r, v),
        "fixed": lambda r: fixed_us(r, v),
        "wall": lambda r: mem(r, v, "wall_s") if in_mem else None,
        "rss": lambda r: mem(r, v, "delta_mb") if in_mem else None,
        "traced": lambda r: mem(r, v, "tracemalloc_peak_mb") if in_mem else None,
        "import": lambda r: import_ms(r, v.import_target),
    }


def imports_table(rounds: list[Round]) -> list[str]:
    names: list[str] = []
    for r in rounds:
        names += [n for n in r.get("imports", {}) if n != "error" and n not in names]
    rows = ["| import (`python -c ...`) | median, ms | net, ms | modules |", "|---|---:|---:|---:|"]
    for name in names:
        rows.append(
            f"| {name} | {fmt(median([import_ms(r, name, 'median_ms') for r in rounds]))} "
            f"| {fmt(median([import_ms(r, name) for r in rounds]))} "
            f"| {fmt(median([import_ms(r, name, 'modules') for r in rounds]))} |"
        )
    return rows


def tiller_only_table(rounds: list[Round]) -> list[str]:
    def m(f: Callable[[Round], float | None]) -> float | None:
        return median([f(r) for r in rounds])

    loop = [
        (
            "`bench/loop.py`: µs/step at 20 steps, instant model (CPU)",
            lambda r: loop_step_us(r, 20),
            lambda r: loop_step_us(r, 20, True),
        ),
        (
            "`bench/loop.py`: µs/step at 400 steps (CPU)",
            lambda r: loop_step_us(r, 400),
            lambda r: loop_step_us(r, 400, True),
        ),
        (
            "`bench/loop.py`: a 1-step run, µs (CPU)",
            lambda r: get(r, "loop", "tiller", 1),
            lambda r: get(r, "loop", "tiller_cpu", 1),
        ),
        (
            "`bench/loop.py`: the bare loop, µs/step at 20 steps",
            lambda r: _div(get(r, "loop", "bare", 20), 20),
            None,
        ),
        (
            "`bench/durable.py`: µs/step of a 50-step run, not durable",
            lambda r: get(r, "durable", "plain_us_step"),
            None,
        ),
        (
            "`bench/durable.py`: µs/step of a 50-step run, durable (SQLite)",
            lambda r: get(r, "durable", "durable_us_step"),
            None,
        ),
        ("one SQLite commit (`kv.put` of 64 bytes), µs", commit_us, None),
    ]
    rows = ["| tiller only | median | CPU |", "|---|---:|---:|"]
    for label, wall, cpu in loop:
        rows.append(f"| {label} | {fmt(m(wall), '.1f')} | {fmt(m(cpu) if cpu else None, '.1f')} |")
    for index, label in enumerate(
        (
            "sink + verifier",
            "sink + verifier + SSE encoding",
            "driver: `run_agent` + emitters + SSE",
        )
    ):
        rate = median([get(r, "events", index, 2) for r in rounds])
        rows.append(f"| `bench/events.py`: events/s, {label} | {fmt(rate, ',.0f')} | — |")
    return rows


def targets_table(rounds: list[Round]) -> tuple[list[str], int, int]:
    rows = [
        "| target | budget | measured (median of rounds) | each round | by CPU time | |",
        "|---|---|---:|---|---:|---|",
    ]
    met = known = 0
    for t in targets():
        values = t.per_round(rounds)
        value = median(values)
        cpu = median(t.per_round(rounds, cpu=True)) if t.by_cpu else None
        verdict = "not measured" if value is None else ("met" if t.met(value) else "**MISSED**")
        known += value is not None
        met += value is not None and t.met(value)
        spec = ".1f" if t.unit == " MB" else ".2f"
        each = ", ".join(fmt(x, spec) for x in values)
        rows.append(
            f"| {t.name} | {t.budget} | {fmt(value, spec, t.unit)} | {each} "
            f"| {fmt(cpu, spec, t.unit)} | {verdict} |"
        )
    return rows, met, known


def _busy(rounds: list[Round]) -> str:
    """A warning when the machine was loaded past its cores during the run."""
    cores = os.cpu_count() or 1
    peak = max((max(r["_load"]["start"][0], r["_load"]["end"][0]) for r in rounds), default=0.0)
    if peak <= cores:
        return ""
    return (
        f"**BUSY**: the 1-minute load reached {peak:.1f} on {cores} CPUs. Wall-time ratios "
        "against the floors are inflated (a floor's run fits in one time slice, a longer run "
        "is preempted): read the CPU column beside them, and measure again on a quiet machine."
    )


def errors(rounds: list[Round]) -> list[str]:
    lines = []
    for n, r in enumerate(rounds, 1):
        for key, record in r.items():
            if isinstance(record, dict) and "error" in record:
                tail = str(record["error"]).strip().splitlines()[-1:] or [""]
                lines.append(f"- round {n}, `{key}` failed: {tail[0][:300]}")
    return lines


def report(sitting: Sitting, rounds: list[Round]) -> str:
    target_rows, met, known = targets_table(rounds)
    total = len(targets())
    lines = [
        *header(sitting, rounds),
        "",
        "Per runtime (medians of the rounds; a step is a model turn calling `add` and the "
        "runtime running it; fixed cost = a 1-step run minus a step at 20 steps; the "
        f"{CONCURRENT_RUNS:,} concurrent {CONCURRENT_STEPS}-step runs await "
        f"{MODEL_DELAY_S * 1e3:.0f} ms per model turn; import = the row of the table below "
        "that loads that runtime):",
        "",
        *figures_table(rounds),
        "",
        *imports_table(rounds),
        "",
        *tiller_only_table(rounds),
        "",
        f"Targets (issue 19), each a ratio within one round, judged on the median of the "
        f"rounds by wall time: {met} of {total} met"
        + (f" ({total - known} not measured)" if known < total else "")
        + ".",
        "",
        *target_rows,
    ]
    busy = _busy(rounds)
    if busy:
        lines += ["", busy]
    failures = errors(rounds)
    if failures:
        lines += ["", "Processes that failed (their figures are missing above):", *failures]
    return "\n".join(lines)


# ── tiller-only children: bench/loop.py, bench/durable.py, bench/events.py ───────────


def child_loop(quick: bool) -> Record:
    sys.path.insert(0, str(BENCH))
    import loop  # bench/loop.py

    from tiller.tools import Jail

    with tempfile.TemporaryDirectory(prefix="tiller-hot-path-") as name:
        per_run = asyncio.run(loop.per_step(Jail(Path(name)), quick))
    return {label: {str(k): v for k, v in by.items()} for label, by in per_run.items()}


async def _durable(quick: bool) -> Record:
    sys.path.insert(0, str(BENCH))
    import durable  # bench/durable.py

    from tiller.store import open_bus

    with tempfile.TemporaryDirectory(prefix="tiller-hot-path-") as name:
        root = Path(name)
        (root / "ws").mkdir()
        async with await open_bus(f"sqlite:///{root / 'store.db'}") as bus:
            kv = await bus.kv("hot-path-commit")
            value = b"x" * 64
            commit_ms = await durable.median_ms(lambda: kv.put("key", value), 50 if quick else 200)
            plain, durable_us = await durable.durable_step_cost(bus, root / "ws", 3 if quick else 7)
    return {"commit_us": commit_ms * 1e3, "plain_us_step": plain, "durable_us_step": durable_us}


def child_events(quick: bool) -> list[Any]:
    sys.path.insert(0, str(BENCH))
    import events  # bench/events.py

    turns, repetitions = (20, 5) if quick else (60, 15)
    return [list(row) for row in events.events_per_second(turns, repetitions)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, fewer repetitions")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; 1 with --quick)")
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter of every child (default: this one; the anchors' packages "
        "must be installed in it: scripts/setup-bench-anchors.sh)",
    )
    parser.add_argument("--json", type=Path, help="also write every child's record here")
    parser.add_argument("--seed", type=int, default=19, help="the shuffle's seed")
    parser.add_argument("--child", choices=("loop", "durable", "events"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        makers: dict[str, Callable[[bool], Any]] = {
            "loop": child_loop,
            "durable": lambda quick: asyncio.run(_durable(quick)),
            "events": child_events,
        }
        print(json.dumps(makers[args.child](args.quick)))
        return
    if os.sep in args.python:  # the children run in bench/anchors: no relative path
        args.python = os.path.abspath(args.python)  # (not resolve(): a venv's is a symlink)
    missing = [
        n
        for n, v in _about(args.python)
        .get("versions", {"tiller (or it does not run)": None})
        .items()
        if v is None
    ]
    if missing:
        raise SystemExit(
            f"hot_path: {args.python} lacks {', '.join(missing)}: run "
            "scripts/setup-bench-anchors.sh and use .venv-anchors/bin/python (or --python)"
        )
    rounds = args.rounds or (1 if args.quick else 3)
    sitting = Sitting(args.python, datetime.now(UTC), args.quick, checkout())
    results = run_rounds(args.python, rounds, args.quick, args.seed)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(report(sitting, results))


if __name__ == "__main__":
    main()
