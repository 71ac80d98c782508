"""The MCP servers a run may use, as `tiller.toml` declares them.

```toml
[mcp.servers.github]
command = "npx"                                   # required: the program to run
args = ["-y", "@modelcontextprotocol/server-github"]
env = { GITHUB_PERSONAL_ACCESS_TOKEN = "..." }    # added to a minimal inherited environment
cwd = "tools/github"                              # relative to the config file's directory
timeout = 60                                      # seconds one tool call may take
startup_timeout = 30                              # seconds to start, initialize and list tools
trust_annotations = false                         # true: the server's read-only hints count
```

The table's name is the server's name and the prefix of its tools (`github__create_issue`),
so it is restricted to what a provider accepts in a tool name, without `__` (the separator)
and without a leading or trailing `_`, so the split of `server__tool` is never ambiguous.

Parsing is strict, as everywhere in tiller.toml: an unknown key, a wrong type or a bad
name raises `McpConfigError` naming the key and what is allowed, rather than starting a
server the user did not mean. The environment is *not* inherited wholesale (the SDK passes
only `HOME`, `PATH`, `SHELL`, `TERM`, `USER`, `LOGNAME`): a server gets the secrets it is
given in `env`, not every secret of the user's shell.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from ._errors import McpConfigError

__all__ = [
    "DEFAULT_MCP_STARTUP_TIMEOUT",
    "DEFAULT_MCP_TIMEOUT",
    "McpServerConfig",
    "McpServers",
]

#: Seconds one tool call may take before tiller cancels it.
DEFAULT_MCP_TIMEOUT: Final = 60.0
#: Seconds a server may take to start, answer `initialize` and list its tools.
DEFAULT_MCP_STARTUP_TIMEOUT: Final = 30.0

#: Letters, digits and '-', in runs joined by single '_'s: no `__`, no edge '_'.
_SERVER_NAME: Final = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")
#: Leaves at least 30 of a tool name's 64 characters for the tool's own name.
MAX_SERVER_NAME: Final = 32

_SERVER_KEYS: Final = (
    "args",
    "command",
    "cwd",
    "env",
    "startup_timeout",
    "timeout",
    "trust_annotations",
)
_SECTION_KEYS: Final = ("servers",)


def _check_name(name: object, key: str) -> str:
    if not isinstance(name, str) or not _SERVER_NAME.match(name) or len(name) > MAX_SERVER_NAME:
        raise McpConfigError(
            key,
            f"{name!r} is not a valid MCP server name: use 1 to {MAX_SERVER_NAME} letters, "
            "digits, '-' and single '_' (not '__', not at either end), because it prefixes "
            "the server's tool names as `name__tool`",
        )
    return name


def _check_timeout(value: object, key: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise McpConfigError(key, f"must be a positive number of seconds, not {value!r}")
    return float(value)


def _check_text(value: object, key: str, what: str) -> str:
    if not isinstance(value, str) or not value or "\0" in value:
        raise McpConfigError(key, f"must be {what} (a non-empty string), not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """How to start one MCP server over stdio, and how long to wait for it.

    Built by `McpServers.from_config` from a `[mcp.servers.<name>]` table, or directly in
    code; both validate the same way (`McpConfigError`).

    - `name`: the server's name, the prefix of its tools' names.
    - `command`, `args`: the program and its arguments (no shell is involved).
    - `env`: variables added to the minimal environment the server inherits.
    - `cwd`: the server's working directory (`None`: tiller's).
    - `timeout`: seconds one tool call may take; then it is cancelled on the server too.
    - `startup_timeout`: seconds to start, initialize and list the tools.
    - `trust_annotations`: whether the server's tool annotations (`readOnlyHint`, ...)
      may lower a tool's risk below external access (`tiller.tools.mcp.McpTool`); off by
      default, because a server is not a party that sets its own permissions.
    """

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cwd: Path | None = None
    timeout: float = DEFAULT_MCP_TIMEOUT
    startup_timeout: float = DEFAULT_MCP_STARTUP_TIMEOUT
    trust_annotations: bool = False

    def __post_init__(self) -> None:
        where = f"mcp.servers.{self.name}"
        _check_name(self.name, where)
        _check_text(self.command, f"{where}.command", "the program to run")
        args = self.args
        if not isinstance(args, tuple | list) or not all(
            isinstance(a, str) and "\0" not in a for a in args
        ):
            raise McpConfigError(f"{where}.args", f"must be a list of strings, not {args!r}")
        object.__setattr__(self, "args", tuple(args))
        if not isinstance(self.env, Mapping):
            raise McpConfigError(f"{where}.env", f"must be a mapping of strings, not {self.env!r}")
        env: dict[str, str] = {}
        for var, value in self.env.items():
            if not isinstance(var, str) or not var or "=" in var or "\0" in var:
                raise McpConfigError(
                    f"{where}.env",
                    f"{var!r} is not an environment variable name (non-empty, without '=')",
                )
            if not isinstance(value, str) or "\0" in value:
                raise McpConfigError(
                    f"{where}.env.{var}",
                    f"must be a string, not {value!r} (quote numbers and booleans)",
                )
            env[var] = value
        object.__setattr__(self, "env", MappingProxyType(env))
        if self.cwd is not None:
            object.__setattr__(self, "cwd", Path(self.cwd))
        object.__setattr__(self, "timeout", _check_timeout(self.timeout, f"{where}.timeout"))
        object.__setattr__(
            self,
            "startup_timeout",
            _check_timeout(self.startup_timeout, f"{where}.startup_timeout"),
        )
        if not isinstance(self.trust_annotations, bool):
            raise McpConfigError(
                f"{where}.trust_annotations",
                f"must be true or false, not {self.trust_annotations!r}",
            )

    @classmethod
    def from_config(
        cls, name: str, table: Mapping[str, Any], *, base_dir: Path | None = None
    ) -> McpServerConfig:
        """One `[mcp.servers.<name>]` table. A relative `cwd` is taken relative to
        `base_dir` (the config file's directory) when given, else to tiller's working
        directory when the server starts."""
        where = f"mcp.servers.{name}"
        _check_name(name, where)
        if not isinstance(table, Mapping):
            raise McpConfigError(where, f"must be a table, not {type(table).__name__}")
        unknown = sorted(set(table) - set(_SERVER_KEYS))
        if unknown:
            raise McpConfigError(
                f"{where}.{unknown[0]}",
                f"unknown key; the keys of an MCP server are: {', '.join(_SERVER_KEYS)}",
            )
        if "command" not in table:
            raise McpConfigError(
                f"{where}.command", "is required: the program that runs the server"
            )
        args = table.get("args", [])
        if not isinstance(args, list):
            raise McpConfigError(f"{where}.args", f"must be a list of strings, not {args!r}")
        env = table.get("env", {})
        if not isinstance(env, Mapping):
            raise McpConfigError(
                f"{where}.env", f'must be a table of strings (NAME = "value"), not {env!r}'
            )
        cwd: Path | None = None
        if "cwd" in table:
            cwd = Path(_check_text(table["cwd"], f"{where}.cwd", "a directory"))
            if base_dir is not None and not cwd.is_absolute():
                cwd = base_dir / cwd
        return cls(
            name=name,
            command=table["command"],
            args=tuple(args),
            env=env,
            cwd=cwd,
            timeout=table.get("timeout", DEFAULT_MCP_TIMEOUT),
            startup_timeout=table.get("startup_timeout", DEFAULT_MCP_STARTUP_TIMEOUT),
            trust_annotations=table.get("trust_annotations", False),
        )


@dataclass(frozen=True, slots=True)
class McpServers:
    """The configured MCP servers, in the order the config lists them. Names are unique
    (a TOML table cannot repeat a key; built in code, a repeat raises)."""

    servers: tuple[McpServerConfig, ...] = ()

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for server in self.servers:
            if server.name in seen:
                raise McpConfigError(
                    f"mcp.servers.{server.name}", "is configured twice; server names are unique"
                )
            seen.add(server.name)

    @classmethod
    def from_config(cls, section: Mapping[str, Any], *, base_dir: Path | None = None) -> McpServers:
        """The `[mcp]` table of tiller.toml: `{"servers": {name: table, ...}}`.

        A relative `cwd` is resolved against `base_dir` (pass the config file's directory).
        Raises `McpConfigError` naming the first bad key.
        """
        if not isinstance(section, Mapping):
            raise McpConfigError("mcp", f"must be a table, not {type(section).__name__}")
        unknown = sorted(set(section) - set(_SECTION_KEYS))
        if unknown:
            raise McpConfigError(
                f"mcp.{unknown[0]}",
                "unknown key; [mcp] holds only `servers` ([mcp.servers.<name>] tables)",
            )
        servers = section.get("servers", {})
        if not isinstance(servers, Mapping):
            raise McpConfigError(
                "mcp.servers", "must hold one table per server: [mcp.servers.<name>]"
            )
        return cls(
            tuple(
                McpServerConfig.from_config(name, table, base_dir=base_dir)
                for name, table in servers.items()
            )
        )

    def names(self) -> list[str]:
        return [server.name for server in self.servers]

    def get(self, name: str) -> McpServerConfig | None:
        return next((s for s in self.servers if s.name == name), None)

    def __iter__(self) -> Iterator[McpServerConfig]:
        return iter(self.servers)

    def __len__(self) -> int:
        return len(self.servers)

    def __bool__(self) -> bool:
        return bool(self.servers)
