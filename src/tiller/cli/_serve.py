"""`tiller serve`: an agent over AG-UI, with the web console at `/`."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import UsageError
from ._options import AGENT_FACTORY_HELP, positive_seconds, store_option, workspace_option
from ._otel import OTEL_HELP, otel_or_exit
from ._safe import echo

if TYPE_CHECKING:
    from ..loop import Agent

__all__ = ["serve_command"]


def serve_command(  # noqa: PLR0913 — a typer command: each parameter is one of its options
    *,
    agent_ref: str | None = typer.Argument(
        None,
        metavar="[MODULE:AGENT]",
        help=f"The agent to serve: {AGENT_FACTORY_HELP}. Default: the built-in coding agent "
        "on --model, or with no model the offline console demo.",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    store: str = store_option(
        "Where runs live: every server sharing it can resume, steer, cancel and replay every run"
    ),
    namespace: str = typer.Option(
        "", "--namespace", help="Keep this server's runs apart from others in the same store."
    ),
    token: str | None = typer.Option(
        None, "--token", envvar="TILLER_TOKEN", help="The bearer token clients must send."
    ),
    no_auth: bool = typer.Option(
        False, "--no-auth", help="Serve without a token (only on a loopback address)."
    ),
    model: str | None = typer.Option(
        None, "--model", "-m", envvar="TILLER_MODEL", help="The model of the built-in agent."
    ),
    workspace: Path = workspace_option(Path("."), "The directory every run may touch (its jail)."),
    cors: list[str] = typer.Option(
        [], "--cors", help="An origin allowed to call the API from a browser (repeatable)."
    ),
    detach: bool = typer.Option(
        False, "--detach", help="Runs keep going when their client disconnects."
    ),
    interrupt_ttl: float | None = typer.Option(
        None,
        "--interrupt-ttl",
        callback=positive_seconds,
        help="Seconds an approval or question stays answerable (more than 0).",
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        exists=True,
        dir_okay=False,
        help="The policy file new runs start with, read once now (default: tiller.toml in "
        "the directory serve is started from; never re-read per request).",
    ),
    fleet: bool = typer.Option(
        False,
        "--fleet",
        help="Submit each request's run to the fleet's workers (tiller worker on the same "
        "store) instead of running it here; the response streams its events from the store.",
    ),
    queue: str = typer.Option("tiller-runs", "--queue", help="(--fleet) The run queue."),
    console_script: list[Path] = typer.Option(
        [],
        "--console-script",
        help="A JavaScript module the web console imports when it starts (repeatable): the "
        "app's own tool renderers (window.tillerConsole.registerToolRenderer).",
    ),
    mailbox: str | None = typer.Option(
        None,
        "--mailbox",
        metavar="NAME",
        help="Attach the store's mailbox to every run: every run served here claims from "
        "the one mailbox NAME (tiller mail send --to NAME), so with several runs at once each "
        "message goes to one of them, whichever takes its next step first; each may send "
        "as NAME with message_send. A run keeps its mailbox when resumed, on any server.",
    ),
    otel: bool = typer.Option(False, "--otel", help=OTEL_HELP),
) -> None:
    """Serve an agent over AG-UI (POST /agui), with run control under /runs and the web
    console at /."""
    from ..config import CONFIG_FILE
    from ..loop import RunOptions
    from ..pinned_policy import PinnedPolicy
    from ..serve import AppSettings, create_app, run_server

    otel_scope = contextlib.ExitStack()
    telemetry = otel_scope.enter_context(otel_or_exit(otel, "tiller serve"))
    try:
        app_token = _token(host, token, no_auth)
        fleet_agent = _fleet_agent(agent_ref, model) if fleet else None
        if mailbox is not None and fleet:
            raise UsageError(
                "--mailbox attaches the mailbox to runs served here; with --fleet the "
                "workers run them (give the agent its MailboxRoute in its own code)"
            )
        agent = _agent(agent_ref, model, workspace)
        if mailbox is not None:
            _can_send_mail(agent, mailbox)
        here = Path.cwd() / CONFIG_FILE
        source = config if config is not None else (here if here.is_file() else None)
        # Read once, by the person starting the server (law 11).
        policy = PinnedPolicy.read(workspace, source) if source is not None else PinnedPolicy()
        echo(f"tiller serve: {policy.describe()}")
        settings = AppSettings(
            policy=policy,
            store=store,
            namespace=namespace,
            token=app_token,
            workspace=workspace.resolve(),
            cors_origins=cors,
            detach=detach,
            interrupt_ttl=interrupt_ttl,
            fleet_queue=queue if fleet else None,
            fleet_agent=fleet_agent,
            fleet_model=model if fleet else None,
            console_scripts=console_script,
            mailbox=mailbox,
            options=RunOptions().with_telemetry(telemetry) if telemetry is not None else None,
        )
        app = create_app(agent, settings)
    except UsageError as exc:
        otel_scope.close()
        echo(f"tiller serve: {exc}", err=True)
        raise typer.Exit(2) from None
    if agent_ref is None and model is None:
        echo(
            "tiller serve: no agent or --model given: serving the offline console demo "
            "(try `write notes.txt: hi`, `ask`, `slow 5`); pass --model for the coding agent"
        )
    shown = f"http://{_url_host(host)}:{port}/"
    echo(f"tiller serve: {agent.name} on {shown} (AG-UI at {shown}agui), store {store}")
    if fleet:
        echo(f"tiller serve: runs go to the fleet on {queue} (start workers: tiller worker)")
    if app_token is not None and token is None:
        echo(f"tiller serve: token {app_token} (open {shown}#token={app_token})")
    with otel_scope:  # the exporters are flushed as the server stops
        run_server(app, host=host, port=port)


def _token(host: str, token: str | None, no_auth: bool) -> str | None:
    if no_auth:
        # --no-auth wins over a token (TILLER_TOKEN may be set in the environment).
        if not _loopback(host):
            raise UsageError(
                f"--no-auth is allowed only on a loopback address, not {host}; "
                "pass --token (or TILLER_TOKEN) to serve on the network"
            )
        return None
    if token:
        return token
    import secrets

    return secrets.token_urlsafe(24)  # printed once at start, for the console


def _url_host(host: str) -> str:
    """`host` as it goes in a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: The offline console demo, as a worker loads it.
_DEMO_REF = "tiller.examples.console_agent:agent"


def _fleet_agent(ref: str | None, model: str | None) -> str:
    """The agent reference a fleet's workers load for each request's run."""
    if ref is not None:
        return ref
    if model is not None:
        raise UsageError(
            "--fleet needs the agent as MODULE:AGENT (the workers load it); the built-in "
            "coding agent on --model is served in this process only"
        )
    return _DEMO_REF


def _can_send_mail(agent: Agent, name: str) -> None:
    """Check the mailbox name; give the served agent `message_send` if it lacks it."""
    from ..store import check_mail_name
    from ..tools.builtin import message_send

    check_mail_name(name)
    if agent.registry.get(message_send.name) is None:
        agent.registry.add(message_send)


def _agent(ref: str | None, model: str | None, workspace: Path) -> Agent:
    from ..loop import load_agent

    if ref is not None:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # the user's own modules, as `python -m` would
        # Not from the workspace the served runs write (law 11: see load_agent).
        return load_agent(ref, model=model, outside=workspace)
    if model is not None:
        from ._coder import coding_agent

        return coding_agent(model)
    from ..examples.console_agent import agent

    return agent
