"""Options several commands share, declared once so they mean one thing everywhere.

- `--store`: every command that takes one reads `TILLER_STORE` when it is not given, and
  refuses a URL of no known kind (or a file that is no store) while the command line is
  parsed, before anything is opened or created; a refused value that came from the
  variable is named as `$TILLER_STORE`, not as the `--store` the person never typed;
- `--workspace`: an existing directory (a file, or a path that is not there, is refused:
  the commands never make a jail at a mistyped path);
- `--agent`: an agent reference, in the words `tiller.loop.load_agent` uses: an `Agent`,
  or a function returning one, called with the model string when it takes `model`.

The CLI loads this module for every command (and for `--help`): nothing heavy is imported
here.
"""

from __future__ import annotations

import math
from enum import StrEnum
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import typer

__all__ = [
    "AGENT_FACTORY_HELP",
    "DEFAULT_STORE",
    "STORE_ENV",
    "ModeChoice",
    "agent_help",
    "check_store_url",
    "existing_store_url",
    "positive_amount",
    "positive_seconds",
    "store_option",
    "workspace_option",
]

DEFAULT_STORE: Final = "sqlite:///~/.tiller/tiller.db"
#: The environment variable every `--store` falls back to.
STORE_ENV: Final = "TILLER_STORE"


class ModeChoice(StrEnum):
    """`tiller.tools.SafetyMode`'s values, written out so that parsing a command line does
    not import the tools (a test checks they agree)."""

    READ_ONLY = "read_only"
    ASK = "ask"
    AUTO = "auto"
    FULL_ACCESS = "full_access"


_STORE_SCHEMES: Final = ("sqlite", "nats", "memory")
_STORE_FORMS: Final = "sqlite:///PATH, nats://HOST:PORT or memory://"

#: What an agent reference may name, as `load_agent` reads it.
AGENT_FACTORY_HELP: Final = (
    "module:attr naming an Agent, or a function returning one (called with the model "
    "string when it takes a `model` parameter)"
)


def agent_help(default: str) -> str:
    """The help of an `--agent` option: what it names, then what is used without it."""
    return f"The agent: {AGENT_FACTORY_HELP}. {default}"


def check_store_url(value: str, *, from_env: bool = False) -> str:
    """`value` if it is a store URL of a known kind; otherwise a usage error saying which
    kinds there are (so a typo is caught before a run starts or a file is made). A SQLite
    URL naming a file that is there must name a store: not an empty file, a directory or
    a file of another kind, which opening it would write into. `from_env`: the value is
    `$TILLER_STORE`'s (the message then does not suggest setting it)."""
    scheme = urlsplit(value).scheme if "://" in value else ""
    if scheme not in _STORE_SCHEMES:
        raise typer.BadParameter(f"{value!r} is not a store URL; use {_STORE_FORMS}")
    path = _sqlite_path(value)
    if path is not None and (path.exists() or path.is_symlink()):
        why = _not_a_store(path)
        if why is not None:
            raise typer.BadParameter(
                f"{path} is not a tiller store ({why}); give the store the run used"
                + _set_env(from_env)
            )
    return value


def _sqlite_path(value: str) -> Path | None:
    """The file a `sqlite:///PATH` URL names (None: another kind of store)."""
    parts = urlsplit(value)
    if parts.scheme == "sqlite" and len(parts.path) >= 2 and not parts.netloc:
        return Path(parts.path[1:]).expanduser()
    return None


#: The first 16 bytes of every SQLite database file.
_SQLITE_HEADER: Final = b"SQLite format 3\x00"


def _not_a_store(path: Path) -> str | None:
    """Why the file at `path` cannot be a tiller store (None: it is a SQLite file)."""
    if path.is_dir():
        return "it is a directory"
    if not path.is_file():
        return "it is not a regular file"
    try:
        with path.open("rb") as file:
            head = file.read(len(_SQLITE_HEADER))
    except OSError as exc:
        return f"it cannot be read: {exc.strerror or exc}"
    if not head:
        return "it is empty"
    if head != _SQLITE_HEADER:
        return "it is not a SQLite file"
    return None


def _set_env(from_env: bool) -> str:
    return "" if from_env else f", or set ${STORE_ENV}"


def positive_amount(value: float | None) -> float | None:
    """A budget in money, which must be more than 0 and finite (None: no limit)."""
    if value is not None and not 0 < value < math.inf:
        raise typer.BadParameter(f"must be a number of USD more than 0, not {value:g}")
    return value


def existing_store_url(value: str, *, from_env: bool = False) -> str:
    """`check_store_url`, and a SQLite store must be a file that is there: the commands
    that read a store (approve, runs, outbox, ...) would otherwise make an empty one at a
    mistyped path and report "not found" about the wrong store."""
    check_store_url(value, from_env=from_env)
    path = _sqlite_path(value)
    if path is not None and not path.exists():
        raise typer.BadParameter(
            f"there is no store at {value} ({path} does not exist); give the store the run "
            "used" + _set_env(from_env)
        )
    return value


def positive_seconds(value: float | None) -> float | None:
    """A duration, which must be more than 0 and finite (None: none)."""
    if value is not None and not 0 < value < math.inf:
        raise typer.BadParameter(f"must be a number of seconds more than 0, not {value:g}")
    return value


def store_option(what: str, *, existing: bool = False) -> Any:
    """A `--store` option: `what` the store is for, then the forms and the fallback.
    `existing`: the command reads the store, so a SQLite file must be there already."""
    check = existing_store_url if existing else check_store_url

    def callback(ctx: typer.Context, param: typer.CallbackParam, value: str) -> str:
        # A value from $TILLER_STORE is named as the variable: the person typed no --store.
        # (By name: typer ships its own click, whose `ParameterSource` is not click's.)
        source = ctx.get_parameter_source(param.name) if param.name is not None else None
        from_env = getattr(source, "name", None) == "ENVIRONMENT"
        if not from_env:
            return check(value)
        try:
            return check(value, from_env=True)
        except typer.BadParameter as exc:
            raise typer.BadParameter(exc.message, ctx=ctx, param_hint=f"'${STORE_ENV}'") from None

    return typer.Option(
        DEFAULT_STORE,
        "--store",
        envvar=STORE_ENV,
        show_envvar=False,  # said in the help text, once
        callback=callback,
        help=f"{what} ({_STORE_FORMS}). Default: ${STORE_ENV} if set, else {DEFAULT_STORE}.",
    )


def workspace_option(default: Path | None, help_text: str, *, short: bool = True) -> Any:
    """A `--workspace` option that must name an existing directory."""
    names = ("--workspace", "-w") if short else ("--workspace",)
    return typer.Option(
        default,
        *names,
        exists=True,
        file_okay=False,
        dir_okay=True,
        help=f"{help_text} An existing directory.",
    )
