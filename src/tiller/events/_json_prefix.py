"""Whether a growing text can still become one JSON value, and the shortest way to end it.

A chunked tool call (`TOOL_CALL_CHUNK`) has no end event: its arguments are judged when
the next other event arrives, whatever it is, and a client flags them if they are not
JSON. So a run that must stop while a chunked call's arguments are half written (a
`RUN_ERROR`) can end validly only by first completing them; and that is possible only if
every chunk kept them a prefix of some JSON text. `JsonPrefix` follows the text chunk by
chunk (work proportional to the chunk, state proportional to the nesting depth), refuses
a chunk after which no completion exists, and names the completion: strings and
containers closed, a pending value or key filled with `null` / `""`.

Strict RFC 8259: no `NaN`, no comments, no trailing commas, no control characters in
strings — what every client's `JSON.parse` accepts.
"""

from __future__ import annotations

from typing import Final

__all__ = ["JsonPrefix"]

_WS: Final = frozenset(" \t\n\r")
_DIGITS: Final = frozenset("0123456789")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_ESCAPES: Final = frozenset('"\\/bfnrtu')
_LITERALS: Final = {"t": "rue", "f": "alse", "n": "ull"}

# Where the scanner is, between or inside tokens.
_VALUE: Final = 0  # a value must come (start, after ':' or after ',' in an array)
_FIRST_VALUE: Final = 1  # after '[': a value or ']'
_FIRST_KEY: Final = 2  # after '{': a key or '}'
_KEY: Final = 3  # after ',' in an object: a key
_COLON: Final = 4  # after a key
_AFTER: Final = 5  # after a value: ',' or the container's close (or, at top, the end)
_STRING: Final = 6
_ESCAPE: Final = 7  # after a backslash in a string
_UNICODE: Final = 8  # inside \\uXXXX, `pending` hex digits to go
_LITERAL: Final = 9  # inside true/false/null, `pending` holds the rest
# Numbers: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
_MINUS: Final = 10
_ZERO: Final = 11
_INT: Final = 12
_DOT: Final = 13
_FRACTION: Final = 14
_E: Final = 15
_E_SIGN: Final = 16
_EXPONENT: Final = 17

_NUMBER_DONE: Final = frozenset({_ZERO, _INT, _FRACTION, _EXPONENT})
_NUMBER_NEEDS_DIGIT: Final = frozenset({_MINUS, _DOT, _E, _E_SIGN})


def _is_high_surrogate(hex_digits: str) -> bool:
    return 0xD800 <= int(hex_digits, 16) <= 0xDBFF


def _is_low_surrogate(hex_digits: str) -> bool:
    return 0xDC00 <= int(hex_digits, 16) <= 0xDFFF


class JsonPrefix:
    """The scanner's state after some text; `advanced(text)` gives the state after more."""

    __slots__ = ("_high", "_in_key", "_pending", "_stack", "_state")

    def __init__(self) -> None:
        self._stack: list[str] = []  # "{" or "[" per open container
        self._state = _VALUE
        self._in_key = False  # the string being read is an object key
        self._pending = ""  # a literal's rest, or the hex digits of a \\u escape so far
        # The string's last character is a \\u escape of a high surrogate: a low one must
        # follow, or strict parsers refuse the text.
        self._high = False

    def _copy(self) -> JsonPrefix:
        other = JsonPrefix.__new__(JsonPrefix)
        other._stack = list(self._stack)
        other._state = self._state
        other._in_key = self._in_key
        other._pending = self._pending
        other._high = self._high
        return other

    @property
    def is_empty(self) -> bool:
        """Nothing but whitespace so far (no arguments: a no-argument call is fine)."""
        return self._state == _VALUE and not self._stack

    def advanced(self, text: str) -> JsonPrefix | None:
        """The state after `text` too, or None if no JSON text starts with what we have
        plus `text`. This state is left as it was either way."""
        if not text:
            return self
        other = self._copy()
        for char in text:
            if not other._step(char):
                return None
        return other

    def completion(self) -> str:
        """The shortest suffix that makes the text so far one JSON value ("" if it is);
        whitespace alone becomes `{}` (arguments are an object)."""
        if self.is_empty:
            return "{}"
        parts: list[str] = []
        state = self._state
        if state == _ESCAPE:
            # After a high surrogate the escape becomes the low one; otherwise an escaped
            # backslash. Then the closing quote.
            parts.append('udc00"' if self._high else '\\"')
            state = _COLON if self._in_key else _AFTER
        elif state == _UNICODE:
            low = "dc00"[len(self._pending) :]
            if self._high and _is_low_surrogate(self._pending + low):
                code = self._pending + low  # the pair's second half
            else:
                code = self._pending + "0" * (4 - len(self._pending))
            parts.append(code[len(self._pending) :])
            if _is_high_surrogate(code):
                parts.append("\\udc00")
            parts.append('"')
            state = _COLON if self._in_key else _AFTER
        elif state == _STRING:
            parts.append('\\udc00"' if self._high else '"')
            state = _COLON if self._in_key else _AFTER
        elif state == _LITERAL:
            parts.append(self._pending)
            state = _AFTER
        elif state in _NUMBER_NEEDS_DIGIT:
            parts.append("0")
            state = _AFTER
        elif state in _NUMBER_DONE:
            state = _AFTER
        if state == _KEY:
            parts.append('"":null')
        elif state == _COLON:
            parts.append(":null")
        elif state == _VALUE:
            parts.append("null")
        for container in reversed(self._stack):
            parts.append("}" if container == "{" else "]")
        return "".join(parts)

    # ── one character ────────────────────────────────────────────────────────────

    def _step(self, char: str) -> bool:
        state = self._state
        if state == _STRING:
            if char == "\\":
                self._state = _ESCAPE  # `_high` stays: this may be the low surrogate
                return True
            self._high = False
            if char == '"':
                self._state = _COLON if self._in_key else _AFTER
            elif char < " ":
                return False  # a raw control character
            return True
        if state == _ESCAPE:
            return self._escape(char)
        if state == _UNICODE:
            return self._unicode(char)
        if state == _LITERAL:
            if char != self._pending[0]:
                return False
            self._pending = self._pending[1:]
            if not self._pending:
                self._state = _AFTER
            return True
        if state >= _MINUS:
            if self._number(char):
                return True
            self._state = _AFTER  # the number ended; the character belongs to what follows
            return state in _NUMBER_DONE and self._structure(char)
        return self._structure(char)

    def _escape(self, char: str) -> bool:
        """The character after a backslash in a string."""
        if char not in _ESCAPES:
            return False
        if char == "u":
            self._state, self._pending = _UNICODE, ""
        else:
            self._state, self._high = _STRING, False
        return True

    def _unicode(self, char: str) -> bool:
        """One of the four hex digits of a `\\u` escape."""
        if char not in _HEX:
            return False
        self._pending += char
        if len(self._pending) == 4:
            self._state = _STRING
            self._high = _is_high_surrogate(self._pending)
        return True

    def _number(self, char: str) -> bool:
        """Consume `char` as part of the number being read; False if it is not."""
        state = self._state
        digit = char in _DIGITS
        if state == _MINUS:
            if not digit:
                return False
            self._state = _ZERO if char == "0" else _INT
        elif state in (_ZERO, _INT):
            if digit and state == _INT:
                pass
            elif char == ".":
                self._state = _DOT
            elif char in "eE":
                self._state = _E
            else:
                return False
        elif state in (_DOT, _FRACTION):
            if digit:
                self._state = _FRACTION
            elif char in "eE" and state == _FRACTION:
                self._state = _E
            else:
                return False
        elif state == _E:
            if digit:
                self._state = _EXPONENT
            elif char in "+-":
                self._state = _E_SIGN
            else:
                return False
        elif not digit:  # _E_SIGN, _EXPONENT
            return False
        else:
            self._state = _EXPONENT
        return True

    def _structure(self, char: str) -> bool:
        if char in _WS:
            return True
        state = self._state
        if state in (_VALUE, _FIRST_VALUE):
            if state == _FIRST_VALUE and char == "]":
                return self._close("[")
            return self._value(char)
        if state in (_FIRST_KEY, _KEY):
            if state == _FIRST_KEY and char == "}":
                return self._close("{")
            if char != '"':
                return False
            self._state, self._in_key = _STRING, True
            return True
        if state == _COLON:
            if char != ":":
                return False
            self._state = _VALUE
            return True
        # _AFTER
        if not self._stack:
            return False  # one value only
        top = self._stack[-1]
        if char == ",":
            self._state = _KEY if top == "{" else _VALUE
            return True
        return self._close(top) if char == ("}" if top == "{" else "]") else False

    def _value(self, char: str) -> bool:
        if char == "{":
            self._stack.append("{")
            self._state = _FIRST_KEY
        elif char == "[":
            self._stack.append("[")
            self._state = _FIRST_VALUE
        elif char == '"':
            self._state, self._in_key = _STRING, False
        elif char == "-":
            self._state = _MINUS
        elif char in _DIGITS:
            self._state = _ZERO if char == "0" else _INT
        elif char in _LITERALS:
            self._state, self._pending = _LITERAL, _LITERALS[char]
        else:
            return False
        return True

    def _close(self, container: str) -> bool:
        if not self._stack or self._stack[-1] != container:
            return False
        self._stack.pop()
        self._state = _AFTER
        return True
