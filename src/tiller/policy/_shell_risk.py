"""`classify_command`: the risk class of a shell command line, part by part.

The policy engine needs to know what `execute_command` is about to do before it runs.
`classify_command` reads the command the way bash would split it (`_shell_syntax`): every
simple command in pipelines, lists (`;`, `&&`, `||`, `&`, newlines), subshells, groups,
loops and function bodies is a *part*, and so is every script the command runs by itself:
command and process substitutions (`$(...)`, backticks, `<(...)`), `sh -c '...'`,
`bash -c`, `eval`, `su -c`, `watch`, `trap`, `find -exec`, here-docs fed to a shell, and
`echo '...' | sh`. Each part is classified (`_shell_commands`, with the targets of writes
and removals judged by `_shell_paths`), after stripping wrappers (`sudo`, `env`, `nice`,
`timeout`, `xargs`, `exec`, `nohup`, `time`, `command`, `builtin`, ...) and assignments
(`A=1 cmd`). On top of each part's own risk:

- a write redirection (`>`, `>>`, `&>`, `2>`, `<>`) raises it to at least a file mutation
  (`/dev/null` and the standard streams change nothing; system paths and devices count
  as in `_shell_paths`);
- `&` (running in the background) raises it to at least `process`;
- setting a loader variable (`LD_PRELOAD=...`, `PATH=...`) raises it to a shell mutation;
- code that comes from the network — a shell or interpreter reading a pipe from `curl`,
  `eval "$(curl ...)"`, `bash <(wget ...)`, `$(curl ...)` as the command — is a system
  install (so it asks even in `full_access`);
- a function that calls itself in a pipeline or in the background (`:(){ :|:& };:`) is a
  fork bomb: destructive.

The command's risk is the highest of its parts' (never lower than any part), and the
parts keep their text and a short reason, so a refusal can say which one was dangerous.
Words are read the way bash reads them before running them: quotes, escapes and
`$'\\x72m'` are undone, braces are expanded (`{rm,-rf,/}`), a command name given as a
glob counts as the riskiest known command it matches (`/bin/r? -rf /`), a variable
assigned a literal earlier in the script (or `export`ed) is substituted when a word is
exactly `$NAME` (`R=rm; $R -rf /`), and relative paths after a `cd` are judged from where
it went (`cd /etc && rm passwd`; a `cd` inside `( )` ends with the subshell). Any other
expansion leaves a word unknown, and a command whose name is unknown is a shell mutation.

Text that cannot be parsed (an unclosed quote or paren, a dangling `|`) is at least a
shell mutation, noted "could not be parsed", on top of whatever parts were read before
the fault; nothing here raises.

This classifies risk to decide whom to ask; it is not a security boundary. Aliases,
scripts on disk, `python -c` code and programs tiller does not know are opaque to it. The
boundary is the sandbox (`bwrap`, DESIGN §11) the command runs in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Final

from ._risk import RiskClass
from ._shell_argv import BOOM, PROC, READ, SHELL, SYS, Nested, Outcome, dangerous_assignment
from ._shell_braces import expand_braces
from ._shell_commands import CommandRisk, classify_argv
from ._shell_paths import Env, Verdict, chdir, write_verdict
from ._shell_syntax import (
    ASSIGNMENT,
    MAX_DEPTH,
    Command,
    Script,
    Substitution,
    Word,
    parse_script,
)

__all__ = ["ShellPart", "ShellRisk", "classify_command"]

_EXCERPT: Final = 120
_ECHOES: Final = frozenset({"echo", "printf"})
_DECLARING: Final = frozenset({"export", "declare", "typeset", "local", "readonly"})


@dataclass(frozen=True, slots=True)
class ShellPart:
    """One command of a command line (or of a script it runs): its `text` as written,
    its risk and why, and `command`, what runs once wrappers are stripped (words joined
    by spaces; empty for a part that could not be parsed)."""

    text: str
    risk: RiskClass
    reason: str
    command: str = ""


@dataclass(frozen=True, slots=True)
class ShellRisk:
    """A command line's risk: the highest of its `parts`, and `reason` naming the part
    that set it. `plain` is the command's words when the whole line is one plain
    command (no pipes, lists, groups, substitutions, redirections, assignments, nested
    scripts or background), which is what a user's allow rule may match; `parsed` is
    false when some of the text could not be read."""

    risk: RiskClass
    parts: tuple[ShellPart, ...]
    reason: str
    plain: tuple[str, ...] | None = None
    parsed: bool = True

    @property
    def worst(self) -> ShellPart | None:
        """The first part with the command's risk (the one to name in a refusal)."""
        return next((part for part in self.parts if part.risk is self.risk), None)


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 3] + "..."


@dataclass(slots=True)
class _Stage:
    """A command already classified in the current pipeline."""

    command: Command
    risk: RiskClass
    argv: list[str]


class _Walker:
    def __init__(self, workspace: str | None) -> None:
        self.env = Env(workspace)
        self.parts: list[ShellPart] = []
        self.parsed = True
        self.top: Script | None = None

    def script(self, source: str, depth: int, env: Env | None = None) -> RiskClass:
        """Classify `source` as a script run in `env`; returns the highest risk of its
        parts."""
        env = env or self.env
        first = len(self.parts)
        if depth > MAX_DEPTH:
            self._fault(source, f"scripts are nested more than {MAX_DEPTH} deep")
            return SHELL
        parsed = parse_script(source, depth)
        if self.top is None:
            self.top = parsed
        for word in parsed.loose:
            self._substitutions(word.substitutions, depth, env)
        known: dict[str, str] = {}
        stages: dict[int, list[_Stage]] = {}
        cwds: dict[tuple[int, ...], str | None] = {(): env.cwd}
        for command in parsed.commands:
            here = replace(env, cwd=_cwd(cwds, command.subshells))
            earlier = stages.setdefault(command.pipeline, [])
            stage = self._command(command, known, earlier, depth, here)
            earlier.append(stage)
            if stage.argv[:1] in (["cd"], ["pushd"], ["popd"]) and not (
                command.in_pipeline or command.background
            ):
                cwds[command.subshells] = _cd(stage.argv, here.cwd)
        if parsed.error is not None:
            self._fault(source, parsed.error)
        return max((p.risk for p in self.parts[first:]), key=_rank, default=READ)

    def _fault(self, source: str, error: str) -> None:
        self.parsed = False
        self.parts.append(
            ShellPart(
                _excerpt(source), SHELL, f"could not be parsed ({error}), so it may do anything"
            )
        )

    def _substitutions(
        self, substitutions: tuple[Substitution, ...], depth: int, env: Env
    ) -> RiskClass:
        risks = [self.script(sub.source, depth + 1, env) for sub in substitutions]
        return max(risks, key=_rank, default=READ)

    def _command(
        self,
        command: Command,
        known: dict[str, str],
        earlier: list[_Stage],
        depth: int,
        env: Env,
    ) -> _Stage:
        subs = [s for w in command.all_words() for s in w.substitutions]
        for redirect in command.redirects:
            if redirect.heredoc is not None:
                subs.extend(redirect.heredoc.substitutions)
        fetched = self._substitutions(tuple(subs), depth, env)
        argv = _argv(command.words, known)
        index = len(self.parts)
        risk = self._classified(command, argv, depth, env)
        result = Outcome(risk.risk, risk.reason)
        for assignment in command.assignments:
            result.raise_to(dangerous_assignment(assignment.value))
        if not command.words:
            _remember(command.assignments, known)
        elif argv[:1] and argv[0] in _DECLARING:
            _remember([w for w in command.words[1:] if ASSIGNMENT.match(w.raw)], known)
        for redirect in command.redirects:
            if redirect.writes:
                result.raise_to(write_verdict(redirect.target.value, env))
        if command.background:
            result.raise_to(Verdict(PROC, "runs in the background"))
        if argv and argv[0] in command.functions and (command.in_pipeline or command.background):
            result.raise_to(
                Verdict(BOOM, f"a fork bomb: `{argv[0]}` keeps starting copies of itself")
            )
        if risk.runs_code and fetched.at_least(RiskClass.NETWORK):
            result.raise_to(Verdict(SYS, "runs code fetched from the network"))
        if risk.reads_script:
            result.raise_to(self._stdin_script(command, earlier, depth, env))
        text = command.text or " ".join(argv)
        self.parts.insert(
            index, ShellPart(text, result.risk, result.reason, " ".join(risk.command))
        )
        return _Stage(command, result.risk, argv)

    def _classified(self, command: Command, argv: list[str], depth: int, env: Env) -> CommandRisk:
        """The command's own risk, with the scripts it runs classified as parts after it."""
        if command.kind == "test":
            return CommandRisk(READ, "tests a condition", ("[[",))
        if command.kind == "arith":
            return CommandRisk(READ, "does arithmetic", ("((",))
        if not argv:
            what = "sets shell variables" if command.assignments else "only opens files"
            return CommandRisk(READ, what, ())
        risk = classify_argv(argv, env)
        self._nested(risk.nested, depth, env)
        return risk

    def _nested(self, nested: tuple[Nested, ...], depth: int, env: Env) -> None:
        for item in nested:
            if item.script is not None:
                self.script(item.script, depth + 1, env)
                continue
            risk = classify_argv(item.argv, item.env or env)
            index = len(self.parts)
            if depth < MAX_DEPTH:
                self._nested(risk.nested, depth + 1, item.env or env)
            text = " ".join(item.argv)
            self.parts.insert(
                index, ShellPart(text, risk.risk, risk.reason, " ".join(risk.command))
            )

    def _stdin_script(
        self, command: Command, earlier: list[_Stage], depth: int, env: Env
    ) -> Verdict | None:
        """A shell or interpreter reading its program from stdin: classify the program
        when it is written here (a here-doc, a here-string, `echo ... |`), and treat
        what comes down a pipe from the network as code from the network."""
        for redirect in command.redirects:
            if redirect.heredoc is not None:
                self.script(redirect.heredoc.body, depth + 1, env)
                return None
            if redirect.op == "<<<":
                self.script(redirect.target.value, depth + 1, env)
                return None
        feeding = [stage for stage in earlier if stage.command.stage < command.stage]
        for stage in feeding:
            if stage.risk.at_least(RiskClass.NETWORK) and stage.risk is not PROC:
                return Verdict(SYS, f"runs code piped from `{_excerpt(stage.command.text)}`")
        if not feeding:
            return None
        last = feeding[-1]
        if last.argv[:1] and last.argv[0] in _ECHOES:
            self.script(" ".join(last.argv[1:]), depth + 1, env)
        elif last.argv == ["cat"]:
            self._stdin_script(last.command, [], depth, env)
        return None


def _cwd(cwds: dict[tuple[int, ...], str | None], scopes: tuple[int, ...]) -> str | None:
    """The directory a command in the subshells `scopes` runs in: the last `cd` in its
    own subshell, else in the nearest one around it."""
    for size in range(len(scopes), -1, -1):
        if scopes[:size] in cwds:
            return cwds[scopes[:size]]
    return None


def _cd(argv: list[str], cwd: str | None) -> str:
    """Where `cd`/`pushd`/`popd` goes, as written (`$OLDPWD` when it cannot be told)."""
    targets = [arg for arg in argv[1:] if arg == "-" or not arg.startswith(("-", "+"))]
    if argv[0] == "popd" or targets[:1] == ["-"] or (argv[0] == "pushd" and not targets):
        return "$OLDPWD"
    return chdir(cwd, targets[0]) if targets else "~"


def _rank(risk: RiskClass) -> int:
    return risk.rank


def _argv(words: list[Word], known: dict[str, str]) -> list[str]:
    """The words' values, with `$NAME` replaced where the script set NAME to a literal."""
    argv: list[str] = []
    for word in words:
        value = known.get(word.variable) if word.variable is not None else None
        if value is None:
            argv.extend(expand_braces(word.value) if word.braces else [word.value])
        elif word.split:
            argv.extend(value.split())
        else:
            argv.append(value)
    return argv


def _remember(assignments: list[Word], known: dict[str, str]) -> None:
    for assignment in assignments:
        name, _, value = assignment.value.partition("=")
        if assignment.dynamic or name.endswith("+") or "[" in name:
            known.pop(name.rstrip("+").partition("[")[0], None)
        else:
            known[name] = value


def _plain(script: Script, parts: list[ShellPart]) -> tuple[str, ...] | None:
    if script.error is not None or script.compound or len(script.commands) != 1 or len(parts) != 1:
        return None
    command = script.commands[0]
    if command.kind != "simple" or command.assignments or command.redirects or command.background:
        return None
    if not command.words or any(word.dynamic or word.substitutions for word in command.words):
        return None
    return tuple(word.value for word in command.words)


def classify_command(command: str, *, workspace: str | os.PathLike[str] | None = None) -> ShellRisk:
    """The risk of running `command` in bash (see the module docstring). `workspace`,
    the absolute directory it runs in, lets absolute paths inside it count as inside."""
    walker = _Walker(os.fspath(workspace) if workspace is not None else None)
    walker.script(command, 0)
    parts = tuple(walker.parts)
    if not parts:
        return ShellRisk(READ, (), "an empty command does nothing", plain=None)
    risk = max((part.risk for part in parts), key=_rank)
    worst = next(part for part in parts if part.risk is risk)
    reason = f"`{_excerpt(worst.text)}`: {worst.reason}"
    plain = _plain(walker.top, walker.parts) if walker.top is not None else None
    return ShellRisk(risk, parts, reason, plain, walker.parsed)
