"""`classify_command`: the risk class of a shell command line, part by part.

The policy engine needs to know what `execute_command` is about to do before it runs.
`classify_command` reads the command the way bash would split it, from bash's grammar
(tree-sitter-bash: `_shell_parse`, `_shell_tree`; the hand reader `_shell_syntax` only
where the grammar fails, and then the command is uncertain): every
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

What the classifier cannot read is **uncertain** (`ShellRisk.uncertain`, with the
reason) and rated the highest risk it could be: a program name computed when it runs
(`$(echo rm) -rf /`, backticks, `"${a[@]}"`, `rm${IFS}-rf${IFS}/`, `$CMD`), a script
built by the outer shell's expansions (`sh -c "$X"`, `eval "$(...)"`), decoded or
generated text run as a program (`... | base64 -d | sh`, `source <(...)`,
`printf 'r\\155' | sh`, `xargs sh`) are destructive (they could be `rm -rf /`), or a
system install when the code comes from the network (`curl ... | sh`, which asks
everywhere); code given to an interpreter (`python -c`, `perl -e`, `node -e`, `ruby -e`,
`php -r`, a here-doc piped to `python3`) is as risky as what its text mentions; text that
cannot be parsed is uncertain too. The engine never allows an uncertain command without
a person. `ShellRisk.writes` lists the paths the command writes or removes, for the
engine's protected paths.

This classifies risk to decide whom to ask; it is a risk estimate over a parse, not a
security boundary. Scripts on disk and programs tiller does not know are opaque to it.
The boundary is the sandbox (`bwrap`, DESIGN §11) the command runs in.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, replace
from typing import Final

from ._risk import RiskClass
from ._shell_argv import (
    BOOM,
    PROC,
    READ,
    SHELL,
    SYS,
    Nested,
    Outcome,
    command_in_variable,
    dangerous_assignment,
)
from ._shell_braces import expand_braces
from ._shell_commands import CommandRisk, classify_argv
from ._shell_parse import parse_script
from ._shell_paths import Env, Verdict, chdir, write_verdict
from ._shell_programs import code_risk, is_shell
from ._shell_syntax import (
    ASSIGNMENT,
    MAX_DEPTH,
    Command,
    Script,
    Substitution,
    Word,
)
from ._shell_tree import Parsed, parse_tree, read_tree

__all__ = ["ShellPart", "ShellRisk", "classify_command"]

_EXCERPT: Final = 120
_ECHOES: Final = frozenset({"echo", "printf"})
_DELETERS: Final = frozenset({"rm", "unlink", "rmdir", "shred", "truncate", "srm", "wipe"})
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
    uncertain: str | None = None


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
    #: Why tiller cannot tell what the command does (a computed program name, code given
    #: to an interpreter, decoded text run as a script, text it could not parse), or
    #: `None`. The risk is then the highest it could be; the engine never allows it
    #: without a person.
    uncertain: str | None = None
    #: The paths it writes, removes or changes, as written and seen from the workspace
    #: root (`cd .git && echo > config` writes `.git/config`), for the protected paths.
    writes: tuple[str, ...] = ()

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
        self.writes: list[str] = []

    def script(self, source: str, depth: int, env: Env | None = None) -> RiskClass:
        """Classify `source` as a script run in `env`; returns the highest risk of its
        parts."""
        env = env or self.env
        first = len(self.parts)
        if depth > MAX_DEPTH:
            self._fault(source, f"scripts are nested more than {MAX_DEPTH} deep")
            return SHELL
        tree = parse_tree(source)
        parsed = parse_script(source, tree, depth)
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
        self._second_reading(tree, source, first, parsed.error is None)
        return max((p.risk for p in self.parts[first:]), key=_rank, default=READ)

    def _second_reading(self, tree: Parsed, source: str, first: int, read: bool) -> None:
        """What bash's grammar (`_shell_tree`) sees that the reading above did not: text
        it cannot read, and program names computed when the command runs."""
        reading = read_tree(tree)
        if reading.error is not None and read:
            reason = f"{reading.error}, so what bash runs is not known for sure"
            self.parts.append(ShellPart(_excerpt(source), SHELL, reason, uncertain=reason))
        if any(part.uncertain for part in self.parts[first:]):
            return
        for name in reading.computed:
            reason = f"runs a program whose name is computed when it runs (`{name}`)"
            why = f"{reason}: it could be anything, `rm -rf /` included"
            self.parts.append(ShellPart(_excerpt(source), BOOM, why, uncertain=reason))

    def _fault(self, source: str, error: str) -> None:
        self.parsed = False
        reason = f"could not be parsed ({error}), so it may do anything"
        self.parts.append(ShellPart(_excerpt(source), SHELL, reason, uncertain=reason))

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
        argv, computed = _argv(command.words, known)
        index = len(self.parts)
        network_fed = fetched.at_least(RiskClass.NETWORK)
        risk = self._classified(command, argv, computed, depth, env, network_fed=network_fed)
        result = Outcome(risk.risk, risk.reason, uncertain=risk.uncertain)
        self.writes.extend(risk.writes)
        network_code = risk.runs_code and fetched.at_least(RiskClass.NETWORK)
        if network_code and risk.uncertain is not None and risk.reason == risk.uncertain:
            # Code from the network is a system install (it asks in every mode, as an
            # installer piped to `sh` does), not the destructive a guess would give.
            result = Outcome(SYS, "runs code fetched from the network", uncertain=risk.uncertain)
        for assignment in command.assignments:
            result.raise_to(dangerous_assignment(assignment.value))
            stored = command_in_variable(assignment.value)
            if stored is not None:
                # (`GIT_PAGER='…' git log`: the pager is a command line git runs.)
                verdict = code_risk("a command stored in a variable", stored)
                result.unsure(verdict.risk, verdict.reason)
        if not command.words:
            _remember(command.assignments, known)
        elif argv[:1] and argv[0] in _DECLARING:
            _remember([w for w in command.words[1:] if ASSIGNMENT.match(w.raw)], known)
        for redirect in command.redirects:
            if redirect.writes:
                result.raise_to(write_verdict(redirect.target.value, env))
        if command.background:
            result.raise_to(Verdict(PROC, "runs in the background"))
        if command.repeats and computed and argv and posixpath.basename(argv[0]) in _DELETERS:
            # `for f in *; do rm "$f"; done`, `find | while read f; do rm "$f"; done`.
            result.raise_to(
                Verdict(BOOM, f"removes a path that changes on every pass of a loop (`{argv[0]}`)")
            )
        if argv and argv[0] in command.functions and (command.in_pipeline or command.background):
            result.raise_to(
                Verdict(BOOM, f"a fork bomb: `{argv[0]}` keeps starting copies of itself")
            )
        if risk.runs_code and fetched.at_least(RiskClass.NETWORK):
            result.raise_to(Verdict(SYS, "runs code fetched from the network"))
        if risk.reads_script:
            reader = risk.command[0] if risk.command else ""
            result.raise_to(self._stdin_script(command, earlier, depth, env, reader))
        self.writes.extend(result.writes)
        text = command.text or " ".join(argv)
        self.parts.insert(
            index,
            ShellPart(text, result.risk, result.reason, " ".join(risk.command), result.uncertain),
        )
        return _Stage(command, result.risk, argv)

    def _classified(
        self,
        command: Command,
        argv: list[str],
        computed: list[str],
        depth: int,
        env: Env,
        *,
        network_fed: bool,
    ) -> CommandRisk:
        """The command's own risk, with the scripts it runs classified as parts after it."""
        if command.kind == "test":
            return CommandRisk(READ, "tests a condition", ("[[",))
        if command.kind == "arith":
            return CommandRisk(READ, "does arithmetic", ("((",))
        if not argv:
            what = "sets shell variables" if command.assignments else "only opens files"
            return CommandRisk(READ, what, ())
        risk = classify_argv(argv, env)
        self._nested(risk.nested, depth, env, computed, network_fed)
        return risk

    def _nested(
        self,
        nested: tuple[Nested, ...],
        depth: int,
        env: Env,
        computed: tuple[str, ...] | list[str] = (),
        network_fed: bool = False,
    ) -> None:
        for item in nested:
            if item.script is not None:
                built = [value for value in computed if value and value in item.script]
                if built:
                    # `sh -c "echo $X"`, `eval "$(...)"`: the script is what the outer
                    # shell expands, so its text is only known when it runs.
                    reason = f"runs a script built when it runs (`{_excerpt(built[0])}`)"
                    rated, why = (
                        (SYS, "runs code fetched from the network")
                        if network_fed
                        else (BOOM, f"{reason}, which could be `rm -rf /`")
                    )
                    part = ShellPart(_excerpt(item.script), rated, why, uncertain=reason)
                    self.parts.append(part)
                    continue
                self.script(item.script, depth + 1, env)
                continue
            risk = classify_argv(item.argv, item.env or env)
            self.writes.extend(risk.writes)
            index = len(self.parts)
            if depth < MAX_DEPTH:
                self._nested(risk.nested, depth + 1, item.env or env)
            text = " ".join(item.argv)
            self.parts.insert(
                index,
                ShellPart(text, risk.risk, risk.reason, " ".join(risk.command), risk.uncertain),
            )

    def _stdin_script(
        self, command: Command, earlier: list[_Stage], depth: int, env: Env, reader: str
    ) -> Outcome | None:
        """A shell or interpreter reading its program from stdin: classify the program
        when it is written here (a here-doc, a here-string, `echo ... |`); what comes
        down a pipe from the network is code from the network, and anything else (a
        decoder, a file, a program's output) is a program tiller cannot read."""
        for redirect in command.redirects:
            if redirect.heredoc is not None:
                return self._literal_program(redirect.heredoc.body, reader, depth, env)
            if redirect.op == "<<<":
                if redirect.target.dynamic:
                    return _unreadable(f"runs `{_excerpt(redirect.target.raw)}` as a program")
                return self._literal_program(redirect.target.value, reader, depth, env)
            if redirect.op == "<":
                return None  # `sh < script.sh`: runs a file, like `sh script.sh`
        feeding = [stage for stage in earlier if stage.command.stage < command.stage]
        for stage in feeding:
            if stage.risk.at_least(RiskClass.NETWORK) and stage.risk is not PROC:
                return Outcome(
                    SYS,
                    f"runs code piped from `{_excerpt(stage.command.text)}`",
                    uncertain="runs code fetched from the network",
                )
        if not feeding:
            # `tee >(sh)`, a bare `bash`: whatever arrives on its input is the program.
            return _unreadable("runs what arrives on its input as a program")
        last = feeding[-1]
        if last.argv[:1] and last.argv[0] in _ECHOES and _literal_echo(last):
            return self._literal_program(" ".join(last.argv[1:]), reader, depth, env)
        if last.argv == ["cat"]:
            return self._stdin_script(last.command, [], depth, env, reader)
        return _unreadable(f"runs what `{_excerpt(last.command.text)}` prints as a program")

    def _literal_program(self, text: str, reader: str, depth: int, env: Env) -> Outcome | None:
        """A program written out in the command: a script is classified as parts of its
        own; other languages' code is read as text (`code_risk`)."""
        if is_shell(reader):
            self.script(text, depth + 1, env)
            return None
        verdict = code_risk(reader, text)
        return Outcome(verdict.risk, verdict.reason, uncertain=verdict.reason)


def _unreadable(reason: str) -> Outcome:
    why = f"{reason}: tiller cannot read it, and it could be `rm -rf /`"
    return Outcome(BOOM, why, uncertain=why)


def _literal_echo(stage: _Stage) -> bool:
    """Whether an `echo`/`printf` prints exactly its words: no expansion, no escapes
    (`printf 'r\\155'` is `rm`), no options."""
    words = stage.command.words[1:]
    if any(word.dynamic or word.substitutions for word in words):
        return False
    values = [word.value for word in words]
    if stage.argv[0] == "printf":
        return not any("\\" in v or "%" in v for v in values)
    return not any("\\" in v or v.startswith("-") for v in values)


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


def _argv(words: list[Word], known: dict[str, str]) -> tuple[list[str], list[str]]:
    """The words' values, with `$NAME` replaced where the script set NAME to a literal,
    and the values of the words that are still only known when the command runs."""
    argv: list[str] = []
    computed: list[str] = []
    for word in words:
        value = known.get(word.variable) if word.variable is not None else None
        if value is None:
            argv.extend(expand_braces(word.value) if word.braces else [word.value])
            if word.dynamic:
                computed.append(word.value)
        elif word.split:
            argv.extend(value.split())
        else:
            argv.append(value)
    return argv, computed


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
    uncertain = next((part.uncertain for part in parts if part.uncertain), None)
    if uncertain is not None:
        plain = None
    return ShellRisk(
        risk, parts, reason, plain, walker.parsed, uncertain, tuple(dict.fromkeys(walker.writes))
    )
