"""The lexer under `_shell_syntax`: shell text to tokens (words, operators,
redirections, arithmetic), with the substitutions inside each word found and kept as
source text.

Quotes, escapes, line continuations, comments, `$(...)`, backticks, `<(...)`, `${...}`,
`$((...))`, `$'...'`, here-docs and array assignments are read the way bash reads them,
closely enough to find where each word and substitution ends. A nested lexer reads each
substitution to find its closing paren. What cannot be read raises `ShellSyntaxError`
(the parser turns it into `Script.error`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "ASSIGNMENT",
    "MAX_DEPTH",
    "HereDoc",
    "Lexer",
    "Redirect",
    "ShellSyntaxError",
    "Substitution",
    "Token",
    "Word",
]

MAX_DEPTH: Final = 12

_OPERATORS: Final = (";;&", "&&", "||", ";;", ";&", "|&", ";", "|", "&", "(", ")")
_REDIRECTS: Final = ("<<<", "<<-", "&>>", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "<", ">")
_WORD_END: Final = frozenset(" \t\n;&|()<>")
_FD_REDIRECT: Final = re.compile(r"(\d+)(?=[<>])")
ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]|[?$!#@*\-_]")
_VARIABLE: Final = r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))"
_BARE_VAR: Final = re.compile(_VARIABLE)
_QUOTED_VAR: Final = re.compile(f'"{_VARIABLE}"')
_BRACE_EXPANSION: Final = re.compile(r"\{[^}]*(,|\.\.)[^{]*\}")
_ANSI_ESCAPES: Final = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
    "e": "\x1b",
    "E": "\x1b",
}

# Keywords after which the next word is in command position.
_SKIPPED_KEYWORDS: Final = frozenset({"!", "if", "then", "else", "elif", "do", "while", "until"})
# After these operators the next word is in command position and `((` is arithmetic.
_COMMAND_START_OPS: Final = frozenset(
    {";", "\n", "&&", "||", "|", "|&", "&", "(", ";;", ";&", ";;&"}
)
_ARITH_AFTER_WORDS: Final = frozenset(_SKIPPED_KEYWORDS | {"for", "{"})


class ShellSyntaxError(Exception):
    """The text cannot be read on; `parse_script` carries the message into `Script.error`."""


@dataclass(frozen=True, slots=True)
class Substitution:
    """A script bash runs to expand a word: `$(...)` or backticks (`command`), `<(...)`
    or `>(...)` (`process`). `source` is the script's text, unescaped."""

    kind: Literal["command", "process"]
    source: str


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word. `value` has quotes and escapes removed but expansions kept as
    written (`$HOME/x`, `$(pwd)`); `dynamic` says it holds an expansion, so its real value
    is only known when it runs; `quoted` that some of it was quoted or escaped.
    `variable` names the parameter when the whole word is `$NAME`, `${NAME}` or
    `"$NAME"` (`split`: unquoted, so its value is split into words); `braces` that it
    has an unquoted brace expansion (`{a,b}`, `{1..3}`)."""

    raw: str
    value: str
    dynamic: bool = False
    quoted: bool = False
    substitutions: tuple[Substitution, ...] = ()
    variable: str | None = None
    split: bool = False
    braces: bool = False


@dataclass(slots=True)
class HereDoc:
    """A here-document's body; `expands` when its delimiter was unquoted (then the body's
    substitutions run, and are listed)."""

    delimiter: str
    strip_tabs: bool
    expands: bool
    body: str = ""
    substitutions: tuple[Substitution, ...] = ()


@dataclass(frozen=True, slots=True)
class Redirect:
    """`fd` (or `None` for the default) `op` `target`, e.g. `2` `>` `err.log`. A here-doc
    (`<<`, `<<-`) has `heredoc` and the delimiter as `target`."""

    op: str
    target: Word
    fd: str | None = None
    heredoc: HereDoc | None = None

    @property
    def writes(self) -> bool:
        """Whether it opens `target` for writing (a duplication like `2>&1` does not)."""
        if self.op in (">&", "<&"):
            return not (self.target.value.isdigit() or self.target.value == "-")
        return self.op in (">", ">>", ">|", "&>", "&>>", "<>")


@dataclass(frozen=True, slots=True)
class Token:
    kind: Literal["word", "op", "redir", "arith"]
    text: str
    start: int
    end: int
    word: Word | None = None
    redirect: Redirect | None = None


def _ansi_escape(text: str, pos: int) -> tuple[str, int]:
    """Decode the `$'...'` escape whose letter is at `pos`: (the text, the next index)."""
    letter = text[pos]
    if letter in _ANSI_ESCAPES:
        return _ANSI_ESCAPES[letter], pos + 1
    digits = {"x": (2, 16), "u": (4, 16), "U": (8, 16)}.get(letter)
    start = pos + 1
    if digits is None and letter in "01234567":
        digits, start = (3, 8), pos
    if digits is not None:
        size, base = digits
        allowed = "0123456789abcdefABCDEF"[: base if base == 8 else 22]
        end = start
        while end < len(text) and end - start < size and text[end] in allowed:
            end += 1
        if end > start:
            return chr(min(int(text[start:end], base), 0x10FFFF)), end
    if letter == "c" and pos + 1 < len(text):
        return chr(ord(text[pos + 1]) & 0x1F), pos + 2
    return "\\" + letter, pos + 1


class _WordBuilder:
    __slots__ = ("braces", "dynamic", "quoted", "subs", "value")

    def __init__(self) -> None:
        self.value: list[str] = []
        self.dynamic = False
        self.quoted = False
        self.subs: list[Substitution] = []
        self.braces = ""  # the unquoted `{`, `,`, `.` and `}` in order


class Lexer:
    """Turns source text into tokens; reads substitutions with a nested lexer to find
    where they end."""

    def __init__(self, text: str, pos: int = 0, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise ShellSyntaxError(f"substitutions are nested more than {MAX_DEPTH} deep")
        self.text = text
        self.pos = pos
        self.depth = depth
        self.tokens: list[Token] = []
        self.pending: list[HereDoc] = []
        self.parens = 0
        self.cases = 0

    # ── the token loop ────────────────────────────────────────────────────────────

    def run(self, *, until_paren: bool = False) -> list[Token]:
        """Tokens up to the end (or, with `until_paren`, up to the `)` closing the
        substitution this lexer started in; `pos` is then just after it)."""
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t":
                self.pos += 1
            elif text.startswith("\\\n", self.pos):
                self.pos += 2
            elif char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end == -1 else end
            elif char == "\n":
                self._emit("op", "\n", self.pos + 1)
                self._read_heredocs()
            elif text.startswith("((", self.pos) and self._at_command_start():
                self._arith()
            elif char in "<>" and text.startswith("(", self.pos + 1):
                self._word_token()
            elif text.startswith("&>", self.pos):
                self._redirect(None, self.pos)
            elif (fd := _FD_REDIRECT.match(text, self.pos)) is not None:
                self.pos = fd.end()
                self._redirect(fd.group(1), fd.start())
            elif (op := self._match(_OPERATORS)) is not None:
                if self._operator(op, until_paren=until_paren):
                    return self.tokens
            elif self._match(_REDIRECTS) is not None:
                self._redirect(None, self.pos)
            else:
                self._word_token()
        if until_paren:
            raise ShellSyntaxError("a `$(` or `(` is never closed")
        self._read_heredocs()
        return self.tokens

    def _operator(self, op: str, *, until_paren: bool) -> bool:
        """Emit the operator `op`, counting parentheses; True (and `pos` past it) when it is
        the `)` that closes this lexer's substitution (emitted as no token)."""
        if op == ")" and until_paren and self.parens == 0 and self.cases == 0:
            self.pos += 1
            return True
        if op == "(":
            self.parens += 1
        elif op == ")" and self.parens > 0:
            self.parens -= 1
        self._emit("op", op, self.pos + len(op))
        return False

    def _emit(self, kind: Literal["word", "op", "redir", "arith"], text: str, end: int) -> None:
        self.tokens.append(Token(kind, text, self.pos, end))
        self.pos = end

    def _match(self, options: tuple[str, ...]) -> str | None:
        for option in options:
            if self.text.startswith(option, self.pos):
                return option
        return None

    def _at_command_start(self) -> bool:
        if not self.tokens:
            return True
        last = self.tokens[-1]
        if last.kind == "op":
            return last.text in _COMMAND_START_OPS
        return last.kind == "word" and last.word is not None and last.word.raw in _ARITH_AFTER_WORDS

    def _word_token(self) -> None:
        start = self.pos
        word = self._read_word()
        if self.pos == start:  # cannot happen: every other character starts a token
            raise ShellSyntaxError(f"unexpected {self.text[start]!r}")
        if not word.quoted and word.raw == "case":
            self.cases += 1
        elif not word.quoted and word.raw == "esac" and self.cases > 0:
            self.cases -= 1
        self.tokens.append(Token("word", word.raw, start, self.pos, word=word))

    def _arith(self) -> None:
        """`((...))` at the start of a command. If no `))` closes it, bash reads it as
        two subshells (`((ls) )`), and so does this: the first `(` becomes an operator."""
        start = self.pos
        try:
            end = self._arith_end(self.pos + 2)
        except ShellSyntaxError:
            self.parens += 1
            self._emit("op", "(", self.pos + 1)
            return
        body = self.text[start + 2 : end - 2]
        subs = Lexer(body, 0, self.depth).scan_expansions()
        word = Word(self.text[start:end], body, dynamic=True, substitutions=tuple(subs))
        self.tokens.append(Token("arith", "((", start, end, word=word))
        self.pos = end

    def _arith_end_or_none(self, pos: int) -> int | None:
        try:
            return self._arith_end(pos)
        except ShellSyntaxError:
            return None

    def _arith_end(self, pos: int) -> int:
        """The index just past the `))` closing an arithmetic body that starts at `pos`."""
        depth = 0
        text = self.text
        while pos < len(text):
            char = text[pos]
            if char == "(":
                depth += 1
            elif char == ")":
                if depth == 0 and text.startswith("))", pos):
                    return pos + 2
                depth -= 1
                if depth < 0:
                    break
            pos += 1
        raise ShellSyntaxError("a `((` is never closed")

    # ── redirections and here-docs ────────────────────────────────────────────────

    def _redirect(self, fd: str | None, start: int) -> None:
        op = self._match(_REDIRECTS)
        if op is None:  # digits before `<(` or such: read them as a word instead
            self.pos = start
            self._word_token()
            return
        self.pos += len(op)
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1
        rest = self.text[self.pos : self.pos + 2]
        if not rest or (rest[0] in _WORD_END and rest not in ("<(", ">(")):
            raise ShellSyntaxError(f"the redirection `{op}` has no target")
        target = self._read_word()
        heredoc = None
        if op in ("<<", "<<-"):
            heredoc = HereDoc(target.value, op == "<<-", expands=not target.quoted)
            self.pending.append(heredoc)
        redirect = Redirect(op, target, fd, heredoc)
        self.tokens.append(
            Token("redir", op, start, self.pos, redirect=redirect),
        )

    def _read_heredocs(self) -> None:
        text = self.text
        for heredoc in self.pending:
            lines: list[str] = []
            while self.pos < len(text):
                end = text.find("\n", self.pos)
                line = text[self.pos : len(text) if end == -1 else end]
                self.pos = len(text) if end == -1 else end + 1
                if (line.lstrip("\t") if heredoc.strip_tabs else line) == heredoc.delimiter:
                    break
                lines.append(line)
            heredoc.body = "\n".join(lines)
            if heredoc.expands:
                subs = Lexer(heredoc.body, 0, self.depth).scan_expansions()
                heredoc.substitutions = tuple(subs)
        self.pending.clear()

    # ── words ─────────────────────────────────────────────────────────────────────

    def _read_word(self) -> Word:
        text = self.text
        start = self.pos
        built = _WordBuilder()
        while self.pos < len(text):
            char = text[self.pos]
            if char in "<>" and text.startswith("(", self.pos + 1):
                self._process_substitution(built)
                continue
            if char == "(" and not built.quoted and ASSIGNMENT.fullmatch("".join(built.value)):
                self._array(built)
                continue
            if char in _WORD_END:
                break
            if char == "\\":
                self._escape(built)
            elif char == "'":
                end = text.find("'", self.pos + 1)
                if end == -1:
                    raise ShellSyntaxError("a single quote (') is never closed")
                built.value.append(text[self.pos + 1 : end])
                built.quoted = True
                self.pos = end + 1
            elif char == '"':
                self.pos += 1
                built.quoted = True
                self._double_quoted(built)
            elif char == "$":
                self._dollar(built, quoted=False)
            elif char == "`":
                self._backtick(built)
            else:
                if char in "{,.}":
                    built.braces += char
                built.value.append(char)
                self.pos += 1
        raw = text[start : self.pos]
        bare = _BARE_VAR.fullmatch(raw)
        whole = bare or _QUOTED_VAR.fullmatch(raw)
        return Word(
            raw,
            "".join(built.value),
            dynamic=built.dynamic,
            quoted=built.quoted,
            substitutions=tuple(built.subs),
            variable=(whole.group(1) or whole.group(2)) if whole else None,
            split=bare is not None,
            braces=_BRACE_EXPANSION.search(built.braces) is not None,
        )

    def _escape(self, built: _WordBuilder) -> None:
        if self.pos + 1 >= len(self.text):
            built.value.append("\\")
            self.pos += 1
            return
        following = self.text[self.pos + 1]
        if following != "\n":
            built.value.append(following)
            built.quoted = True
        self.pos += 2

    def _double_quoted(self, built: _WordBuilder) -> None:
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char == '"':
                self.pos += 1
                return
            if char == "\\" and self.pos + 1 < len(text):
                following = text[self.pos + 1]
                if following in '$`"\\':
                    built.value.append(following)
                elif following != "\n":
                    built.value.append(char + following)
                self.pos += 2
            elif char == "$":
                self._dollar(built, quoted=True)
            elif char == "`":
                self._backtick(built)
            else:
                built.value.append(char)
                self.pos += 1
        raise ShellSyntaxError('a double quote (") is never closed')

    def _dollar(self, built: _WordBuilder, *, quoted: bool) -> None:
        text = self.text
        start = self.pos
        following = text[start + 1] if start + 1 < len(text) else ""
        arith_end = self._arith_end_or_none(start + 3) if text.startswith("$((", start) else None
        if arith_end is not None:
            self.pos = arith_end
            body = text[start + 3 : self.pos - 2]
            built.subs.extend(Lexer(body, 0, self.depth).scan_expansions())
        elif following == "(":  # `$(...)`, or a `$((` that bash reads as `$( (...) )`
            sub = Lexer(text, start + 2, self.depth + 1)
            sub.run(until_paren=True)
            built.subs.append(Substitution("command", text[start + 2 : sub.pos - 1]))
            self.pos = sub.pos
        elif following == "{":
            self.pos = self._brace_end(start + 2, built)
        elif following == "'" and not quoted:
            self._ansi_c(built)
            return
        elif following == '"' and not quoted:
            self.pos += 2
            built.quoted = True
            self._double_quoted(built)
            return
        elif (name := _NAME.match(text, start + 1)) is not None:
            self.pos = name.end()
        else:
            built.value.append("$")
            self.pos += 1
            return
        built.value.append(text[start : self.pos])
        built.dynamic = True

    def _brace_end(self, pos: int, built: _WordBuilder) -> int:
        """The index just past the `}` closing a `${` whose body starts at `pos`,
        collecting the substitutions inside."""
        text = self.text
        depth = 1
        while pos < len(text):
            char = text[pos]
            if char == "\\":
                pos += 2
                continue
            if char in "$`":
                inner = Lexer(text, pos, self.depth)
                scratch = _WordBuilder()
                if char == "`":
                    inner._backtick(scratch)
                else:
                    inner._dollar(scratch, quoted=True)
                built.subs.extend(scratch.subs)
                pos = inner.pos
                continue
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return pos + 1
            pos += 1
        raise ShellSyntaxError("a `${` is never closed")

    def _ansi_c(self, built: _WordBuilder) -> None:
        text = self.text
        pos = self.pos + 2
        while pos < len(text):
            char = text[pos]
            if char == "'":
                self.pos = pos + 1
                built.quoted = True
                return
            if char == "\\" and pos + 1 < len(text):
                decoded, pos = _ansi_escape(text, pos + 1)
                built.value.append(decoded)
                continue
            built.value.append(char)
            pos += 1
        raise ShellSyntaxError("a `$'` string is never closed")

    def _backtick(self, built: _WordBuilder) -> None:
        text = self.text
        start = self.pos
        pos = start + 1
        inner: list[str] = []
        while pos < len(text):
            char = text[pos]
            if char == "\\" and pos + 1 < len(text):
                following = text[pos + 1]
                inner.append(following if following in "`\\$" else char + following)
                pos += 2
                continue
            if char == "`":
                self.pos = pos + 1
                built.subs.append(Substitution("command", "".join(inner)))
                built.value.append(text[start : self.pos])
                built.dynamic = True
                return
            inner.append(char)
            pos += 1
        raise ShellSyntaxError("a backtick (`) is never closed")

    def _process_substitution(self, built: _WordBuilder) -> None:
        start = self.pos
        sub = Lexer(self.text, start + 2, self.depth + 1)
        sub.run(until_paren=True)
        built.subs.append(Substitution("process", self.text[start + 2 : sub.pos - 1]))
        built.value.append(self.text[start : sub.pos])
        built.dynamic = True
        self.pos = sub.pos

    def _array(self, built: _WordBuilder) -> None:
        """`name=(a b c)`: the elements become part of the assignment's word."""
        sub = Lexer(self.text, self.pos + 1, self.depth)
        tokens = sub.run(until_paren=True)
        for token in tokens:
            if token.word is not None:
                built.subs.extend(token.word.substitutions)
                built.dynamic = built.dynamic or token.word.dynamic
        built.value.append(self.text[self.pos : sub.pos])
        self.pos = sub.pos

    def scan_expansions(self) -> list[Substitution]:
        """The substitutions in text read as a here-doc body or an arithmetic body
        (quotes are not special there)."""
        found = _WordBuilder()
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "\\":
                self.pos += 2
            elif char == "$":
                self._dollar(found, quoted=True)
            elif char == "`":
                self._backtick(found)
            else:
                self.pos += 1
        return found.subs
