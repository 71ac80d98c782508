"""`tiller taint show | clear`: the taint files carry between runs, for a person.

A run whose conversation held untrusted input lists the files it wrote in the
workspace's `.tiller/taint.json`, and a later run that reads one inherits its taint
(`tiller.tools.TaintIndex`). Only a person can say such a file is clean again: `show`
lists the entries (and whether the file changed since the run wrote it), `clear PATH...`
forgets those files, and `clear --all` forgets every entry and resets an index that is
corrupt or full (which otherwise makes every read of the workspace untrusted).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ._held import print_table
from ._options import workspace_option
from ._safe import echo

if TYPE_CHECKING:
    from ..tools import TaintIndex

__all__ = ["taint_app"]

taint_app = typer.Typer(
    name="taint",
    help="The taint files carry between runs: show it, or clear it.",
    no_args_is_help=True,
    add_completion=False,
)

_WORKSPACE_HELP = "The workspace (default: the current directory)."


def _index(workspace: Path) -> TaintIndex:
    from ..tools import TaintIndex

    return TaintIndex(workspace.resolve())


@taint_app.command("show")
def show_taint(
    workspace: Path = workspace_option(Path("."), _WORKSPACE_HELP),
) -> None:
    """List the files that carry taint from an earlier run.

    Columns: PATH, TAINT, RUN, CHANGED (whether the file differs from what that run left)."""
    from ..tools import IndexHealth

    index = _index(workspace).load()
    if index.health is IndexHealth.CORRUPT:
        echo(
            "the taint index is corrupt: every file read in this workspace counts as "
            "untrusted until you clear it (tiller taint clear --all)"
        )
        raise typer.Exit(1)
    if index.health is IndexHealth.FULL:
        echo(
            "the taint index is full: every file read in this workspace counts as "
            "untrusted until you clear it (tiller taint clear --all)"
        )
    if not index.entries:
        echo("no file carries taint")
        return
    rows = []
    for path, entry in sorted(index.entries.items()):
        changed = index.changed(path)
        taint = ",".join(entry.to_json()["taint"]) or "none"
        rows.append(
            [path, taint, entry.run, "?" if changed is None else "yes" if changed else "no"]
        )
    print_table(["PATH", "TAINT", "RUN", "CHANGED"], rows)


@taint_app.command("clear")
def clear_taint(
    paths: list[str] = typer.Argument(None, help="Workspace-relative paths to clear."),
    all_entries: bool = typer.Option(False, "--all", help="Clear every entry."),
    workspace: Path = workspace_option(Path("."), _WORKSPACE_HELP),
) -> None:
    """Say that files are clean: later runs that read them no longer inherit a taint."""
    if not paths and not all_entries:
        echo("tiller: name the paths to clear, or pass --all", err=True)
        raise typer.Exit(2)
    from ..tools import TaintIndexError

    try:
        gone = _index(workspace).clear(None if all_entries else paths)
    except TaintIndexError as exc:
        echo(f"tiller: {exc}", err=True)
        raise typer.Exit(2) from None
    echo(f"cleared {len(gone)} file(s)" + (": " + ", ".join(gone) if gone else ""))
