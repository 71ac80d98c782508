"""The `tiller` command. Thin over the public API; heavy imports happen per command."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import typer

from ._one_line import OneLineErrors
from ._options import ModeChoice, agent_help, positive_amount, store_option, workspace_option
from ._otel import OTEL_HELP
from ._safe import echo

__all__ = ["app", "main"]

app = typer.Typer(
    name="tiller",
    cls=OneLineErrors,
    help="tiller: a runtime for LLM agents in which every run carries its own world.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """tiller: a runtime for LLM agents in which every run carries its own world."""


#: The cities the AG-UI tour's scripted forecast knows (`tiller.examples.agui_tour`).
_TOUR_CITIES = ("Oslo", "Lisbon", "Tokyo")


def _tour_city(value: str) -> str:
    """A city the tour has a forecast for (another one would silently become Oslo)."""
    for city in _TOUR_CITIES:
        if value.casefold() == city.casefold():
            return city
    raise typer.BadParameter(f"is Oslo, Lisbon or Tokyo, not {value!r}")


@app.command()
def demo(
    *,
    agui: bool = typer.Option(
        False, "--agui", help="Show the AG-UI tour instead: an interrupt and its resume."
    ),
    no_steer: bool = typer.Option(False, "--no-steer", help="Do not steer the run midway."),
    keep: bool = typer.Option(False, "--keep", help="Keep the workspace copy afterwards."),
    deny: bool = typer.Option(False, "--deny", help="(--agui) Answer the approval with deny."),
    raw: bool = typer.Option(False, "--raw", help="(--agui) Print the SSE frames a client gets."),
    city: str = typer.Option(
        "Oslo", "--city", callback=_tour_city, help="(--agui) Oslo, Lisbon or Tokyo."
    ),
) -> None:
    """Run offline: a coding agent fixes a bug in a bundled project (scripted model)."""
    if agui:
        from ._tour import run_tour

        raise typer.Exit(asyncio.run(run_tour(approve=not deny, raw=raw, city=city)))
    from ._demo import run_demo

    raise typer.Exit(asyncio.run(run_demo(steer=not no_steer, keep=keep)))


def _task_text(value: str) -> str:
    """A task that says something (an empty one would start a run on nothing)."""
    if not value.strip():
        raise typer.BadParameter("is empty; say what the agent should do")
    return value


@app.command()
def run(  # noqa: PLR0913 — a typer command: each parameter is one of its options
    *,
    task: str = typer.Argument(..., callback=_task_text, help="What the agent should do."),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="openai:<model>, anthropic:<model>, ollama:<model>, "
        "openai-compat:<base_url>#<model> or scripted:<path>. Needed for the built-in "
        "coding agent; with --agent, passed to its factory.",
    ),
    agent: str | None = typer.Option(
        None, "--agent", help=agent_help("Default: the built-in coding agent on --model.")
    ),
    workspace: Path = workspace_option(Path("."), "The directory the agent may touch (its jail)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Allow every call that asks."),
    max_steps: int | None = typer.Option(
        None,
        "--max-steps",
        "--max-turns",
        min=1,
        help="Stop after N steps (model calls), N ≥ 1. --max-turns is its old name, for one "
        "release.",
    ),
    max_cost: float | None = typer.Option(
        None,
        "--max-cost",
        callback=positive_amount,
        help="Stop after spending USD (more than 0).",
    ),
    network: bool = typer.Option(
        False, "--network", help="Let shell commands use the network (off in the sandbox)."
    ),
    unsandboxed_shell: bool = typer.Option(
        False,
        "--unsandboxed-shell",
        help="Where bwrap cannot run, run shell commands without the sandbox anyway.",
    ),
    web: bool = typer.Option(False, "--web", help="Give the built-in agent web_fetch."),
    mode: ModeChoice | None = typer.Option(
        None,
        "--mode",
        help="Safety mode: read_only, ask (default), auto or full_access.",
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        exists=True,
        dir_okay=False,
        help="A tiller.toml (default: the workspace's, if it has one).",
    ),
    store: str = store_option("Where the run is checkpointed and approvals are held"),
    mailbox: str | None = typer.Option(
        None,
        "--mailbox",
        metavar="NAME",
        help="Attach the store's mailbox: the run receives mail sent to NAME (tiller mail "
        "send --to NAME) at each step, and may send with message_send.",
    ),
    otel: bool = typer.Option(False, "--otel", help=OTEL_HELP),
) -> None:
    """Run an agent (the built-in coding agent, or yours with --agent) on TASK in a
    workspace, with a live view. Type a line to steer it, /bg to send a running command to
    the background, Ctrl+C to cancel. Without a terminal (and without --yes), calls that
    need a person are held and the run suspends: answer them with `tiller approve` /
    `tiller deny` from any process."""
    from ..errors import TillerError
    from ._otel import otel_or_exit
    from ._run import RunTaskSettings, run_task

    try:
        settings = RunTaskSettings(
            model=model,
            agent=agent,
            workspace=workspace.resolve(),
            yes=yes,
            max_steps=max_steps,
            max_cost=max_cost,
            network=network,
            unsandboxed_shell=unsandboxed_shell,
            web=web,
            mode=mode.value if mode is not None else None,
            config_path=config,
            store=store,
            mailbox=mailbox,
        )
        with otel_or_exit(otel, "tiller") as telemetry:
            code = asyncio.run(run_task(task, dataclasses.replace(settings, telemetry=telemetry)))
    except TillerError as exc:
        echo(f"tiller: {exc}", err=True)
        code = 2
    raise typer.Exit(code)


def _register_durable_commands() -> None:
    """`tiller runs …`, `tiller replay`, `tiller rewind`, `tiller approvals list`,
    `tiller approve | deny`, `tiller outbox …` and `tiller eval …` (the commands open the
    store, and import the loop, only when run)."""
    from ._approvals import approvals_app, approve_command, deny_command
    from ._eval import eval_app
    from ._fleet import fleet_app
    from ._mail import mail_app
    from ._outbox import outbox_app
    from ._rewind import rewind_command
    from ._runs import replay_command, runs_app
    from ._serve import serve_command
    from ._submit import submit_command
    from ._taint import taint_app
    from ._worker import worker_command

    app.add_typer(runs_app, name="runs")
    app.command("replay")(replay_command)
    app.command("rewind")(rewind_command)
    app.add_typer(approvals_app, name="approvals")
    app.command("approve")(approve_command)
    app.command("deny")(deny_command)
    app.add_typer(outbox_app, name="outbox")
    app.add_typer(mail_app, name="mail")
    app.add_typer(taint_app, name="taint")
    app.command("serve")(serve_command)
    app.command("worker")(worker_command)
    app.command("submit")(submit_command)
    app.add_typer(fleet_app, name="fleet")
    app.add_typer(eval_app, name="eval")


_register_durable_commands()


def main() -> None:
    """The `tiller` command's entry point (`python -m tiller` and the console script)."""
    from ._safe import log_printably

    log_printably()  # a logged warning may quote the model: shown, not obeyed
    app(prog_name="tiller")
