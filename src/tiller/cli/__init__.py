"""The `tiller` command. Thin over the public API; heavy imports happen per command."""

from __future__ import annotations

import asyncio

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="tiller",
    help="tiller: a runtime for LLM agents in which every run carries its own world.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """tiller: a runtime for LLM agents in which every run carries its own world."""


@app.command()
def demo(
    deny: bool = typer.Option(False, "--deny", help="Answer the approval with deny."),
    raw: bool = typer.Option(False, "--raw", help="Print the SSE frames as a client gets them."),
    city: str = typer.Option("Oslo", help="Oslo, Lisbon or Tokyo."),
) -> None:
    """Run the bundled AG-UI example agent offline: two runs, an interrupt and its resume."""
    from ._demo import run_demo

    raise typer.Exit(asyncio.run(run_demo(approve=not deny, raw=raw, city=city)))


def main() -> None:
    app()
