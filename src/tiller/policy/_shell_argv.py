"""The vocabulary shared by the per-command handlers of the shell risk classifier: where a
command runs (`Env`), what it runs by itself (`Nested`), a handler's answer (`Outcome`),
and a small option parser (`options`) good enough for GNU-style command lines."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from ._risk import RiskClass
from ._shell_paths import Env, Verdict

__all__ = [
    "BOOM",
    "EXT",
    "FILE",
    "LOW",
    "NET",
    "PROC",
    "READ",
    "SHELL",
    "SYS",
    "Env",
    "Handler",
    "Nested",
    "Opts",
    "Outcome",
    "command_in_variable",
    "dangerous_assignment",
    "options",
    "valued",
]

READ: Final = RiskClass.READ_ONLY
LOW: Final = RiskClass.LOW_MUTATION
FILE: Final = RiskClass.FILE_MUTATION
SHELL: Final = RiskClass.SHELL_MUTATION
NET: Final = RiskClass.NETWORK
PROC: Final = RiskClass.PROCESS
EXT: Final = RiskClass.EXTERNAL_ACCESS
SYS: Final = RiskClass.SYSTEM_INSTALL
BOOM: Final = RiskClass.DESTRUCTIVE


@dataclass(frozen=True, slots=True)
class Nested:
    """Something a command runs by itself: a shell `script`, or an `argv` in `env`."""

    script: str | None = None
    argv: tuple[str, ...] = ()
    env: Env | None = None


@dataclass(slots=True)
class Outcome:
    """A handler's answer: the risk and why, what the command runs by itself, whether
    its arguments are code (`runs_code`) and whether it reads a program from stdin."""

    risk: RiskClass
    reason: str
    nested: list[Nested] = field(default_factory=list)
    runs_code: bool = False
    reads_script: bool = False
    #: Why tiller cannot tell what it does (a computed program name, code given to an
    #: interpreter): the risk is then the highest it could be, and it is never allowed
    #: without a person.
    uncertain: str | None = None
    #: Paths it writes, removes or changes, as written (for the protected paths).
    writes: list[str] = field(default_factory=list)

    def raise_to(self, other: Verdict | Outcome | None) -> Outcome:
        """Take `other`'s risk and reason if it is riskier; returns self."""
        if other is not None and other.risk.rank > self.risk.rank:
            self.risk, self.reason = other.risk, other.reason
        if isinstance(other, Verdict) and other.written is not None:
            self.writes.append(other.written)
        if isinstance(other, Outcome):
            self.uncertain = self.uncertain or other.uncertain
            self.writes.extend(other.writes)
        return self

    def unsure(self, risk: RiskClass, reason: str) -> Outcome:
        """Mark it uncertain (`reason`), at least at `risk`; returns self."""
        self.uncertain = self.uncertain or reason
        return self.raise_to(Verdict(risk, reason))


#: A command's handler: (its name, its arguments, where it runs) -> its risk.
Handler = Callable[[str, list[str], Env], Outcome]


@dataclass(slots=True)
class Opts:
    """Parsed options: every flag with its values, and the positional arguments."""

    flags: dict[str, list[str | None]] = field(default_factory=dict)
    positional: list[str] = field(default_factory=list)

    def has(self, *names: str) -> bool:
        return any(name in self.flags for name in names)

    def value(self, *names: str) -> str | None:
        """The last value given to any of `names`."""
        found: str | None = None
        for name in names:
            for value in self.flags.get(name, []):
                if value is not None:
                    found = value
        return found

    def values(self, *names: str) -> list[str]:
        return [v for name in names for v in self.flags.get(name, []) if v is not None]

    def add(self, name: str, value: str | None) -> None:
        self.flags.setdefault(name, []).append(value)


def valued(*names: str) -> frozenset[str]:
    """The options (`-o`, `--output`) that take a value."""
    return frozenset(names)


def options(
    args: Sequence[str], takes_value: frozenset[str] = frozenset(), *, first: bool = False
) -> Opts:
    """Split `args` into flags (`-abc` is `-a -b -c`; `--x=y`; options in `takes_value`
    take the next word or the rest of their cluster) and positionals. With `first`,
    everything from the first positional on is positional (a wrapped command line)."""
    opts = Opts()
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            opts.positional.extend(args[index + 1 :])
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                opts.add(name, value)
            elif name in takes_value and index + 1 < len(args):
                opts.add(name, args[index + 1])
                index += 1
            else:
                opts.add(name, None)
        elif arg.startswith("-") and len(arg) > 1:
            for offset in range(1, len(arg)):
                flag = "-" + arg[offset]
                if flag in takes_value:
                    rest = arg[offset + 1 :]
                    if not rest and index + 1 < len(args):
                        rest = args[index + 1]
                        index += 1
                    opts.add(flag, rest)
                    break
                opts.add(flag, None)
        else:
            opts.positional.append(arg)
            if first:
                opts.positional.extend(args[index + 1 :])
                break
        index += 1
    return opts


_LOADER_VARIABLES: Final = frozenset(
    {
        "PATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS",
        "GIT_SSH", "GIT_SSH_COMMAND", "GIT_EXEC_PATH", "GIT_PAGER", "GIT_EDITOR", "PAGER",
        "EDITOR", "VISUAL", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "NODE_OPTIONS",
        "NODE_PATH", "PERL5OPT", "PERL5LIB", "RUBYOPT", "RUBYLIB", "JAVA_TOOL_OPTIONS",
    }
)  # fmt: skip


#: Variables whose value is a command line some program runs later (git's pager, an
#: editor, a prompt hook): setting one puts code in the command that tiller never reads.
_COMMAND_VARIABLES: Final = frozenset(
    {
        "GIT_PAGER", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "GIT_SSH_COMMAND", "GIT_SSH",
        "GIT_ASKPASS", "SSH_ASKPASS", "PAGER", "MANPAGER", "EDITOR", "VISUAL", "BROWSER",
        "PROMPT_COMMAND", "BASH_ENV", "ENV", "PS4", "LESSOPEN", "LESSCLOSE",
    }
)  # fmt: skip


#: Plain programs such variables usually name (`GIT_PAGER=cat git log`, a common way to
#: keep git from paging): nothing hidden in them.
_PLAIN_COMMANDS: Final = frozenset(
    {"cat", "less", "more", "most", "head", "tail", "true", "vi", "vim", "nvim", "nano", "ed"}
)


def command_in_variable(assignment: str) -> str | None:
    """The command `NAME=value` stores for a program to run later (`GIT_PAGER='rm -rf .'`),
    or None when the variable holds no command (or one plain program, `PAGER=cat`)."""
    name, _, value = assignment.partition("=")
    name = name.rstrip("+").partition("[")[0]
    if name not in _COMMAND_VARIABLES or value.strip("'\" ") in ("", *_PLAIN_COMMANDS):
        return None
    return value


def dangerous_assignment(assignment: str) -> Verdict | None:
    """`NAME=value` changing which code later commands load (`LD_PRELOAD`, `PATH`, ...):
    at least a shell mutation, since it can make a harmless command run anything."""
    name = assignment.partition("=")[0].rstrip("+").partition("[")[0]
    if name.startswith(("GIT_CONFIG", "GIT_DIR")):
        # `GIT_CONFIG_KEY_0=core.fsmonitor`: overrides what `.git/config` makes git run.
        return Verdict(SHELL, f"sets `{name}`, which changes git's configuration", ".git/config")
    if name in _LOADER_VARIABLES or name.startswith(("LD_", "DYLD_")):
        return Verdict(SHELL, f"sets `{name}`, which changes what commands run")
    return None
