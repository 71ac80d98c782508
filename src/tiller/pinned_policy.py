"""A run's policy, pinned when the run starts and used unchanged until it ends (law 11).

The model writes the workspace, and `tiller.toml`, its hook scripts and its MCP server
programs live there. So the configuration is read once, by the person who starts the run
(`tiller run`: `--config FILE`, else the project's `tiller.toml`; `tiller serve`: once at
startup), and recorded in the run's checkpoint (`RunContext.pinned_policy`, stored in
`RunState.policy["pinned"]`). `tiller approve`, `tiller deny`, `tiller runs resume` and a
served resume rebuild the policy from that record (`restore_pinned_policy`) and never read
a file in the jail; a person's edit of `tiller.toml` is adopted by the next run they start.

What is pinned: the TOML document as read (every section `TillerConfig` parses, so a
section added later is pinned too), where it was read from, and the files in the jail that
the policy runs on the host, with their sha256 then: each hook's scripts
(`ShellHook.pinned`: a changed script is refused, and the hook denies) and each MCP
server's program and script arguments (`check_mcp_files`: a changed one is not started). An
MCP server's working directory is pinned as an absolute path, so every process that
continues the run starts the same server. The pinned files inside the jail join its
protected paths, so the file tools refuse to write them.

A checkpoint without a pinned policy (written by code that did not pin one) resumes with
the defaults: no hooks, no MCP servers, the default interlock and rules (law 3).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from .config import CONFIG_FILE, ConfigError, TillerConfig, read_config_document
from .errors import TillerError
from .loop import RunContext
from .policy import FilePin, HookKind, HookSet, ShellHook, changed_pins, pin_files, script_paths
from .tools.mcp import McpServers

__all__ = [
    "PIN_VERSION",
    "PinnedFileChanged",
    "PinnedPolicy",
    "pinned_policy_of",
    "restore_pinned_policy",
    "with_store_protected",
]

#: Bumped when the shape of the record changes; an unknown version is refused by name.
PIN_VERSION: Final = 1

_HOOK_KINDS: Final[tuple[HookKind, ...]] = ("pre_tool", "post_tool", "session_end")


class PinnedFileChanged(TillerError):
    """A program the pinned policy runs on the host (an MCP server's) changed since the
    run started; it is not started. A person checks the file and starts a new run."""


@dataclass(frozen=True)
class PinnedPolicy:
    """The configuration a run was started with: `config` as parsed, `document` as read
    (JSON-ready), `source` the file it came from (None: built-in defaults), `hook_pins`
    the hashes of each hook's scripts (by kind, in order), `mcp_pins` those of each MCP
    server's files, by server name."""

    config: TillerConfig = field(default_factory=TillerConfig)
    document: Mapping[str, Any] = field(default_factory=dict)
    source: Path | None = None
    hook_pins: Mapping[str, tuple[tuple[FilePin, ...], ...]] = field(default_factory=dict)
    mcp_pins: Mapping[str, tuple[FilePin, ...]] = field(default_factory=dict)
    #: The jail the hooks' scripts were hashed in (None: nothing was hashed).
    workspace: Path | None = None

    # ── pinning, when a person starts a run ────────────────────────────────────────

    @classmethod
    def read(cls, workspace: str | Path, config_path: str | Path | None = None) -> PinnedPolicy:
        """Pin the policy for a run in `workspace`: `config_path` if given, else the
        workspace's `tiller.toml`, else the defaults. Hook scripts and MCP programs are
        hashed now, relative to the directories they will run in."""
        root = Path(workspace).resolve()
        if config_path is None:
            candidate = root / CONFIG_FILE
            if not candidate.is_file():
                return cls()
            config_path = candidate
        source = Path(config_path).resolve()
        document = _json_ready(read_config_document(source))
        config = TillerConfig.from_mapping(document, path=source)
        hook_pins: dict[str, tuple[tuple[FilePin, ...], ...]] = {
            kind: tuple(
                pin_files(_inside(script_paths(hook.command, root), root))
                if isinstance(hook, ShellHook)
                else ()
                for hook in config.hooks.hooks(kind)
            )
            for kind in _HOOK_KINDS
        }
        # A server without a cwd starts where the process that opens it runs: pin the
        # directory of the person who started the run, for every later process.
        here = Path.cwd()
        mcp = McpServers(
            tuple(
                replace(server, cwd=(server.cwd if server.cwd is not None else here).resolve())
                for server in config.mcp
            )
        )
        mcp_pins = {
            server.name: pin_files(
                _inside(_mcp_paths(server.command, server.args, server.cwd or here), root)
            )
            for server in mcp
        }
        pinned = cls(replace(config, mcp=mcp), document, source, hook_pins, mcp_pins, root)
        return pinned._with_hook_pins()

    def describe(self) -> str:
        """One line for `tiller run`: which file the policy came from."""
        if self.source is None:
            return f"policy: no {CONFIG_FILE}: built-in defaults"
        return f"policy: {self.source} (pinned for this run)"

    # ── the checkpoint record ──────────────────────────────────────────────────────

    def to_data(self) -> dict[str, Any]:
        """The record stored in the run's checkpoint (JSON-ready)."""
        return {
            "version": PIN_VERSION,
            "source": str(self.source) if self.source is not None else None,
            "workspace": str(self.workspace) if self.workspace is not None else None,
            "document": dict(self.document),
            "hooks": {
                kind: [[_pin_data(p) for p in pins] for pins in self.hook_pins.get(kind, ())]
                for kind in _HOOK_KINDS
            },
            "mcp": {
                server.name: {
                    "cwd": str(server.cwd) if server.cwd is not None else None,
                    "files": [_pin_data(p) for p in self.mcp_pins.get(server.name, ())],
                }
                for server in self.config.mcp
            },
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> PinnedPolicy:
        """The policy a checkpoint pinned; reads no file."""
        if data.get("version") != PIN_VERSION:
            raise ConfigError(
                f"the run's pinned policy has version {data.get('version')!r}; this tiller "
                f"reads version {PIN_VERSION}. Finish the run with the tiller that started "
                "it, or start a new run"
            )
        source = Path(data["source"]) if data.get("source") is not None else None
        document = data.get("document") or {}
        config = TillerConfig.from_mapping(document, path=source)
        hook_pins: dict[str, tuple[tuple[FilePin, ...], ...]] = {
            kind: tuple(tuple(_pin_from(p) for p in pins) for pins in data["hooks"].get(kind, []))
            for kind in _HOOK_KINDS
        }
        stored_mcp = data.get("mcp", {})
        servers = []
        for server in config.mcp:
            stored = stored_mcp.get(server.name)
            if stored is None:
                raise ConfigError(f"the run's pinned policy does not record server {server.name}")
            cwd = stored.get("cwd")
            servers.append(replace(server, cwd=Path(cwd) if cwd is not None else server.cwd))
        mcp_pins = {
            name: tuple(_pin_from(p) for p in stored.get("files", []))
            for name, stored in stored_mcp.items()
        }
        workspace = Path(data["workspace"]) if data.get("workspace") is not None else None
        pinned = cls(
            replace(config, mcp=McpServers(tuple(servers))),
            document,
            source,
            hook_pins,
            mcp_pins,
            workspace,
        )
        return pinned._with_hook_pins()

    # ── using it ───────────────────────────────────────────────────────────────────

    def apply(self, run_ctx: RunContext) -> RunContext:
        """`run_ctx` under this policy (`TillerConfig.apply`), carrying its record for
        the checkpoints, with the pinned files inside the jail protected. A run that
        continues in another jail (`tiller runs resume --workspace`) checks its hook
        scripts there, against the hashes taken in the first."""
        root = run_ctx.jail.root
        if self.workspace is not None and self.workspace != root:
            return self.for_workspace(root).apply(run_ctx)
        pinned_files = [Path(p.path) for p in self._all_pins()]
        if self.source is not None:
            pinned_files.append(self.source)  # a `--config` file inside the jail
        inside = [p for p in pinned_files if p.is_relative_to(root)]
        if inside:
            # Before `config.apply`: a `[policy]` engine takes the protected paths it is
            # built with, and must know these too.
            run_ctx = run_ctx.with_jail(run_ctx.jail.with_protected(*inside))
        applied = self.config.apply(run_ctx).with_pinned_policy(self.to_data())
        return with_store_protected(applied)

    def check_mcp_files(self) -> None:
        """Raise `PinnedFileChanged` if an MCP server's pinned program or script changed:
        call before opening the servers."""
        for server in self.config.mcp:
            changed = changed_pins(self.mcp_pins.get(server.name, ()))
            if changed:
                raise PinnedFileChanged(
                    f"MCP server {server.name} is not started: {'; '.join(changed)} since "
                    "the run's policy was pinned at its start. Check the file, then start a "
                    "new run to adopt it"
                )

    # ── internals ──────────────────────────────────────────────────────────────────

    def _all_pins(self) -> list[FilePin]:
        pins = [p for each in self.hook_pins.values() for hook in each for p in hook]
        pins.extend(p for each in self.mcp_pins.values() for p in each)
        return pins

    def for_workspace(self, root: str | Path) -> PinnedPolicy:
        """This policy for a run continuing in the jail `root`: the hook pins taken
        under the first jail are checked at the same places under `root`."""
        old = self.workspace
        root = Path(root).resolve()
        if old is None or old == root:
            return self

        def moved(pin: FilePin) -> FilePin:
            path = Path(pin.path)
            if not path.is_relative_to(old):
                return pin
            return FilePin(str(root / path.relative_to(old)), pin.sha256)

        hook_pins = {
            kind: tuple(tuple(moved(p) for p in pins) for pins in each)
            for kind, each in self.hook_pins.items()
        }
        return replace(self, hook_pins=hook_pins, workspace=root)._with_hook_pins()

    def _with_hook_pins(self) -> PinnedPolicy:
        """The config with each shell hook trusting its scripts only as pinned."""
        hooks = self.config.hooks
        kinds: dict[str, list[Any]] = {}
        for kind in _HOOK_KINDS:
            pins = self.hook_pins.get(kind, ())
            each = hooks.hooks(kind)
            if len(pins) != len(each):
                raise ConfigError(f"the run's pinned policy does not match its [hooks] {kind}")
            kinds[kind] = [
                hook.with_pins(pin) if isinstance(hook, ShellHook) else hook
                for hook, pin in zip(each, pins, strict=True)
            ]
        pinned_hooks = HookSet(
            pre_tool=kinds["pre_tool"],
            post_tool=kinds["post_tool"],
            session_end=kinds["session_end"],
        )
        return replace(self, config=replace(self.config, hooks=pinned_hooks))


def restore_pinned_policy(run_ctx: RunContext) -> RunContext:
    """`run_ctx` (rebuilt from a checkpoint) under the policy the run pinned when it
    started, or the defaults if it pinned none; what `resume(..., configure=...)` takes
    in every process that continues a run. Reads no file in the jail."""
    data = run_ctx.pinned_policy
    pinned = PinnedPolicy.from_data(data) if data is not None else PinnedPolicy()
    return pinned.apply(run_ctx)


def with_store_protected(run_ctx: RunContext) -> RunContext:
    """`run_ctx` with its store's file protected when it lies inside the jail (a
    `sqlite:///` store in the project): the checkpoints there hold the pinned policy, so
    the model must not be able to rewrite them."""
    path = getattr(run_ctx.store, "path", None)
    if not isinstance(path, Path):
        return run_ctx
    db = path.expanduser().resolve()
    files = [db, *(db.with_name(db.name + suffix) for suffix in ("-wal", "-shm", "-journal"))]
    jail = run_ctx.jail
    inside = [f for f in files if f.is_relative_to(jail.root)]
    if not inside:
        return run_ctx
    return run_ctx.with_jail(jail.with_protected(*inside))


def pinned_policy_of(run_ctx: RunContext) -> PinnedPolicy:
    """The policy `run_ctx` carries (the defaults if none)."""
    data = run_ctx.pinned_policy
    return PinnedPolicy.from_data(data) if data is not None else PinnedPolicy()


def _inside(paths: list[Path], root: Path) -> list[Path]:
    """The paths in the jail: only there can the model change a file (the sandbox binds
    the rest read-only and the file tools never leave it), so only there is a hash due."""
    return [p for p in paths if p.is_relative_to(root)]


def _mcp_paths(command: str, args: Sequence[str], cwd: Path) -> list[Path]:
    return script_paths([command, *args], cwd)


def _pin_data(pin: FilePin) -> dict[str, Any]:
    return {"path": pin.path, "sha256": pin.sha256}


def _pin_from(data: Mapping[str, Any]) -> FilePin:
    return FilePin(str(data["path"]), data.get("sha256"))


def _json_ready(value: Any) -> Any:
    """The TOML document as JSON can carry it: dates and times become ISO strings."""
    if isinstance(value, Mapping):
        return {str(key): _json_ready(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_ready(item) for item in value]
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return value
