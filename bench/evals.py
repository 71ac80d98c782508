"""What an eval costs: 1,000 one-turn cases on tiller beside Inspect AI, and 200 cases with
a fixture copy and a workspace check each (DESIGN §10: "a 1,000-case eval ≥ 10x faster
than Inspect AI on its mock model, at half the memory").

Variants, each in a fresh process (so its peak RSS is its own), in a shuffled order each
round, medians over the rounds, every ratio from this run:

- `tiller`: `tiller.evals.Eval` over 1,000 `Case`s (`"Say the word w{n}"`, expected
  `w{n}`), one agent whose `ScriptedModel` answers each prompt at once, in one turn, with
  `"The answer is w{n}"`; scorer `Includes()`; results stored in a SQLite file
  (`store=path`, the store's default durability: WAL, a synced commit per write); every case
  in its own private directory and jail, its capture and its record written to the store,
  as any eval's.
- `tiller, in-memory store`, `tiller, workspaces on tmpfs` (`workspace_root=/dev/shm/...`)
  and both: not targets, they show where tiller's time goes: the SQLite writes (two
  synced commits per case: the capture and the record) and the case directories (each
  run's private directory, its jail's `.tiller/` and scratchpad, made and removed: on
  this VM's ext4 an `rmdir` takes 0.3-0.9 ms).
- `inspect`: Inspect AI 0.3.x in its own environment (`--inspect-python`, by default
  `bench/.venv-inspect/bin/python`; kept out of git): a `Task` of the same 1,000
  `Sample`s (input, target `w{n}`), solver `generate()`, scorer `includes()`, model
  `mockllm/model` with a `custom_outputs` function giving the same answer (a
  `ModelOutput.from_content`, at once), run with `inspect_ai.eval(task, display="none",
  log_dir=tmp, max_connections=C, max_samples=C)`: its normal log writing (one `.eval`
  file), the comparable of tiller's SQLite results.
- `tiller, fixture cases`: 200 cases, each with its own fixture directory (a small
  Python project of six files, made by the script before the clock starts, one file
  naming the case), copied privately for its run; the agent writes `NOTES.md` with
  `write_file` (approved by `AllowAll`) and answers; scorer `WorkspaceCheck` with
  `exists=["NOTES.md"]` and a command run in the case's bubblewrap sandbox
  (`grep -qx "fixed $(cat CASE_ID)" NOTES.md && test -f src/calc/ops.py`). Needs `bwrap`.

Concurrency: the same `C` (`--concurrency`, default 8) for both: tiller's
`Eval(concurrency=C)`, Inspect's `max_samples=C` and `max_connections=C` (explicit, so its
adaptive concurrency does not retune them). On this 2-core machine Inspect was fastest at
the lowest setting tried (1,000 samples: 10.0 s at 8, 13.6 s at 32, 16.1 s at 100), tiller
about the same at 8 and 100.

Inspect offline (stubbed, in the Inspect child only): `mockllm` fills in usage by
`ModelAPI.count_tokens`, whose text estimate is `inspect_ai.model._tokens.
count_text_tokens`: tiktoken's `o200k_base`, a file tiktoken downloads from
openaipublic.blob.core.windows.net on first use (no internet here). The child replaces
that function (in `inspect_ai.model._tokens` and where `inspect_ai.model._model` imported
it) with `max(1, len(text) // 4)`, and replaces `tiktoken.load.read_file` with one that
raises, so any other path to a download fails the variant loudly instead of hanging or
being skipped. A real tiktoken encode would cost Inspect a little more, not less.

Each child builds its dataset, runs a 10-case warm-up eval (imports, first-call costs),
then times the measured eval (`time.perf_counter`; process CPU time beside it). Peak RSS
is the child's `ru_maxrss` at the end (imports, warm-up and eval: the process's whole
footprint); "RSS growth" is how much the peak rose during the measured eval.

Run: `python bench/evals.py` (`--quick`: one round of 200 and 40 cases; `--rounds N`;
`--no-inspect`). With PYTHONPATH=src from a worktree. Prints markdown for BENCHMARKS.md.
If Inspect's environment is missing, it says how to make it and measures tiller only.
"""

from __future__ import annotations

# Only the standard library at the top: the same file is the Inspect child, run by
# Inspect's own Python, which has no tiller (and tiller's has no Inspect).
import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
SRC = BENCH.parent / "src"
DEFAULT_INSPECT_PYTHON = BENCH / ".venv-inspect" / "bin" / "python"
TARGET_SPEEDUP = 10.0
TARGET_MEMORY_RATIO = 0.5
WARM_UP_CASES = 10
#: Where the tmpfs variants make their case directories (a RAM file system).
TMPFS = "/dev/shm"

VARIANTS = {
    "tiller": "tiller",
    "tiller-memory": "tiller, in-memory store",
    "tiller-tmpfs": "tiller, workspaces on tmpfs",
    "tiller-memory-tmpfs": "tiller, in-memory store, workspaces on tmpfs",
    "inspect": "Inspect AI, `mockllm/model`",
    "tiller-fixtures": "tiller, fixture cases",
}


def _peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (rss if sys.platform == "darwin" else rss * 1024) / 2**20


def _size(path: Path) -> int:
    """Bytes in a file or under a directory (0 if it does not exist)."""
    if not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _answer(prompt: str) -> str:
    """What both scripted models answer: the prompt's last word, in a sentence."""
    return f"The answer is {prompt.split()[-1]}"


def _prompt(n: int) -> str:
    return f"Say the word w{n}"


# ── the children ─────────────────────────────────────────────────────────────────────


async def tiller_child(
    folder: Path, cases: int, concurrency: int, store_kind: str, workspace_root: str | None
) -> dict[str, Any]:
    from tiller.evals import Case, Eval, Includes
    from tiller.loop import Agent
    from tiller.model import ScriptedModel

    def turn(messages: Any, info: Any) -> str:
        return _answer(messages[0].text)

    agent = Agent(ScriptedModel(turn))

    def dataset(count: int, tag: str) -> list[Case]:
        return [Case(f"{tag}{n}", _prompt(n), expected=f"w{n}") for n in range(count)]

    def store(name: str) -> str | None:
        return None if store_kind == "memory" else str(folder / f"{name}.db")

    warm = Eval(
        agent,
        dataset(WARM_UP_CASES, "w"),
        [Includes()],
        store=store("warm"),
        workspace_root=workspace_root,
    )
    await warm.run()
    measured = Eval(
        agent,
        dataset(cases, "c"),
        [Includes()],
        concurrency=concurrency,
        store=store("results"),
        eval_id="bench",
        workspace_root=workspace_root,
    )
    return await _timed(measured.run, folder / "results.db", lambda r: r.scorers["includes"])


async def fixtures_child(folder: Path, cases: int, concurrency: int) -> dict[str, Any]:
    from tiller.evals import Case, Eval, WorkspaceCheck
    from tiller.loop import Agent
    from tiller.model import ScriptedModel
    from tiller.policy import AllowAll
    from tiller.tools.builtin import write_file

    def turn(messages: Any, info: Any) -> Any:
        # Read off the messages, not `info.turn` (which counts the shared model's turns
        # across runs): the prompt alone, write; the tool's result is back, answer.
        word = messages[0].text.split()[-1]
        if len(messages) == 1:
            call = {
                "name": "write_file",
                "arguments": {"path": "NOTES.md", "content": f"fixed {word}\n"},
            }
            return {"tool_calls": [call]}
        return f"done: fixed {word}"

    agent = Agent(ScriptedModel(turn), [write_file])
    scorer = WorkspaceCheck(
        exists=["NOTES.md"],
        command='grep -qx "fixed $(cat CASE_ID)" NOTES.md && test -f src/calc/ops.py',
        timeout=60,
    )

    def dataset(count: int, tag: str) -> list[Case]:
        made = []
        for n in range(count):
            case_id = f"{tag}{n}"
            made.append(
                Case(case_id, f"Write NOTES.md for {case_id}", fixture=_fixture(folder, case_id))
            )
        return made

    warm = Eval(
        agent,
        dataset(WARM_UP_CASES, "w"),
        [scorer],
        approver=AllowAll(),
        store=str(folder / "warm.db"),
    )
    await warm.run()
    measured = Eval(
        agent,
        dataset(cases, "c"),
        [scorer],
        concurrency=concurrency,
        approver=AllowAll(),
        store=str(folder / "results.db"),
        eval_id="bench",
    )
    return await _timed(measured.run, folder / "results.db", lambda r: r.scorers["workspace"])


def _fixture(folder: Path, case_id: str) -> Path:
    """A small project of six files; `CASE_ID` names the case it belongs to."""
    root = folder / "fixtures" / case_id
    files = {
        "README.md": "# calc\n\nA small calculator.\n",
        "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1.0"\n',
        "CASE_ID": f"{case_id}\n",
        "src/calc/__init__.py": "from .ops import add, mul\n",
        "src/calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n"
        "    return a * b\n",
        "tests/test_ops.py": "from calc import add\n\n\ndef test_add():\n"
        "    assert add(2, 2) == 4\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


async def _timed(run: Any, store_path: Path, summary_of: Any) -> dict[str, Any]:
    rss_before = _peak_rss_mb()
    cpu = time.process_time()
    started = time.perf_counter()
    report = await run()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    summary = summary_of(report)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mb": _peak_rss_mb(),
        "rss_growth_mb": _peak_rss_mb() - rss_before,
        "passed": summary.passed,
        "total": report.total,
        "stored_bytes": await asyncio.to_thread(_size, store_path),
    }


def inspect_child(folder: Path, cases: int, concurrency: int) -> dict[str, Any]:
    _stub_inspect_token_estimate()
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, get_model
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate

    def output(messages: Any, tools: Any, tool_choice: Any, config: Any) -> Any:
        return ModelOutput.from_content(model="mockllm", content=_answer(messages[-1].text))

    def task(count: int, tag: str) -> Any:
        samples = [Sample(input=_prompt(n), target=f"w{n}", id=f"{tag}{n}") for n in range(count)]
        return Task(dataset=samples, solver=generate(), scorer=includes())

    model = get_model("mockllm/model", custom_outputs=output)
    options = {"display": "none", "max_connections": concurrency, "max_samples": concurrency}
    warm = inspect_eval(
        task(WARM_UP_CASES, "w"), model=model, log_dir=str(folder / "warm"), **options
    )
    if warm[0].status != "success":
        raise RuntimeError(f"Inspect's warm-up eval ended {warm[0].status}: {warm[0].error}")
    measured = task(cases, "c")
    rss_before = _peak_rss_mb()
    cpu = time.process_time()
    started = time.perf_counter()
    logs = inspect_eval(measured, model=model, log_dir=str(folder / "results"), **options)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    log = logs[0]
    if log.status != "success":
        raise RuntimeError(f"Inspect's eval ended {log.status}: {log.error}")
    accuracy = log.results.scores[0].metrics["accuracy"].value
    import inspect_ai

    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mb": _peak_rss_mb(),
        "rss_growth_mb": _peak_rss_mb() - rss_before,
        "passed": round(accuracy * cases),
        "total": cases,
        "stored_bytes": _size(folder / "results"),
        "version": inspect_ai.__version__,
    }


def _stub_inspect_token_estimate() -> None:
    """No tiktoken download (see the module docstring): the estimate becomes len / 4, and
    a download anyone still attempts raises."""
    import tiktoken.load

    def no_download(*args: Any, **kwargs: Any) -> bytes:
        raise RuntimeError(f"the bench forbids a tiktoken download: {args}")

    tiktoken.load.read_file = no_download
    import inspect_ai.model._model as model_module
    import inspect_ai.model._tokens as tokens_module

    def estimate(text: str) -> int:
        return max(1, len(text) // 4)

    tokens_module.count_text_tokens = estimate
    model_module.count_text_tokens = estimate


def child(args: argparse.Namespace) -> None:
    """One variant, in this process: its figures, as one JSON line on stdout."""
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-evals-")))
        if args.child == "inspect":
            out = inspect_child(folder, args.cases, args.concurrency)
        elif args.child == "tiller-fixtures":
            out = asyncio.run(fixtures_child(folder, args.cases, args.concurrency))
        else:
            kind = "memory" if "memory" in args.child else "sqlite"
            root = None
            if args.child.endswith("tmpfs"):
                root = stack.enter_context(tempfile.TemporaryDirectory(dir=TMPFS))
            out = asyncio.run(tiller_child(folder, args.cases, args.concurrency, kind, root))
    print(json.dumps(out))


# ── the parent ───────────────────────────────────────────────────────────────────────


def measure(
    variant: str, python: str, cases: int, concurrency: int, no_tokenizer: str
) -> dict[str, Any]:
    command = [python, __file__, "--child", variant, "--cases", str(cases)]
    command += ["--concurrency", str(concurrency)]
    environment = dict(os.environ)
    if variant.startswith("tiller"):
        environment["PYTHONPATH"] = str(SRC)
    else:
        environment.pop("PYTHONPATH", None)
        # No cache to find a tokenizer in: the stub is what keeps Inspect offline.
        environment["TIKTOKEN_CACHE_DIR"] = no_tokenizer
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {variant} child failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["passed"] != result["total"]:
        raise RuntimeError(f"{variant}: {result['passed']} of {result['total']} passed, not all")
    return result


def _ratios(slow: list[dict[str, Any]], fast: list[dict[str, Any]], key: str) -> list[float]:
    """Round by round, `slow[key] / fast[key]`."""
    return [s[key] / f[key] for s, f in zip(slow, fast, strict=True)]


def commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=BENCH,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "src"],
            capture_output=True,
            text=True,
            check=True,
            cwd=BENCH,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (src modified)" if dirty else "")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    busy = one > 0.5 * (os.cpu_count() or 1)
    return f"load {one:.2f} / {five:.2f} / {fifteen:.2f}" + (
        " (BUSY: the figures are noisy)" if busy else ""
    )


def inspect_available(python: Path) -> str | None:
    """Inspect AI's version in `python`'s environment, or None."""
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", "import inspect_ai; print(inspect_ai.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def bwrap_available() -> str | None:
    """None if tiller's sandbox works here, else why not."""
    from tiller.tools import DEFAULT_SANDBOX

    probe = DEFAULT_SANDBOX.probe()
    return None if probe.available else str(probe.reason)


def report(args: argparse.Namespace) -> None:
    import tiller

    started = time.perf_counter()
    rounds = args.rounds or (1 if args.quick else 3)
    cases = args.cases or (200 if args.quick else 1000)
    fixture_cases = args.fixture_cases or (40 if args.quick else 200)
    python = Path(args.inspect_python)
    inspect_version = None if args.no_inspect else inspect_available(python)
    variants = ["tiller", "tiller-memory"]
    if os.access(TMPFS, os.W_OK):
        variants += ["tiller-tmpfs", "tiller-memory-tmpfs"]
    if inspect_version is not None:
        variants.append("inspect")
    no_sandbox = bwrap_available()
    if no_sandbox is None:
        variants.append("tiller-fixtures")
    print(
        f"evals, tiller {tiller.__version__} at {commit()}, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, Python "
        f"{platform.python_version()}, {platform.platform()}, {os.cpu_count()} CPUs, "
        f"{load()}; {cases:,} one-turn cases, {fixture_cases} fixture cases, concurrency "
        f"{args.concurrency}, {rounds} round(s), fresh process per variant, order shuffled"
    )
    if args.no_inspect:
        print("\nInspect AI: not measured (--no-inspect); no ratio to it below.")
    elif inspect_version is None:
        print(
            f"\nInspect AI: NOT MEASURED: no inspect_ai at {python}. Make its environment "
            f"with `python3 -m venv bench/.venv-inspect && bench/.venv-inspect/bin/pip "
            f"install 'inspect-ai>=0.3,<0.4'` (or pass --inspect-python); tiller's "
            "variants only, no ratio to Inspect below."
        )
    else:
        print(f"\nInspect AI {inspect_version} at {python}")
    if no_sandbox is not None:
        print(f"\nFixture cases: NOT MEASURED: tiller's sandbox is unavailable ({no_sandbox}).")
    sys.stdout.flush()

    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="no-tiktoken-") as no_tokenizer:
        for _ in range(rounds):
            order = list(variants)
            random.shuffle(order)
            for variant in order:
                count = fixture_cases if variant == "tiller-fixtures" else cases
                interpreter = str(python) if variant == "inspect" else sys.executable
                figures = measure(variant, interpreter, count, args.concurrency, no_tokenizer)
                results[variant].append(figures)

    def median(variant: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results[variant]))

    print(
        "\n| variant | cases | wall (median) | walls | CPU time | per case | peak RSS "
        "| RSS growth | stored |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for variant in variants:
        count = results[variant][0]["total"]
        stored = median(variant, "stored_bytes") / 2**20
        where = "(memory)" if "memory" in variant else f"{stored:.1f} MB"
        wall = median(variant, "wall_s")
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in results[variant])
        print(
            f"| {VARIANTS[variant]} | {count:,} | {wall:.2f} s | {walls} "
            f"| {median(variant, 'cpu_s'):.2f} s | {wall / count * 1e3:.2f} ms "
            f"| {median(variant, 'peak_rss_mb'):.0f} MB "
            f"| {median(variant, 'rss_growth_mb'):.0f} MB "
            f"| {where} |"
        )
    if "inspect" in results:
        # Each round's pair was measured minutes apart at most: the median of the
        # per-round ratios is steadier on a shared machine than the ratio of medians.
        speedups = _ratios(results["inspect"], results["tiller"], "wall_s")
        speedup = statistics.median(speedups)
        by_cpu = statistics.median(_ratios(results["inspect"], results["tiller"], "cpu_s"))
        memory = median("tiller", "peak_rss_mb") / median("inspect", "peak_rss_mb")
        growth_t, growth_i = median("tiller", "rss_growth_mb"), median("inspect", "rss_growth_mb")
        print(
            f"\nTarget ≥ {TARGET_SPEEDUP:.0f}x faster than Inspect (wall): {speedup:.1f}x "
            f"({'meets' if speedup >= TARGET_SPEEDUP else 'MISSES'}; median of the rounds' "
            f"ratios {', '.join(f'{r:.1f}x' for r in speedups)}; ratio of the medians "
            f"{median('inspect', 'wall_s') / median('tiller', 'wall_s'):.1f}x; by CPU time "
            f"{by_cpu:.1f}x). Target ≤ {TARGET_MEMORY_RATIO:.1f}x its memory: peak RSS "
            f"{memory:.2f}x ({'meets' if memory <= TARGET_MEMORY_RATIO else 'MISSES'}); RSS "
            f"growth during the eval {growth_t:.0f} MB vs {growth_i:.0f} MB. (Inspect's "
            "token estimate stubbed to len/4, no tiktoken.) Not targets, they show where "
            "tiller's time goes (median of the rounds' ratios of wall times):\n"
        )
        for variant in ("tiller-memory", "tiller-tmpfs", "tiller-memory-tmpfs"):
            if variant in results:
                ratio = statistics.median(_ratios(results["inspect"], results[variant], "wall_s"))
                print(f"- {VARIANTS[variant]}: {ratio:.1f}x faster than Inspect")
    if "tiller-fixtures" in results:
        fixture = median("tiller-fixtures", "wall_s") / fixture_cases
        plain = median("tiller", "wall_s") / cases
        print(
            f"\nFixture cases: {fixture * 1e3:.1f} ms per case (copy of a 6-file fixture, a "
            f"tool call, a bwrap command, the workspace snapshot and diff), "
            f"{fixture / plain:.1f}x a one-turn case's {plain * 1e3:.2f} ms."
        )
    print(f"\n(total bench time {time.perf_counter() - started:.0f} s; at the end, {load()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 200 and 40 cases")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--cases", type=int, default=None, help="one-turn cases (1,000)")
    parser.add_argument("--fixture-cases", type=int, default=None, help="fixture cases (200)")
    parser.add_argument("--concurrency", type=int, default=8, help="runs at once, both sides")
    parser.add_argument("--inspect-python", default=str(DEFAULT_INSPECT_PYTHON))
    parser.add_argument("--no-inspect", action="store_true", help="tiller's variants only")
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    report(args)


if __name__ == "__main__":
    main()
