"""User policy rules, and the `[policy]` section of `tiller.toml` that holds them.

```toml
[policy]
mode = "ask"                     # the default safety mode: read_only, ask, auto, full_access

[[policy.rules]]                 # checked in order; the first rule that matches decides
action = "deny"
command = "git push*"            # ask/deny: a glob over the command and each of its parts
reason = "pushing is done by CI"

[[policy.rules]]
action = "allow"
command = "pytest"               # allow: one plain command, these words first, any arguments

[[policy.rules]]
action = "ask"
tool = "write_file"              # a tool name (ask/deny: a glob, e.g. "github__*")
path = "*.env"                   # optional: a glob over the call's path (also "write_file(*.env)")
```

How a rule matches a call:

- **`command`, action `allow`**: anchored. The rule is one plain command (words, no
  wildcards); it matches an `execute_command` call only when the whole command line is a
  single plain command — no pipe, list, group, substitution, redirection, assignment,
  nested script or background — whose words start with the rule's words. `allow
  "git status"` allows `git status --short`, never `git status; rm -rf x`,
  `git status > f`, `git statusx` or `sh -c 'git status'`.
- **`command`, action `ask` or `deny`**: a glob (`fnmatch`, case-sensitive) matched
  against the whole command line and against every part of it (each simple command, the
  commands inside substitutions, `sh -c` scripts, `find -exec`, and each part with its
  wrappers stripped); a pattern also matches a part that starts with it followed by a
  space, so `deny "git push"` catches `sudo git push --force origin main` and
  `ls && git push`.
- **`tool`** (with an optional `path`): the call's tool name matches the name (a glob for
  ask and deny, a literal name for allow, which cannot name `execute_command`: allow
  shell commands with `command`); with `path`, the call's path (the `path` argument, or
  every file an `apply_patch` touches) must match: any of them for ask and deny, all of
  them for allow.

Rules are checked in the order written and the first match decides, so put a narrow
`allow` before a broad `deny` only if you mean it. What a matching rule can do is
bounded by the engine (see `_engine`): an allow never allows a destructive action, never
lifts the floors (external access and system installs always ask) and never widens
`read_only` mode; an ask never loosens a stricter mode default.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Final, Literal

from ..errors import UsageError
from ..tools import SafetyMode

if TYPE_CHECKING:  # the shell's parser and tables load with the first shell command
    from ._shell_risk import ShellRisk

__all__ = ["PolicyConfigError", "PolicyRule", "PolicyRules", "RuleAction"]

RuleAction = Literal["allow", "ask", "deny"]

_ACTIONS: Final[tuple[RuleAction, ...]] = ("allow", "ask", "deny")
_SECTION_KEYS: Final = ("mode", "rules")
_RULE_KEYS: Final = ("action", "command", "tool", "path", "reason")
_GLOB: Final = frozenset("*?[")
_SHELL_TOOL: Final = "execute_command"


class PolicyConfigError(UsageError):
    """The `[policy]` section of `tiller.toml` (or a `PolicyRule` built in code) is wrong;
    `key` names the bad entry (for example `policy.rules[2].action`) and the message says
    what is allowed."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def _split_tool(tool: str) -> tuple[str, str | None]:
    """`write_file(*.env)` is the tool `write_file` with the path glob `*.env`."""
    if tool.endswith(")") and "(" in tool:
        name, _, path = tool[:-1].partition("(")
        return name.strip(), path.strip()
    return tool, None


def _check(
    key: str,
    action: object,
    *,
    command: object,
    tool: object,
    path: object,
    reason: object,
) -> tuple[RuleAction, str | None, str | None, str | None, str | None]:
    """Validate one rule's fields; returns them normalised (a `tool(path)` split)."""
    if action not in _ACTIONS:
        raise PolicyConfigError(
            f"{key}.action", f"must be one of: {', '.join(_ACTIONS)} (not {action!r})"
        )
    checked: dict[str, str | None] = {}
    for name, value in (("command", command), ("tool", tool), ("path", path), ("reason", reason)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise PolicyConfigError(f"{key}.{name}", "must be a non-empty string")
        checked[name] = value.strip() if isinstance(value, str) else None
    command, tool, path = checked["command"], checked["tool"], checked["path"]
    if (command is None) == (tool is None):
        raise PolicyConfigError(
            key,
            "a rule needs exactly one of `command` (a shell command) and `tool` (a tool name)",
        )
    if path is not None and tool is None:
        raise PolicyConfigError(f"{key}.path", 'only goes with `tool`, e.g. tool = "write_file"')
    if tool is not None:
        tool, inline = _split_tool(tool)
        if inline is not None:
            if path is not None:
                raise PolicyConfigError(
                    f"{key}.tool", "give the path in `tool(...)` or in `path`, not both"
                )
            if not inline or not tool:
                raise PolicyConfigError(
                    f"{key}.tool", "write a tool and a path glob, e.g. write_file(*.env)"
                )
            path = inline
    assert action in _ACTIONS
    if action == "allow":
        _check_allow(key, command, tool)
    return action, command, tool, path, checked["reason"]


def _check_allow(key: str, command: str | None, tool: str | None) -> None:
    if tool is not None:
        if _GLOB & set(tool):
            raise PolicyConfigError(
                f"{key}.tool", "an allow rule names one tool exactly; write no wildcards"
            )
        if tool == _SHELL_TOOL:
            raise PolicyConfigError(
                f"{key}.tool",
                'allow shell commands one by one with command = "...", not the whole tool',
            )
        return
    assert command is not None
    if _GLOB & set(command):
        raise PolicyConfigError(
            f"{key}.command",
            f"an allow rule matches a command and its arguments literally ({command!r} with any "
            "arguments); write no wildcards",
        )
    from ._shell_risk import classify_command

    if classify_command(command).plain is None:
        raise PolicyConfigError(
            f"{key}.command",
            "an allow rule is one plain command (no pipes, ;, &&, substitutions, redirections "
            f"or assignments), not {command!r}",
        )


def _normalise_path(path: str) -> str:
    norm = posixpath.normpath(path)
    return norm[2:] if norm.startswith("./") else norm


def _glob_matches(text: str, pattern: str) -> bool:
    """`pattern` matches `text`, or the start of it followed by a space."""
    return fnmatchcase(text, pattern) or fnmatchcase(text, pattern + " *")


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One user rule: `action` when a call matches `command` or `tool` (and `path`);
    `reason` is added to the refusal or the question. See the module docstring."""

    action: RuleAction
    command: str | None = None
    tool: str | None = None
    path: str | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        _, command, tool, path, reason = _check(
            "PolicyRule",
            self.action,
            command=self.command,
            tool=self.tool,
            path=self.path,
            reason=self.reason,
        )
        object.__setattr__(self, "command", command)
        object.__setattr__(self, "tool", tool)
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "reason", reason)

    def describe(self) -> str:
        """The rule as a person wrote it, e.g. `deny git push*` or `ask write_file(*.env)`."""
        if self.command is not None:
            return f"{self.action} `{self.command}`"
        target = f"{self.tool}({self.path})" if self.path is not None else self.tool
        return f"{self.action} {target}"

    def matches(
        self,
        tool_name: str,
        *,
        command: str | None = None,
        shell: ShellRisk | None = None,
        paths: Sequence[str] = (),
    ) -> bool:
        """Whether the rule applies to a call of `tool_name`: for a shell call, its
        `command` line and its classification `shell`; for others, the `paths` it names."""
        if self.command is not None:
            if tool_name != _SHELL_TOOL or command is None or shell is None:
                return False
            if self.action == "allow":
                words = tuple(self.command.split())
                return shell.plain is not None and shell.plain[: len(words)] == words
            return any(_glob_matches(text, self.command) for text in _shell_texts(command, shell))
        assert self.tool is not None
        if not fnmatchcase(tool_name, self.tool):
            return False
        if self.path is None:
            return True
        norms = [_normalise_path(p) for p in paths]
        if not norms:
            return False
        hits = [fnmatchcase(p, self.path) for p in norms]
        return all(hits) if self.action == "allow" else any(hits)


def _shell_texts(command: str, shell: ShellRisk) -> list[str]:
    texts = [" ".join(command.split())]
    for part in shell.parts:
        texts.append(" ".join(part.text.split()))
        if part.command:
            texts.append(part.command)
    return texts


@dataclass(frozen=True, slots=True)
class PolicyRules:
    """The `[policy]` section: the default safety `mode` and the user's `rules`, in order."""

    mode: SafetyMode = SafetyMode.ASK
    rules: tuple[PolicyRule, ...] = ()

    def first_match(
        self,
        tool_name: str,
        *,
        command: str | None = None,
        shell: ShellRisk | None = None,
        paths: Sequence[str] = (),
    ) -> tuple[int, PolicyRule] | None:
        """The first rule matching the call, with its index, or `None`."""
        for index, rule in enumerate(self.rules):
            if rule.matches(tool_name, command=command, shell=shell, paths=paths):
                return index, rule
        return None

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> PolicyRules:
        """Parse the `[policy]` section of `tiller.toml` (see the module docstring).

        Raises `PolicyConfigError` naming the bad key: an unknown setting, a mode that is
        not one of the four, a rule that is not a table, has an unknown key, no or an
        unknown `action`, both or neither of `command` and `tool`, a `path` without a
        `tool`, or an allow rule that is not one plain command or tool name.
        """
        if not isinstance(section, Mapping):
            raise PolicyConfigError("policy", "must be a table with `mode` and `rules`")
        for key in section:
            if key not in _SECTION_KEYS:
                raise PolicyConfigError(
                    f"policy.{key}",
                    f"is not a policy setting; the settings are: {', '.join(_SECTION_KEYS)}",
                )
        mode = SafetyMode.ASK
        if "mode" in section:
            value = section["mode"]
            if not isinstance(value, str):
                raise PolicyConfigError(
                    "policy.mode", "must be a string: read_only, ask, auto or full_access"
                )
            try:
                mode = SafetyMode.parse(value)
            except ValueError as error:
                raise PolicyConfigError("policy.mode", str(error)) from None
        entries = section.get("rules", [])
        if not isinstance(entries, list):
            raise PolicyConfigError(
                "policy.rules", "must be a list of tables: write [[policy.rules]] entries"
            )
        return cls(
            mode, tuple(_parse_rule(f"policy.rules[{i}]", entry) for i, entry in enumerate(entries))
        )


def _parse_rule(key: str, entry: object) -> PolicyRule:
    if not isinstance(entry, Mapping):
        raise PolicyConfigError(
            key, 'must be a table like { action = "deny", command = "git push" }'
        )
    for name in entry:
        if name not in _RULE_KEYS:
            raise PolicyConfigError(
                f"{key}.{name}", f"is not a rule key; the keys are: {', '.join(_RULE_KEYS)}"
            )
    if "action" not in entry:
        raise PolicyConfigError(f"{key}.action", "is required: allow, ask or deny")
    action, command, tool, path, reason = _check(
        key,
        entry["action"],
        command=entry.get("command"),
        tool=entry.get("tool"),
        path=entry.get("path"),
        reason=entry.get("reason"),
    )
    return PolicyRule(action, command, tool, path, reason)
