"""Command-line mistakes as one line on stderr, exit code 2.

Click (through typer and rich) answers a bad option with a usage banner and a boxed
panel, several lines a careless caller has to read past, and in a script a panel wrapped
at 80 columns. `OneLineErrors` is the `tiller` group's class: any usage error (an
unknown option, a value out of range, a choice not offered, a missing argument) becomes

    tiller run: --max-steps: -3 is not in the range x>=1 (see tiller run --help)

and exit code 2, as click's own standalone mode would give. Everything else is click's.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from ._safe import echo

__all__ = ["OneLineErrors", "one_line"]

#: The exit code of a usage error (click's `UsageError.exit_code`).
_USAGE = 2


#: "Invalid value for '--max-steps' / '--max-turns': " → "--max-steps / --max-turns: ".
_INVALID = re.compile(r"^Invalid value for ((?:'[^']*'(?: / )?)+): (?:Value error, )?")
#: A check that named no option says "Invalid value: " first; the rest says it all.
_INVALID_BARE = re.compile(r"^Invalid value: ")


def one_line(error: typer.TyperException) -> str:
    """A usage error (typer's click: `UsageError`, `BadParameter`...) as one line, naming
    the command and where its help is."""
    ctx = getattr(error, "ctx", None)
    command = ctx.command_path if ctx is not None else "tiller"
    message = str(error.format_message()).strip()
    message = _INVALID.sub(lambda m: m.group(1).replace("'", "") + ": ", message)
    message = _INVALID_BARE.sub("", message)
    flat = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    return f"{command}: {flat.rstrip('.')} (see {command} --help)"


class OneLineErrors(TyperGroup):
    """The `tiller` group: usage errors as one line (see the module docstring)."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort:
            echo("Aborted!", err=True)
            sys.exit(1)
        except typer.TyperException as error:  # click's ClickException, as typer ships it
            exit_code = int(getattr(error, "exit_code", 1))
            if exit_code == _USAGE:
                echo(one_line(error), err=True)
            else:
                error.show()  # type: ignore[attr-defined]
            sys.exit(exit_code)
        sys.exit(code if isinstance(code, int) else 0)
