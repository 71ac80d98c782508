"""What the CLI prints of text it did not write — a model's words, a tool's output, stored
records, event values — is shown, never obeyed by the terminal.

A model (or a web page it read, or a command's output) can write terminal control
sequences: `ESC ] 0 ; title BEL` retitles the window, `ESC [ 2 J` clears the screen, a
carriage return or a backspace hides what came before, a bidi override reorders what the
person reads (a command shown for approval could then read as another). `printable`
turns each such character into a visible stand-in of the same length — the C0 controls
into their Control Pictures (`␛` for ESC), DEL into `␡`, the C1 controls and the bidi
overrides and isolates into `�` — and keeps newlines and tabs. Being one character for
one, it can be applied to a `rich.text.Text` without moving its styles.

`echo` is `typer.echo` through `printable`; `SafeConsole` is a rich `Console` whose
`print` does the same to the strings and `Text`s it is given (the console `tiller run`,
`approve`, `runs resume`, `replay` and `runs show --events` print on). Rich's own styling
is added after, so colours still work on a terminal. `log_printably` does it to the
warnings tiller logs (a tool that raised, with its traceback: the exception's text may be
the model's arguments), which Python would otherwise write to standard error as they are.
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any, Final

import typer
from rich.console import Console
from rich.text import Text

__all__ = ["SafeConsole", "echo", "log_printably", "printable", "safe_text"]


def _table() -> dict[int, str]:
    table = {code: chr(0x2400 + code) for code in range(0x20) if chr(code) not in "\n\t"}
    table[0x7F] = "\u2421"
    for code in (*range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)):
        table[code] = "\ufffd"
    return table


#: Each character `printable` replaces, and its stand-in (one character each).
_STAND_INS: Final = _table()


def printable(text: object) -> str:
    """`text` (anything: `str()` is taken) with every terminal control character but
    newline and tab replaced by a visible stand-in of one character (see the module
    docstring)."""
    return str(text).translate(_STAND_INS)


def safe_text(text: Text) -> Text:
    """A copy of `text` whose characters are `printable`, its styles where they were."""
    plain = text.plain
    cleaned = plain.translate(_STAND_INS)
    if cleaned == plain:
        return text
    return Text(
        cleaned,
        style=text.style,
        justify=text.justify,
        overflow=text.overflow,
        no_wrap=text.no_wrap,
        end=text.end,
        tab_size=text.tab_size,
        spans=list(text.spans),
    )


def echo(
    message: object = None,
    file: IO[Any] | None = None,
    nl: bool = True,
    err: bool = False,
    color: bool | None = None,
) -> None:
    """`typer.echo`, the message made `printable` first."""
    typer.echo(
        printable(message) if message is not None else None, file, nl=nl, err=err, color=color
    )


class SafeConsole(Console):
    """A `Console` that prints strings and `Text`s `printable` (other renderables as
    they are: build them from safe text). A string is not read as rich markup unless
    the call says `markup=True`: `[/x]` in a model's words is text (rich would raise on
    it), and `[red]` does not restyle the line."""

    def print(self, *objects: Any, **options: Any) -> None:
        options.setdefault("markup", False)
        cleaned = [
            printable(o) if isinstance(o, str) else safe_text(o) if isinstance(o, Text) else o
            for o in objects
        ]
        super().print(*cleaned, **options)


class _PrintableStderr(logging.Handler):
    """Python's last-resort handler (warnings and worse, to the standard error of the
    moment), each record `printable`."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(printable(self.format(record)) + "\n")
        except Exception:  # logging's own contract: a handler never raises
            self.handleError(record)


def log_printably() -> None:
    """Give a process with no logging set up (the `tiller` command's) a handler that
    writes what Python's last resort would, but `printable`. A process that set up its
    own logging keeps it."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(_PrintableStderr(logging.WARNING))
