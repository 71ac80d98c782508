"""`tiller.toml`: a workspace's policy, hooks, interlock, MCP servers and outbox routes.

One file, read with the standard library's `tomllib`; each section is parsed strictly by
the module that owns it, and every mistake is a `ConfigError` naming the file and the key.

```toml
[policy]
mode = "ask"                                  # read_only | ask | auto | full_access
[[policy.rules]]
action = "allow"                              # allow | ask | deny; first match wins
command = "pytest"

[interlock]
on_trifecta = "block"                         # block | ask | allow

[hooks]
pre_tool = [{ command = "./check.sh", timeout = 5, tools = ["execute_command"] }]

[mcp.servers.github]
command = "github-mcp-server"
args = ["stdio"]

[outbox]
tools = ["github__create_issue"]              # staged for a person instead of run

[web]                                         # where web_fetch may connect (optional)
allow_hosts = ["intranet.example", "localhost:8080"]   # private hosts a person allows
allow_ranges = ["10.1.0.0/16"]

[subagents]                                   # the `agent` tool's children (optional)
max_concurrent = 10
[subagents.reviewer]                          # a type: tools, ceiling, preamble, model
tools = ["read_file", "grep"]
safety_ceiling = "read_only"
preamble = "You review code and report problems; you change nothing."
```

`load_config(path)` reads a file; `find_config(workspace)` looks for `tiller.toml` in the
workspace (only when a person starts a run: resumes, approvals and served requests use the
policy pinned in the run's checkpoint, `tiller.pinned_policy`, never the workspace's file);
`TillerConfig.apply(run_ctx)` puts the policy into a run's context (hooks from
code are kept, and the file's are added after them) and the subagent types
(`tiller.loop.SubagentConfig` documents the `[subagents]` keys), and `web_fetch`'s
`WebAccess` on the run's `Jail` (`tiller.tools.WebAccess` documents `[web]`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from .errors import UsageError
from .loop import OutboxRoute, RunContext, SubagentConfig
from .policy import HookSet, Interlock, PolicyEngine, PolicyRules
from .tools import SafetyMode, WebAccess
from .tools.mcp import McpServers

__all__ = [
    "CONFIG_FILE",
    "ConfigError",
    "TillerConfig",
    "find_config",
    "load_config",
    "read_config_document",
]

#: The file `find_config` looks for in a workspace.
CONFIG_FILE: Final = "tiller.toml"

_SECTIONS: Final = ("hooks", "interlock", "mcp", "outbox", "policy", "subagents", "web")


class ConfigError(UsageError):
    """`tiller.toml` cannot be used; the message names the file and what to fix."""


@dataclass(frozen=True)
class TillerConfig:
    """What a `tiller.toml` says (defaults for what it leaves out)."""

    path: Path | None = None
    mode: SafetyMode | None = None
    rules: PolicyRules | None = None
    interlock: Interlock = field(default_factory=Interlock)
    hooks: HookSet = field(default_factory=HookSet)
    mcp: McpServers = field(default_factory=McpServers)
    outbox: frozenset[str] = frozenset()
    #: The `[subagents]` section (None: the built-in types and limits).
    subagents: SubagentConfig | None = None
    #: The `[web]` section: where `web_fetch` may connect (None: public addresses only,
    #: or whatever the program's `Jail` already allows).
    web: WebAccess | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, path: Path | None = None) -> TillerConfig:
        """Parse an already-read TOML document (`path` is for messages and relative
        paths)."""
        where = str(path) if path is not None else "the configuration"
        unknown = sorted(set(data) - set(_SECTIONS))
        if unknown:
            raise ConfigError(
                f"{where}: unknown section(s) {', '.join(unknown)}; "
                f"the sections are: {', '.join(_SECTIONS)}"
            )
        try:
            # Each section's parser raises its own typed error; here it gains the file.
            return cls(
                path=path,
                mode=_mode(data.get("policy", {})),
                rules=PolicyRules.from_config(data["policy"]) if "policy" in data else None,
                interlock=Interlock.from_config(_table(data, "interlock")),
                hooks=HookSet.from_config(_table(data, "hooks")),
                mcp=McpServers.from_config(
                    _table(data, "mcp"), base_dir=path.parent if path is not None else None
                ),
                outbox=_outbox(_table(data, "outbox")),
                subagents=(
                    SubagentConfig.from_config(_table(data, "subagents"))
                    if "subagents" in data
                    else None
                ),
                web=WebAccess.from_config(_table(data, "web")) if "web" in data else None,
            )
        except (UsageError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from exc

    def apply(self, run_ctx: RunContext) -> RunContext:
        """A new context: `run_ctx` with this configuration's policy — the safety mode (on
        a new switch of the new context's own), the engine's rules, the interlock, the
        hooks (code's first, then the file's), the outbox routes, the subagent types and
        where `web_fetch` may connect. `run_ctx` itself is left as it was (law 13): its
        mode, and every run already using it, are untouched."""
        updated = run_ctx.with_interlock(self.interlock).with_hooks(run_ctx.hooks.merge(self.hooks))
        if self.mode is not None:
            updated = updated.with_safety_mode(self.mode)
        if self.rules is not None:
            updated = updated.with_policy(
                PolicyEngine(
                    self.rules,
                    workspace=run_ctx.jail.root,
                    protected=run_ctx.jail.protected,
                )
            )
        if self.outbox:
            updated = updated.with_outbox(OutboxRoute(self.outbox))
        if self.subagents is not None:
            updated = updated.with_subagents(self.subagents)
        if self.web is not None:
            updated = updated.with_jail(updated.jail.with_web_access(self.web))
        return updated


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, Mapping):
        raise UsageError(f"[{name}] must be a table")
    return value


def _mode(section: Any) -> SafetyMode | None:
    if not isinstance(section, Mapping) or "mode" not in section:
        return None
    value = section["mode"]
    if not isinstance(value, str):
        raise UsageError("[policy] mode must be a string: read_only, ask, auto or full_access")
    try:
        return SafetyMode.parse(value)
    except ValueError as exc:
        raise UsageError(f"[policy] mode: {exc}") from None


def _outbox(section: Mapping[str, Any]) -> frozenset[str]:
    unknown = sorted(set(section) - {"tools"})
    if unknown:
        raise UsageError(f"[outbox] has unknown key(s) {', '.join(unknown)}; the key is: tools")
    tools = section.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
        raise UsageError("[outbox] tools must be a list of tool names")
    return frozenset(tools)


def read_config_document(path: str | Path) -> dict[str, Any]:
    """The TOML document at `path`, read once and not yet parsed into a `TillerConfig`
    (the run's pinned policy records it as read: `tiller.pinned_policy`)."""
    file = Path(path)
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}") from exc


def load_config(path: str | Path) -> TillerConfig:
    """Read and parse the `tiller.toml` at `path`."""
    return TillerConfig.from_mapping(read_config_document(path), path=Path(path))


def find_config(workspace: str | Path) -> TillerConfig:
    """The workspace's `tiller.toml`, or the defaults when it has none."""
    file = Path(workspace) / CONFIG_FILE
    return load_config(file) if file.is_file() else TillerConfig()
