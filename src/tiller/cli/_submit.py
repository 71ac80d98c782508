"""`tiller submit AGENT PROMPT`: queue one run on a fleet, print its run id, and with
`--wait` or `--follow` stay to see it end.

Everything that can be refused is checked before anything is enqueued: the agent is a
`module:attr` reference that loads here as an `Agent` (or a factory returning one), as
`tiller run --agent` loads it, and not from the shared workspace its runs write (law 11;
`--no-check` when only the workers have it), the budgets are positive, the workspace
exists. A refusal is one line on
stderr and exit code 2. `--follow` prints the run's AG-UI events, one JSON object a line,
from its event log (`RunHandle.events()`); `--wait` and `--follow` then print the result
and exit with its status's code: 0 completed (or held for a person: `tiller approvals
list`), 1 anything else.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import UsageError
from ._held import EXIT_NOT_COMPLETED, EXIT_OK, allow_cwd_imports, finish
from ._options import AGENT_FACTORY_HELP, store_option
from ._runs import _with_store
from ._safe import echo

if TYPE_CHECKING:
    from ..fleet import JobBudget, RunOutcomeRecord, WorkspaceSpec
    from ..store import Bus

__all__ = ["exit_code_of", "print_result", "submit_command"]


def submit_command(  # noqa: PLR0913 — a typer command: each parameter is one of its options
    *,
    agent: str = typer.Argument(..., help=f"The agent: {AGENT_FACTORY_HELP}."),
    prompt: str | None = typer.Argument(
        None, help="What the agent should do; '-' reads it from standard input."
    ),
    prompt_file: Path | None = typer.Option(
        None, "--prompt-file", help="Read the prompt from this file instead."
    ),
    store: str = store_option("The store the fleet shares (sqlite:///PATH on one host)"),
    namespace: str = typer.Option("", "--namespace", help="The store namespace."),
    queue: str = typer.Option("tiller-runs", "--queue", help="The run queue."),
    lease: float | None = typer.Option(
        None,
        "--lease",
        min=0.1,
        help="Set the queue's job lease (seconds) for every worker; default: keep the "
        "queue's (as its workers set it).",
    ),
    run_id: str | None = typer.Option(None, "--run-id", help="The run's id (default: new)."),
    batch: str | None = typer.Option(None, "--batch", help="The batch the run belongs to."),
    workspace: Path | None = typer.Option(
        None,
        "--workspace",
        "-w",
        help="A directory every worker shares at this path (default: a private empty one).",
    ),
    snapshot: bool = typer.Option(
        False,
        "--snapshot",
        help="Store the --workspace directory in the store: each run gets its own copy, "
        "on whichever worker takes it.",
    ),
    # Checked by `_budget`, with the fleet's own wording, before anything is enqueued.
    max_steps: int | None = typer.Option(None, "--max-steps", help="Stop after N steps (N ≥ 1)."),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", help="Stop after N output tokens (N ≥ 1)."
    ),
    max_cost: float | None = typer.Option(None, "--max-cost", help="Stop after spending USD."),
    model: str | None = typer.Option(
        None, "--model", "-m", help="The model string an agent factory is called with."
    ),
    wait: bool = typer.Option(False, "--wait", help="Wait for the result and print it."),
    follow: bool = typer.Option(
        False, "--follow", help="Print the run's events as they come (JSON lines), then its result."
    ),
    no_check: bool = typer.Option(
        False, "--no-check", help="Do not load the agent here (only the workers have its code)."
    ),
) -> None:
    """Queue a run of AGENT on PROMPT for the fleet's workers; print its run id."""
    allow_cwd_imports()

    def start() -> Coroutine[Any, Any, int]:
        text = _prompt(prompt, prompt_file)
        budget = _budget(max_steps, max_tokens, max_cost)
        if workspace is not None and not snapshot and not workspace.is_dir():
            raise UsageError(
                f"the workspace {str(workspace)!r} is not a directory; give one every worker "
                "can reach at that path, or --snapshot to copy it into the store"
            )
        if snapshot and workspace is None:
            raise UsageError("--snapshot needs --workspace DIR (the directory to store)")
        shared = str(workspace.resolve()) if workspace is not None and not snapshot else None
        if not no_check:
            _check_agent(agent, model, Path(shared) if shared is not None else None)

        async def work(bus: Bus) -> int:
            from ..fleet import Fleet, snapshot_workspace

            spec: str | WorkspaceSpec | None = shared
            if snapshot and workspace is not None:
                spec = await snapshot_workspace(bus, workspace)
            fleet = Fleet(bus, queue, lease=lease)  # None: the queue's lease, kept
            handle = await fleet.submit(
                agent, text, workspace=spec, budget=budget, run_id=run_id, batch=batch, model=model
            )
            echo(handle.run_id)
            if not (wait or follow):
                return EXIT_OK
            if follow:
                import orjson

                async for event in handle.events():
                    echo(orjson.dumps(event).decode())
            record = await handle.result()
            print_result(record)
            return exit_code_of(record)

        return _with_store(store, namespace, work)

    finish(start)


def _prompt(prompt: str | None, prompt_file: Path | None) -> str:
    if prompt is not None and prompt_file is not None:
        raise UsageError("give the prompt as an argument or with --prompt-file, not both")
    if prompt_file is not None:
        try:
            text = prompt_file.read_text()
        except OSError as exc:
            raise UsageError(f"cannot read --prompt-file {str(prompt_file)!r}: {exc}") from None
    elif prompt == "-":
        text = sys.stdin.read()
    elif prompt is not None:
        text = prompt
    else:
        raise UsageError("give a PROMPT (or '-' to read it from standard input, or --prompt-file)")
    if not text.strip():
        raise UsageError("the prompt is empty; say what the agent should do")
    return text


def _check_agent(agent: str, model: str | None, shared: Path | None) -> None:
    """A reference a worker could never load is refused here, loaded as `tiller run
    --agent` loads it: its form, its module found from this directory, the object an
    `Agent` (or a factory returning one, given `model`). An agent defined in the `shared`
    workspace, which the runs' model writes, is refused before it is imported (law 11)."""
    module, sep, attr = agent.partition(":")
    if not sep or not module or not attr:
        raise UsageError(f"the agent must be a module:attr reference, not {agent!r}")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise UsageError(
            f"no module {module!r} is importable here (agent {agent!r}); run from the "
            "directory that holds it, or pass --no-check if only the workers have it"
        )
    from ..loop import load_agent

    load_agent(agent, model=model, outside=shared)


def _budget(
    max_steps: int | None, max_tokens: int | None, max_cost: float | None
) -> JobBudget | None:
    for option, value in (("--max-steps", max_steps), ("--max-tokens", max_tokens)):
        if value is not None and value < 1:
            raise UsageError(f"{option} must be at least 1, not {value}")
    if max_cost is not None and not 0 <= max_cost < math.inf:
        raise UsageError(f"--max-cost must be a non-negative, finite number of USD, not {max_cost}")
    if max_steps is None and max_tokens is None and max_cost is None:
        return None
    from ..fleet import JobBudget

    return JobBudget(max_steps=max_steps, max_output_tokens=max_tokens, max_cost_usd=max_cost)


def print_result(record: RunOutcomeRecord) -> None:
    """How a fleet run ended, a few lines."""
    cause = f" ({record.stop_cause})" if record.stop_cause else ""
    echo(f"{record.run_id}  {record.status}{cause}  steps {record.steps}")
    if record.text:
        echo(f"final text  {record.text}")
    if record.error:
        echo(f"error: {record.error}")
    if record.status == "suspended":
        echo("it waits for a person: tiller approvals list, then tiller approve | deny")
    if record.blocked_calls:
        echo(f"uncertain calls: {', '.join(record.blocked_calls)} (tiller runs reconcile)")


def exit_code_of(record: RunOutcomeRecord) -> int:
    """0 completed, or held for a person; 1 otherwise."""
    return EXIT_OK if record.status == "completed" or record.held else EXIT_NOT_COMPLETED
