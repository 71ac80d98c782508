"""A lexer and parser for the bash a model writes, just deep enough to classify its risk.

The classifier takes its structure from bash's grammar (`_shell_parse`); this reader
is its fallback where tree-sitter-bash reports an error (broken text, or valid bash it
misreads, such as `{rm,-rf,/}` as a command), and its lexer reads every word.

`parse_script(source)` splits a command line into the simple commands bash would run
(`Command`: its assignments, words and redirections, where it sits in a pipeline, whether
it runs in the background, which function body it is in) and keeps, on every word, the
command and process substitutions inside it (`$(...)`, backticks, `<(...)`, `>(...)`) as
source text, so the classifier can classify them as scripts of their own. Quotes,
escapes, line continuations, comments, `${...}`, `$((...))`, ANSI-C strings, here-docs
(whose bodies are scanned for substitutions unless the delimiter is quoted), array
assignments, subshells, groups, function definitions and the compound keywords (`if`,
`for`, `while`, `case`, `[[ ]]`, `(( ))`) are understood well enough not to be mistaken
for commands.

It is not an interpreter: nothing is expanded or run, aliases and functions defined
elsewhere are unknown. It never raises on any text: what it cannot read (an unclosed
quote or paren, a dangling `|`) is reported in `Script.error`, with the commands read up
to that point, so the classifier can fail closed without losing what it did read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from ._shell_lexer import (
    ASSIGNMENT,
    MAX_DEPTH,
    HereDoc,
    Lexer,
    Redirect,
    ShellSyntaxError,
    Substitution,
    Token,
    Word,
)

__all__ = [
    "ASSIGNMENT",
    "MAX_DEPTH",
    "Command",
    "HereDoc",
    "Redirect",
    "Script",
    "Substitution",
    "Word",
    "parse_script",
]

_SKIPPED_KEYWORDS: Final = frozenset({"!", "if", "then", "else", "elif", "do", "while", "until"})
_CLOSING_KEYWORDS: Final = frozenset({"fi", "done"})
_OPENING_KEYWORDS: Final = frozenset({"if", "while", "until", "for", "select", "case", "{"})


@dataclass(slots=True)
class Command:
    """One simple command, `[[ ]]` test (`kind="test"`) or `(( ))` (`kind="arith"`).

    `text` is its source; `pipeline` numbers the pipeline it belongs to and `stage` its
    place in it; `functions` names the function bodies it is written in and `subshells`
    numbers the `( )` subshells around it, outermost first (a `cd` in one ends with it).
    """

    text: str
    words: list[Word] = field(default_factory=list)
    assignments: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    pipeline: int = 0
    stage: int = 0
    piped_out: bool = False
    background: bool = False
    functions: tuple[str, ...] = ()
    subshells: tuple[int, ...] = ()
    kind: Literal["simple", "test", "arith"] = "simple"
    #: Inside a `for`, `while`, `until` or `select` body: it runs once per pass.
    repeats: bool = False

    @property
    def in_pipeline(self) -> bool:
        return self.stage > 0 or self.piped_out

    def all_words(self) -> list[Word]:
        return [*self.assignments, *self.words, *(r.target for r in self.redirects)]


@dataclass(slots=True)
class Script:
    """What `parse_script` read: the commands in order, the words that belong to no
    command (a `for` list, a `case` subject, a function's name), whether anything beyond
    one simple command was written (`compound`: an operator, a group, a keyword, a
    function), and `error` when the text could not be read to its end."""

    source: str
    commands: list[Command] = field(default_factory=list)
    loose: list[Word] = field(default_factory=list)
    compound: bool = False
    error: str | None = None


# ── the parser ────────────────────────────────────────────────────────────────────


class _Parser:
    """Groups tokens into commands, tracking pipelines, groups, function bodies and the
    compound keywords."""

    def __init__(self, script: Script, tokens: list[Token]) -> None:
        self.script = script
        self.tokens = tokens
        self.index = 0
        self.current: Command | None = None
        self.current_start = 0
        self.current_end = 0
        self.groups: list[tuple[str, str | None, int]] = []  # (opener, function, number)
        self.subshells = 0
        self.pipeline = 0
        self.stage = 0
        self.pending_function: str | None = None
        # The words after `for`/`select` (until `do`), `case` (until `in`), `function`.
        self.header: Literal["", "for", "case", "function"] = ""
        self.cases = 0  # open `case` blocks
        self.in_patterns = False  # reading a `case` pattern list (up to its `)`)
        self.needs_command = False  # after `|`, `&&`, `||`: a command must follow
        # Where each open block (group, subshell, if, loop, case) began in the command
        # list, and where the last one to close began: an `&` or `|` after a block
        # applies to every command in it.
        self.blocks: list[int] = []
        self.closed_block: int | None = None

    @property
    def functions(self) -> tuple[str, ...]:
        return tuple(name for _, name, _ in self.groups if name is not None)

    @property
    def scopes(self) -> tuple[int, ...]:
        return tuple(number for opener, _, number in self.groups if opener == "(")

    def run(self) -> None:
        while self.index < len(self.tokens):
            token = self.tokens[self.index]
            self.index += 1
            if token.kind == "word":
                assert token.word is not None
                self._word(token, token.word)
            elif token.kind == "redir":
                assert token.redirect is not None
                self._command(token, after_block=True).redirects.append(token.redirect)
                self._touch(token)
            elif token.kind == "arith":
                assert token.word is not None
                self._end_command()
                self.script.compound = True
                command = self._command(token)
                command.kind = "arith"
                command.words.append(token.word)
                self._end_command()
            else:
                self._operator(token)
        self._end_command()
        if self.needs_command:
            raise ShellSyntaxError("the command ends with an operator that needs another command")
        if self.groups:
            raise ShellSyntaxError(f"a `{self.groups[-1][0]}` is never closed")

    # ── words ─────────────────────────────────────────────────────────────────────

    def _word(self, token: Token, word: Word) -> None:
        if self.header:
            self._header_word(word)
            return
        if self.in_patterns:
            if word.raw == "esac" and not word.quoted:
                self._close_case()
            else:
                self.script.loose.append(word)
            return
        at_start = self.current is None or not (
            self.current.words or self.current.assignments or self.current.redirects
        )
        if (
            at_start
            and not word.quoted
            and (self._keyword(token, word) or self._function_definition(word))
        ):
            return
        if (
            (self.current is None or not self.current.words)
            and not word.quoted
            and ASSIGNMENT.match(word.raw)
        ):
            self._command(token).assignments.append(word)
        else:
            self._command(token).words.append(word)
        self._touch(token)

    def _keyword(self, token: Token, word: Word) -> bool:
        name = word.raw
        if name in _OPENING_KEYWORDS:
            self._open_block()
        elif name in _CLOSING_KEYWORDS or name == "}":
            self._close_block()
        if name in _SKIPPED_KEYWORDS or name in _CLOSING_KEYWORDS:
            self.script.compound = True
            self.needs_command = name in _SKIPPED_KEYWORDS
            return True
        if name == "{":
            self.script.compound = True
            self.groups.append(("{", self.pending_function, 0))
            self.pending_function = None
            self.needs_command = True
            return True
        if name == "}":
            if not self.groups or self.groups[-1][0] != "{":
                raise ShellSyntaxError("a `}` closes nothing")
            self.groups.pop()
            self.needs_command = False
            return True
        if name in ("for", "select", "case", "function"):
            self.script.compound = True
            self.header = "case" if name == "case" else "function" if name == "function" else "for"
            return True
        if name == "esac" and self.cases:
            self._close_case()
            return True
        if name == "[[":
            self._test(token)
            return True
        return False

    def _open_block(self) -> None:
        self._end_command()
        self.blocks.append(len(self.script.commands))
        self.closed_block = None

    def _close_block(self) -> None:
        self._end_command()
        self.closed_block = self.blocks.pop() if self.blocks else None

    def _close_case(self) -> None:
        self._close_block()
        self.cases -= 1
        self.in_patterns = False
        self.needs_command = False

    def _header_word(self, word: Word) -> None:
        """Words after `for`, `select`, `case` and `function`, which are not commands."""
        self.script.loose.append(word)
        if self.header == "function":
            self.pending_function = word.value
            self.header = ""
            if self._peek_ops("(", ")"):
                self.index += 2
        elif self.header == "case" and word.raw == "in" and not word.quoted:
            self.header = ""
            self.cases += 1
            self.in_patterns = True
        elif self.header == "for" and word.raw == "do" and not word.quoted:
            self.header = ""

    def _function_definition(self, word: Word) -> bool:
        if self.current is not None or not self._peek_ops("(", ")"):
            return False
        self.script.compound = True
        self.script.loose.append(word)
        self.pending_function = word.value
        self.index += 2
        return True

    def _test(self, token: Token) -> None:
        """`[[ ... ]]`: its `<`, `>`, `&&`, `||` are comparisons, not operators."""
        self.script.compound = True
        command = self._command(token)
        command.kind = "test"
        command.words.append(Word("[[", "[["))
        while self.index < len(self.tokens):
            inner = self.tokens[self.index]
            self.index += 1
            self._touch(inner)
            if inner.word is not None:
                if inner.word.raw == "]]":
                    return
                command.words.append(inner.word)
            elif inner.redirect is not None:
                command.words.append(inner.redirect.target)
        raise ShellSyntaxError("a `[[` is never closed")

    def _peek_ops(self, *ops: str) -> bool:
        ahead = self.tokens[self.index : self.index + len(ops)]
        return len(ahead) == len(ops) and all(
            t.kind == "op" and t.text == op for t, op in zip(ahead, ops, strict=True)
        )

    # ── operators ─────────────────────────────────────────────────────────────────

    def _operator(self, token: Token) -> None:
        op = token.text
        if self.header and op in (";", "\n"):
            return  # `for x in a b; do`: the list ends, `do` follows
        if self.in_patterns:
            if op == ")":
                self.in_patterns = False
            return  # `(`, `|` and newlines between patterns
        if op in ("(", ")"):
            self._paren(op)
            return
        had_command = self.current is not None or self._after_compound()
        self._end_command()
        if op in ("|", "|&"):
            if not had_command:
                raise ShellSyntaxError(f"`{op}` has no command before it")
            self.script.compound = True
            self._mark_piped()
            self.stage += 1
            self.needs_command = True
            self.closed_block = None
            return
        if op != "\n" and not had_command and op not in (";;", ";&", ";;&"):
            raise ShellSyntaxError(f"`{op}` has no command before it")
        if op == "&":
            self._mark_background()
        if op in (";;", ";&", ";;&"):
            if not self.cases:
                raise ShellSyntaxError(f"`{op}` is only valid inside a `case`")
            self.in_patterns = True
        if op not in (";", "\n"):
            self.script.compound = True
        self.needs_command = op in ("&&", "||")
        self.pipeline += 1
        self.stage = 0
        self.closed_block = None

    def _paren(self, op: str) -> None:
        self._end_command()
        self.script.compound = True
        if op == "(":
            self._open_block()
            self.subshells += 1
            self.groups.append(("(", self.pending_function, self.subshells))
            self.pending_function = None
            self.needs_command = True
            return
        if not self.groups or self.groups[-1][0] != "(":
            raise ShellSyntaxError("a `)` closes nothing")
        self._close_block()
        self.groups.pop()
        self.needs_command = False

    def _after_compound(self) -> bool:
        """Whether the token before the operator closed a group or compound command
        (`{ a; } | b`, `fi && c`), which counts as a command before it."""
        before = self.tokens[self.index - 2] if self.index >= 2 else None
        if before is None:
            return False
        if before.kind == "op":
            return before.text == ")"
        return before.kind in ("word", "arith") and before.text in ("}", "fi", "done", "esac", "((")

    def _last_stage(self) -> list[Command]:
        """The commands the operator just read applies to: the block that closed right
        before it (all of them join this pipeline stage), or the last command."""
        commands = self.script.commands
        if self.closed_block is not None:
            block = commands[self.closed_block :]
            for command in block:
                command.pipeline, command.stage = self.pipeline, self.stage
            return block
        return commands[-1:] if commands and commands[-1].pipeline == self.pipeline else []

    def _mark_piped(self) -> None:
        for command in self._last_stage():
            command.piped_out = True

    def _mark_background(self) -> None:
        stage = self._last_stage()
        for command in self.script.commands:
            if command.pipeline == self.pipeline or command in stage:
                command.background = True

    # ── commands ──────────────────────────────────────────────────────────────────

    def _command(self, token: Token, *, after_block: bool = False) -> Command:
        if self.current is None:
            if not after_block:  # `{ ...; } > out`: the redirection belongs to the block
                self.closed_block = None
            self.current = Command(
                "",
                pipeline=self.pipeline,
                stage=self.stage,
                functions=self.functions,
                subshells=self.scopes,
            )
            self.current_start = token.start
            self.current_end = token.end
            self.needs_command = False
        return self.current

    def _touch(self, token: Token) -> None:
        self.current_end = max(self.current_end, token.end)

    def _end_command(self) -> None:
        if self.current is None:
            return
        self.current.text = self.script.source[self.current_start : self.current_end].strip()
        self.script.commands.append(self.current)
        self.current = None


def parse_script(source: str, depth: int = 0) -> Script:
    """Read `source` as a bash script (see the module docstring). Never raises."""
    script = Script(source)
    lexer: Lexer | None = None
    try:
        lexer = Lexer(source, 0, depth)
        tokens = lexer.run()
    except ShellSyntaxError as error:
        script.error = str(error)
        tokens = lexer.tokens if lexer is not None else []
    except RecursionError:
        script.error = "the command nests too deeply to read"
        tokens = lexer.tokens if lexer is not None else []
    parser = _Parser(script, tokens)
    try:
        parser.run()
    except ShellSyntaxError as error:
        parser._end_command()
        script.error = script.error or str(error)
    return script
