"""`tiller eval run | show | list | rescore | compare`: evals from the command line.

- `run SPEC` loads an eval spec (`tiller.evals.load_eval_spec`: a `.py` file or
  `module:attr`), runs it with a live progress bar, and prints its scorecard and the
  commands that look at it again. Ctrl+C cancels it through its token: what ran is kept,
  and `run SPEC --id ID` resumes it (only the runs not scored yet are made);
- `show ID` prints a stored eval's scorecard and one row per case run, or with
  `--case CASE` that case's scores with their explanations and its transcript;
- `list` lists the store's evals, newest first;
- `rescore ID --scorer ...` scores the stored outcomes again with built-in scorers or your
  own (`_eval_scorers`), calling no model;
- `compare A B` shows the cases that regressed or improved from A to B.

`--json PATH` and `--junit PATH` (run, show) write the report as JSON
(`tiller.evals.write_json_report`) and JUnit XML (`tiller.evals.write_junit_report`);
`--html PATH` (run, show, compare) writes the HTML report
(`tiller.evals.write_html_report`). Their paths are checked before the eval runs (not a
folder, not under a file); the eval id and the resume command are printed before they are
written, so a file that still cannot be written never hides them.

Exit codes: 0 the eval ran (failing cases included) or the command did what it was asked;
1 `--fail-under RATE` was given and the pass rate of all the eval's runs is below it (a run
not run, cancelled or not started counts as not passed:
`EvalReport.pass_rate_of_all_runs`); 2 a usage error (a spec that does not load, an
unknown eval, a bad option, a report path that cannot be written), said in one line; 130
the eval was cancelled (Ctrl+C), even if a report could not be written then.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import typer

from ..errors import UsageError
from ._held import EXIT_OK, allow_cwd_imports, finish
from ._runs import DEFAULT_STORE, _with_store
from ._safe import echo

if TYPE_CHECKING:
    from ..cancel import CancellationToken
    from ..evals import Eval, EvalReport
    from ..loop import Budget
    from ..store import Bus

__all__ = ["EXIT_BELOW_THRESHOLD", "EXIT_CANCELLED", "eval_app"]

#: `--fail-under RATE` was given and the eval's pass rate is below it.
EXIT_BELOW_THRESHOLD = 1
#: The eval was cancelled (Ctrl+C): what ran is kept; `run --id` resumes it.
EXIT_CANCELLED = 130

eval_app = typer.Typer(
    name="eval",
    help="Evals: run a spec, show, list, rescore and compare stored evals.",
    no_args_is_help=True,
    add_completion=False,
)

_STORE_HELP = (
    "Where eval results are kept: sqlite:///PATH, nats://HOST:PORT or memory:// "
    "(default: $TILLER_STORE, else the local SQLite store)."
)
_JSON_HELP = "Write the report as JSON to PATH (see tiller.evals.report_to_json)."
_JUNIT_HELP = "Write the report as JUnit XML to PATH (one testcase per case run)."
_HTML_HELP = "Write the HTML report to PATH."


def _store_option() -> Any:
    return typer.Option(
        DEFAULT_STORE, "--store", envvar="TILLER_STORE", help=_STORE_HELP, callback=_store_url
    )


def _store_url(store: str) -> str:
    """A store URL as given, or a plain path as the URL of that SQLite file (absolute, so
    the commands printed for later work from any directory), as `Eval` reads one."""
    if "://" in store:
        return store
    return f"sqlite:///{os.path.abspath(os.path.expanduser(store))}"


# ── run ──────────────────────────────────────────────────────────────────────────────


@eval_app.command("run")
def run_command(  # noqa: PLR0913 — a typer command: each parameter is one of its options
    *,
    spec: str = typer.Argument(
        ..., help="The eval spec: path/to/evals.py[:ATTR] or module:attr (an EvalSpec)."
    ),
    store: str = _store_option(),
    eval_id: str | None = typer.Option(
        None, "--id", help="The eval's id; an existing one's is resumed (default: a new id)."
    ),
    epochs: int | None = typer.Option(
        None, "--epochs", help="Runs of each case (default: the spec's)."
    ),
    concurrency: int | None = typer.Option(
        None, "--concurrency", help="Case runs at once (default: the spec's)."
    ),
    max_cost: float | None = typer.Option(
        None, "--max-cost", help="The whole eval's budget in USD (its models must be priced)."
    ),
    fail_under: float | None = typer.Option(
        None,
        "--fail-under",
        help="Exit 1 when the pass rate (0 to 1) is below RATE: for CI. The rate is of all "
        "the eval's runs: runs not run, cancelled or not started count against it.",
    ),
    json_path: Path | None = typer.Option(None, "--json", help=_JSON_HELP),
    junit_path: Path | None = typer.Option(None, "--junit", help=_JUNIT_HELP),
    html_path: Path | None = typer.Option(None, "--html", help=_HTML_HELP),
    fleet_url: str | None = typer.Option(
        None,
        "--fleet",
        help="Run the cases on the fleet whose store is URL (nats://HOST:PORT or "
        "sqlite:///PATH): workers started with `tiller worker --store URL` run them. "
        "Results still go to --store. The spec's agent must be a module:attr reference.",
    ),
) -> None:
    """Run an eval spec, with a progress bar, and print its scorecard.

    Ctrl+C cancels it, keeping what ran; `--id ID` resumes it (only unscored runs are
    made). Exit 0 when the eval ran, failing cases included; 1 when the pass rate is
    below --fail-under; 130 when cancelled."""

    async def work() -> int:
        from ..cancel import CancellationToken
        from ..evals import check_eval_id, load_eval_spec

        _positive("--epochs", epochs)
        _positive("--concurrency", concurrency)
        if max_cost is not None and not max_cost > 0:
            raise UsageError(f"--max-cost is a positive number of USD, not {max_cost:g}")
        _check_rate(fail_under)
        if eval_id is not None:
            check_eval_id(eval_id)
        _check_report_targets(json_path, junit_path, html_path)  # refused before it runs
        allow_cwd_imports()
        loaded = load_eval_spec(spec)
        if max_cost is not None and not (loaded.budget is not None and loaded.budget.pricing):
            echo(
                "note: --max-cost counts only priced models, and this spec's budget prices "
                "none (give the spec a Budget with pricing)",
                err=True,
            )
        cancel = CancellationToken()
        async with contextlib.AsyncExitStack() as stack:
            fleet = None
            if fleet_url is not None:
                from ..fleet import Fleet
                from ..store import open_bus

                fleet = Fleet(await stack.enter_async_context(await open_bus(fleet_url)))
            ev = loaded.build(
                store=store,
                eval_id=eval_id,
                cancel=cancel,
                epochs=epochs,
                concurrency=concurrency,
                budget=_budget(loaded.budget, max_cost),
                fleet=fleet,
            )
            started = time.monotonic()
            report = await _run_cancellable(ev, cancel)
            wall_s = time.monotonic() - started
        from ._eval_render import print_next_steps, print_scorecard

        print_scorecard(report, wall_s=wall_s)
        echo(f"eval id: {ev.eval_id}")  # before the files: a failed write keeps it
        if report.cancelled:
            same = "".join(
                f" {option} {value:g}"
                for option, value in (
                    ("--epochs", epochs),
                    ("--concurrency", concurrency),
                    ("--max-cost", max_cost),
                )
                if value is not None
            )  # a resumed eval is the same eval: the options that changed it, again
            if fleet_url is not None:
                same += f" --fleet {_quoted(fleet_url)}"
            echo(
                f"cancelled: what ran is kept; resume with: tiller eval run {_quoted(spec)} "
                f"--id {ev.eval_id}{same} --store {_quoted(store)}"
            )
            try:
                _write_reports(report, json_path, junit_path, html_path)
            except UsageError as exc:  # still a cancelled eval: its exit code says so
                echo(f"tiller: {exc}", err=True)
            return EXIT_CANCELLED
        print_next_steps(ev.eval_id, store)
        _write_reports(report, json_path, junit_path, html_path)
        return _threshold_code(report, fail_under)

    try:
        finish(work)
    except KeyboardInterrupt:  # a second Ctrl+C: Python's own, the runs stopped at once
        echo(
            "tiller: interrupted again: stopped at once; the runs recorded are kept, "
            f"`tiller eval run {_quoted(spec)} --id ID` resumes",
            err=True,
        )
        raise typer.Exit(EXIT_CANCELLED) from None


async def _run_cancellable(ev: Eval, cancel: CancellationToken) -> EvalReport:
    """`ev.run()` with its progress bar; the first Ctrl+C cancels the eval's token (the
    eval stops its runs and returns what it has), the next one is Python's own."""
    from ._eval_progress import EvalProgressBar

    event_loop = asyncio.get_running_loop()
    bar = EvalProgressBar(ev.eval_id, ev.total)

    def on_sigint() -> None:
        bar.console.print("cancelling: the running cases stop, what ran is kept")
        cancel.cancel()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            event_loop.remove_signal_handler(signal.SIGINT)

    with contextlib.suppress(NotImplementedError, RuntimeError):
        event_loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        with bar:
            return await ev.run(on_progress=bar.update)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            event_loop.remove_signal_handler(signal.SIGINT)


def _positive(option: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise UsageError(f"{option} is a positive whole number, not {value}")


def _check_rate(rate: float | None) -> None:
    if rate is not None and not 0.0 <= rate <= 1.0:
        raise UsageError(f"--fail-under is a pass rate from 0 to 1 (0.9: 90%), not {rate:g}")


def _threshold_code(report: EvalReport, fail_under: float | None) -> int:
    """The gate: the pass rate of all the eval's runs (`pass_rate_of_all_runs`), so runs
    the budget did not let start, or a cancel stopped, count against it."""
    rate = report.pass_rate_of_all_runs
    if fail_under is None or rate >= fail_under:
        return EXIT_OK
    unscored = report.total - report.scored
    echo(
        f"pass rate {rate * 100:.1f}% of all {report.total} runs is below --fail-under "
        f"{fail_under * 100:.1f}%"
        + (f" ({unscored} not scored count as not passed)" if unscored else ""),
        err=True,
    )
    return EXIT_BELOW_THRESHOLD


def _budget(budget: Budget | None, max_cost: float | None) -> Budget | None:
    """The spec's budget with `--max-cost` as its cost ceiling (its pricing kept)."""
    if max_cost is None:
        return None  # the spec's own
    from ..loop import Budget

    if budget is None:
        return Budget(max_cost_usd=max_cost)
    limits = budget.unspent()  # the spec's ceilings, reserve and pricing, nothing spent
    limits.max_cost_usd = max_cost
    return limits


def _quoted(text: str) -> str:
    import shlex

    return shlex.quote(text)


# ── reports ──────────────────────────────────────────────────────────────────────────


def _html_writer() -> Callable[..., Path]:
    """`tiller.evals.write_html_report`; `UsageError` saying what to install when the
    report cannot be drawn here (asked before an eval runs, not after)."""
    from ..evals import check_html_report, write_html_report

    check_html_report()
    return write_html_report


def _check_report_targets(*paths: Path | None) -> None:
    """`UsageError` for a report path that cannot be written (a folder, or under a file
    or an unwritable folder), and for `--html` without what draws it: asked before an
    eval runs, so a finished eval's results are never lost to a typo in a path."""
    for path in paths:
        if path is not None:
            _check_writable(path)
    if paths[-1] is not None:
        _html_writer()


def _check_writable(path: Path) -> None:
    if path.is_dir():
        raise UsageError(f"cannot write {str(path)!r}: it is a folder; give a file name")
    ancestor = path.absolute().parent
    while not ancestor.exists():  # the writers make the missing folders
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"cannot write {str(path)!r}: {str(ancestor)!r} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        raise UsageError(f"cannot write {str(path)!r}: permission denied")


def _write_reports(
    report: EvalReport,
    json_path: Path | None,
    junit_path: Path | None,
    html_path: Path | None,
    *,
    compare: EvalReport | None = None,
) -> None:
    from ..evals import write_json_report, write_junit_report

    if json_path is not None:
        _writing(json_path, lambda target: write_json_report(report, target))
    if junit_path is not None:
        _writing(junit_path, lambda target: write_junit_report(report, target))
    if html_path is not None:
        writer = _html_writer()
        _writing(html_path, lambda target: writer(report, target, compare=compare))


def _writing(path: Path, write: Callable[[Path], object]) -> None:
    try:
        write(path)
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    echo(f"wrote {path}")


async def _reading(url: str, work: Callable[[Bus], Awaitable[int]]) -> int:
    """`work` on the store at `url`, which must exist already (see `_existing_store`)."""
    _existing_store(url)
    return await _with_store(url, "", work)


def _existing_store(url: str) -> None:
    """Commands that read evals refuse a SQLite file that is not there (opening it would
    make an empty one, and the mistake would read as "no such eval")."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or len(parts.path) < 2:
        return  # other stores (and a malformed URL) are for open_bus to judge
    path = Path(parts.path[1:]).expanduser()
    if not path.exists():
        raise UsageError(
            f"there is no store at {url} ({path} does not exist): give the --store the "
            "eval was run with, or set TILLER_STORE"
        )


# ── show, list ───────────────────────────────────────────────────────────────────────


@eval_app.command("show")
def show_command(
    *,
    eval_id: str = typer.Argument(..., help="The eval (tiller eval list)."),
    store: str = _store_option(),
    case: str | None = typer.Option(
        None, "--case", help="Show this case's runs: scores, explanations, transcript."
    ),
    json_path: Path | None = typer.Option(None, "--json", help=_JSON_HELP),
    junit_path: Path | None = typer.Option(None, "--junit", help=_JUNIT_HELP),
    html_path: Path | None = typer.Option(None, "--html", help=_HTML_HELP),
) -> None:
    """A stored eval's scorecard and one row per case run (or one case in full)."""

    async def work(bus: Bus) -> int:
        from ..evals import load_report
        from ._eval_render import print_case, print_cases, print_scorecard

        _check_report_targets(json_path, junit_path, html_path)
        report = await load_report(bus, eval_id)
        if case is not None:
            if not report.for_case(case):
                known = sorted({result.case.id for result in report.results})
                shown = ", ".join(known[:10]) + (" ..." if len(known) > 10 else "")
                raise UsageError(
                    f"eval {eval_id!r} has no case {case!r}"
                    + (f"; its cases: {shown}" if known else " (no case has run yet)")
                )
            print_case(report, case)
        else:
            print_scorecard(report)
            print_cases(report)
        _write_reports(report, json_path, junit_path, html_path)
        return EXIT_OK

    finish(lambda: _reading(store, work))


@eval_app.command("list")
def list_command(*, store: str = _store_option()) -> None:
    """The store's evals, the most recently run first."""

    async def work(bus: Bus) -> int:
        from ..evals import list_evals
        from ._eval_render import print_evals

        print_evals(await list_evals(bus), store)
        return EXIT_OK

    finish(lambda: _reading(store, work))


# ── rescore, compare ─────────────────────────────────────────────────────────────────


@eval_app.command("rescore")
def rescore_command(
    *,
    eval_id: str = typer.Argument(..., help="The eval (tiller eval list)."),
    scorers: list[str] = typer.Option(
        [],
        "--scorer",
        help="A scorer: exact[=TEXT], includes[=TEXT], regex[=PATTERN], json[=subset], "
        "numeric[=ABS_TOLERANCE], or module:attr; repeat for several.",
    ),
    store: str = _store_option(),
) -> None:
    """Score a stored eval's outcomes again, calling no model.

    A new score replaces the one of the same name; the others stay."""

    async def work() -> int:
        from ..evals import rescore
        from ._eval_render import print_scorecard
        from ._eval_scorers import parse_scorers

        parsed = parse_scorers(scorers)  # a bad --scorer is refused before the store opens

        async def rescored(bus: Bus) -> int:
            print_scorecard(await rescore(bus, eval_id, parsed))
            return EXIT_OK

        return await _reading(store, rescored)

    finish(work)


@eval_app.command("compare")
def compare_command(
    *,
    before: str = typer.Argument(..., help="The eval to compare from (the baseline)."),
    after: str = typer.Argument(..., help="The eval to compare with it."),
    store: str = _store_option(),
    html_path: Path | None = typer.Option(None, "--html", help=_HTML_HELP),
) -> None:
    """Case by case from BEFORE to AFTER: regressions and improvements.

    Then the added, removed and unscored cases, and a line of counts."""

    async def work(bus: Bus) -> int:
        from ..evals import compare_reports, load_report
        from ._eval_render import print_comparison

        _check_report_targets(html_path)
        baseline = await load_report(bus, before)
        report = await load_report(bus, after)
        print_comparison(compare_reports(baseline, report))
        _write_reports(report, None, None, html_path, compare=baseline)
        return EXIT_OK

    finish(lambda: _reading(store, work))
