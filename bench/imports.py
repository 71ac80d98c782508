"""What it costs to start: `import tiller`, its front door in use, and `tiller --help`.

DESIGN §10 and issue 19: "`import tiller` at most 1.5x `import pydantic` in the same run;
`tiller --help` at most twice that". Each figure is the wall time of a fresh interpreter
(`python -c ...`, or `python -m tiller --help`), so the interpreter's own start-up is in
every figure, pydantic's included; the child's CPU time (user + system, from `os.wait4`) is
shown beside it, the steadier figure on a shared machine. The cases run interleaved, one of
each per round, so a drift of the machine's speed falls on all of them alike; each figure is
the median over the rounds, after one warm-up round.

- `python -c pass`: the interpreter alone (the floor under every other figure).
- `import pydantic`: the anchor.
- `import tiller`: the bare import (the loop and the tools load on first use).
- `from tiller import Agent, tool, ...`: every front-door name, that is what a script that
  uses tiller imports; this is the figure the budget is about.
- `tiller --help`: the command line, as `python -m tiller --help`.

Byte code is cached (in a temporary `PYTHONPYCACHEPREFIX`, warmed by the first round) as
in an installed package, even where the environment sets `PYTHONDONTWRITEBYTECODE`:
compiling tiller's sources at every start would measure the compiler. `--no-cache` measures
that instead. `--modules` adds, for each case, how many modules it loaded and which of the
heavy third-party packages (httpx, rich, the AG-UI models, ...) are among them.

Run: `python bench/imports.py` (`--rounds N`, default 10; `--quick` for 5). Prints markdown
for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Every front-door name, imported the way a script that uses tiller imports it.
FRONT_DOOR = (
    "from tiller import Agent, AllowAll, AlreadyResumed, Budget, ExecContext, ResumeDecision, "
    "ResumeReplayBlocked, RunContext, RunControls, RunOptions, RunResult, RunStillRunning, "
    "ScriptedModel, StopCause, Tool, ToolError, open_bus, tool"
)

#: The packages a program that never calls a provider, fetches the web or draws a terminal
#: should not load (`--modules` reports which of them each case did load).
HEAVY = (
    "httpx",
    "httpcore",
    "rich",
    "pygments",
    "ag_ui",
    "typer",
    "click",
    "starlette",
    "uvicorn",
    "nats",
    "mcp",
    "tree_sitter",
    "sqlite3",
    "yaml",
)


@dataclass(frozen=True)
class Case:
    label: str
    argv: tuple[str, ...]


CASES = (
    Case("`python -c pass`", ("-c", "pass")),
    Case("`import pydantic`", ("-c", "import pydantic")),
    Case("`import tiller`", ("-c", "import tiller")),
    Case("`from tiller import Agent, tool, ...`", ("-c", FRONT_DOOR)),
    Case("`tiller --help`", ("-m", "tiller", "--help")),
)


def child_env(cache: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p
    )
    env["COLUMNS"] = "100"
    if cache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    return env


def run_once(case: Case, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU milliseconds of one fresh interpreter running `case`."""
    start = time.perf_counter_ns()
    process = subprocess.Popen(
        (sys.executable, *case.argv),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    error = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = (time.perf_counter_ns() - start) / 1e6
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{case.label} failed ({process.returncode}):\n{error.decode()}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1e3


def modules_of(case: Case, env: dict[str, str]) -> tuple[int, list[str]]:
    """How many modules `case` leaves loaded, and which `HEAVY` packages are among them."""
    report = (
        "import sys, atexit\n"
        "def _report():\n"
        f"    heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "    sys.__stderr__.write('MODULES %d %s\\n' % (len(sys.modules), ','.join(heavy)))\n"
        "atexit.register(_report)\n"
    )
    if case.argv[0] == "-c":
        argv = ("-c", report + case.argv[1])
    else:  # -m tiller --help
        argv = (
            "-c",
            report + "import runpy, sys; sys.argv = ['tiller', *"
            f"{list(case.argv[2:])!r}]; runpy.run_module('tiller', run_name='__main__')",
        )
    done = subprocess.run(
        (sys.executable, *argv), env=env, capture_output=True, text=True, check=False
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    _, count, heavy = [*line.split(" "), ""][:3]
    return int(count), [h for h in heavy.split(",") if h]


def measure(rounds: int, env: dict[str, str]) -> dict[str, tuple[list[float], list[float]]]:
    times: dict[str, tuple[list[float], list[float]]] = {c.label: ([], []) for c in CASES}
    for case in CASES:  # warm-up: fills the byte-code cache, the page cache
        run_once(case, env)
    for _ in range(rounds):
        for case in CASES:
            wall, cpu = run_once(case, env)
            times[case.label][0].append(wall)
            times[case.label][1].append(cpu)
    return times


def report(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="tiller-bench-pyc-") as cache_dir:
        env = child_env(None if args.no_cache else cache_dir)
        load = os.getloadavg()
        times = measure(args.rounds, env)
        modules = {c.label: modules_of(c, env) for c in CASES} if args.modules else {}
    wall = {k: statistics.median(v[0]) for k, v in times.items()}
    cpu = {k: statistics.median(v[1]) for k, v in times.items()}
    pyd, bare, front, cli = (c.label for c in CASES[1:])
    commit = subprocess.run(
        ("git", "rev-parse", "--short", "HEAD"), cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(f"## Start-up cost ({time.strftime('%Y-%m-%d %H:%M')}, commit {commit})\n")
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} cores, load "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start; median of {args.rounds} "
        f"rounds, fresh processes, byte code {'not ' if args.no_cache else ''}cached.\n"
    )
    header = "| case | wall ms | CPU ms | wall / pydantic | CPU / pydantic |"
    rule = "|---|---:|---:|---:|---:|"
    if modules:
        header += " modules | heavy packages loaded |"
        rule += "---:|---|"
    print(header)
    print(rule)
    for case in CASES:
        k = case.label
        row = (
            f"| {k} | {wall[k]:.0f} | {cpu[k]:.0f} | {wall[k] / wall[pyd]:.2f}x "
            f"| {cpu[k] / cpu[pyd]:.2f}x |"
        )
        if modules:
            count, heavy = modules[k]
            row += f" {count} | {', '.join(heavy) or '-'} |"
        print(row)
    print()
    budget_import = 1.5
    budget_cli = 2 * budget_import
    for label, value, limit in (
        ("`import tiller`", wall[bare] / wall[pyd], budget_import),
        ("front door in use", wall[front] / wall[pyd], budget_import),
        ("`tiller --help`", wall[cli] / wall[pyd], budget_cli),
    ):
        verdict = "met" if value <= limit else "MISSED"
        print(f"- {label}: {value:.2f}x `import pydantic` (budget {limit:g}x): {verdict}")
    print(f"- `tiller --help` / front door in use: {wall[cli] / wall[front]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of fresh processes")
    parser.add_argument("--quick", action="store_true", help="5 rounds")
    parser.add_argument("--no-cache", action="store_true", help="compile the sources each time")
    parser.add_argument("--modules", action="store_true", help="count the modules each loads")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 5
    report(args)


if __name__ == "__main__":
    main()
