"""Scorers of the final text: `ExactMatch`, `Includes`, `RegexMatch`.

They read `outcome.text` (the run's final answer as the model wrote it) and nothing else:
a structured answer is scored by `JsonMatch` or `NumericMatch`, which read
`outcome.output`. What they compare with is their own target when given one, else the
case's `expected`, which must then be text (for `Includes`, a string or a list of
strings; for `RegexMatch`, a pattern): a case whose `expected` is a number or a mapping
gets an error score saying which scorer reads it, never a silent `str()` of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Literal

import regex

from ..errors import UsageError
from ._outcome import CaseOutcome
from ._score import Score
from ._scorer_support import NO_TARGET, check_scorer_name, quote, scorer_error, target_of

__all__ = ["ExactMatch", "Includes", "RegexMatch"]

_WHITESPACE: Final = regex.compile(r"\s+")
#: How long one match may take: a pattern that backtracks catastrophically on an agent's
#: answer fails that case instead of hanging the eval.
_MATCH_SECONDS: Final = 1.0


def _normalized(text: str, *, ignore_case: bool, ignore_whitespace: bool) -> str:
    if ignore_whitespace:
        text = _WHITESPACE.sub(" ", text).strip()
    return text.casefold() if ignore_case else text


def _not_text(outcome: CaseOutcome, scorer: str, wants: str) -> Score:
    kind = type(outcome.case.expected).__name__
    return scorer_error(
        f"the {scorer!r} scorer compares the final text with {wants}, and case "
        f"{outcome.case.id!r} expects a {kind}: score structured answers with JsonMatch "
        "or NumericMatch, or give this scorer its own target"
    )


class ExactMatch:
    """Passes when the final text equals the target (the case's `expected` unless
    `target` is given). `ignore_case` compares case-folded text; `ignore_whitespace`
    strips both ends and collapses every run of whitespace to one space."""

    __slots__ = ("ignore_case", "ignore_whitespace", "name", "target")

    def __init__(
        self,
        target: str | None = NO_TARGET,
        *,
        ignore_case: bool = False,
        ignore_whitespace: bool = False,
        name: str = "exact",
    ) -> None:
        if target is not NO_TARGET and not isinstance(target, str):
            raise UsageError(f"ExactMatch's target must be a string, not {target!r}")
        self.target = target
        self.ignore_case = ignore_case
        self.ignore_whitespace = ignore_whitespace
        self.name = check_scorer_name(name)

    async def score(self, outcome: CaseOutcome) -> Score:
        target = target_of(outcome, self.target, self.name)
        if isinstance(target, Score):
            return target
        if not isinstance(target, str):
            return _not_text(outcome, self.name, "a string")
        got = _normalized(
            outcome.text, ignore_case=self.ignore_case, ignore_whitespace=self.ignore_whitespace
        )
        want = _normalized(
            target, ignore_case=self.ignore_case, ignore_whitespace=self.ignore_whitespace
        )
        if got == want:
            return Score.of(True, f"the text equals the expected {quote(target)}")
        return Score.of(False, f"expected {quote(target)}, got {quote(outcome.text)}")


class Includes:
    """Scores which of the target strings the final text contains (the case's
    `expected`, a string or a list of strings, unless `target` is given).

    `require="all"` (the default): the value is the fraction found, and the case passes
    when every one is. `require="any"`: one found is a pass (1.0), none a fail (0.0).
    `ignore_case` compares case-folded text."""

    __slots__ = ("ignore_case", "name", "require", "target")

    def __init__(
        self,
        target: str | Sequence[str] | None = NO_TARGET,
        *,
        require: Literal["all", "any"] = "all",
        ignore_case: bool = False,
        name: str = "includes",
    ) -> None:
        if require not in ("all", "any"):
            raise UsageError(f"Includes(require=) is 'all' or 'any', not {require!r}")
        self.target: tuple[str, ...] | None = None
        if target is not NO_TARGET:
            strings = _strings(target)
            if strings is None:
                raise UsageError(
                    f"Includes' target must be a string or a list of strings, not {target!r}"
                )
            self.target = strings
        self.require = require
        self.ignore_case = ignore_case
        self.name = check_scorer_name(name)

    async def score(self, outcome: CaseOutcome) -> Score:
        target = target_of(outcome, self.target, self.name)
        if isinstance(target, Score):
            return target
        wanted = _strings(target)
        if wanted is None:
            return _not_text(outcome, self.name, "a string or a list of strings")
        if not wanted:
            return scorer_error(
                f"case {outcome.case.id!r}: the {self.name!r} scorer has no strings to "
                "look for (the list is empty)"
            )
        text = outcome.text.casefold() if self.ignore_case else outcome.text
        found = [s for s in wanted if (s.casefold() if self.ignore_case else s) in text]
        missing = [s for s in wanted if s not in found]
        if self.require == "any":
            if found:
                return Score.of(True, f"the text includes {quote(found[0])}")
            return Score.of(False, f"the text includes none of {_listed(wanted)}")
        if not missing:
            return Score.of(True, f"the text includes all of {_listed(wanted)}")
        return Score(
            len(found) / len(wanted),
            f"found {len(found)} of {len(wanted)}; missing {_listed(missing)}",
            passed=False,
        )


def _strings(value: Any) -> tuple[str, ...] | None:
    """`value` as a tuple of strings, or None when it is not a string or a list of them."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(s, str) for s in value):
        return tuple(value)
    return None


def _listed(strings: Sequence[str]) -> str:
    return ", ".join(quote(s) for s in strings)


class RegexMatch:
    """Passes when the pattern matches the final text: anywhere in it (`search`, the
    default), or the whole of it (`fullmatch=True`). The pattern is `pattern`, compiled
    once here (one that does not compile is a `UsageError`), else each case's
    `expected` (compiled once per distinct pattern; one that does not compile is that
    case's error score). `regex` package syntax; `ignore_case` adds IGNORECASE. A match
    that takes over a second fails the case (catastrophic backtracking), not the eval."""

    __slots__ = ("_compiled", "flags", "fullmatch", "name", "pattern")

    def __init__(
        self,
        pattern: str | None = NO_TARGET,
        *,
        fullmatch: bool = False,
        ignore_case: bool = False,
        name: str = "regex",
    ) -> None:
        self.flags = regex.IGNORECASE if ignore_case else 0
        self.fullmatch = fullmatch
        self.name = check_scorer_name(name)
        self._compiled: dict[str, regex.Pattern[str]] = {}
        self.pattern = pattern
        if pattern is not NO_TARGET:
            if not isinstance(pattern, str):
                raise UsageError(f"RegexMatch's pattern must be a string, not {pattern!r}")
            try:
                self._compile(pattern)
            except regex.error as exc:
                raise UsageError(
                    f"RegexMatch: the pattern {pattern!r} does not compile: {exc}"
                ) from exc

    def _compile(self, pattern: str) -> regex.Pattern[str]:
        compiled = self._compiled.get(pattern)
        if compiled is None:
            compiled = regex.compile(pattern, self.flags)
            self._compiled[pattern] = compiled
        return compiled

    async def score(self, outcome: CaseOutcome) -> Score:
        pattern = target_of(outcome, self.pattern, self.name)
        if isinstance(pattern, Score):
            return pattern
        if not isinstance(pattern, str):
            return _not_text(outcome, self.name, "a pattern (a string)")
        try:
            compiled = self._compile(pattern)
        except regex.error as exc:
            return scorer_error(
                f"case {outcome.case.id!r}: the expected pattern {pattern!r} does not "
                f"compile: {exc}"
            )
        how = "the whole text" if self.fullmatch else "the text"
        try:
            if self.fullmatch:
                found = compiled.fullmatch(outcome.text, timeout=_MATCH_SECONDS)
            else:
                found = compiled.search(outcome.text, timeout=_MATCH_SECONDS)
        except TimeoutError:
            return Score.of(
                False, f"/{pattern}/ took over {_MATCH_SECONDS:g}s on {how}: counted as no match"
            )
        if found is None:
            return Score.of(False, f"/{pattern}/ does not match {how} {quote(outcome.text)}")
        return Score.of(True, f"/{pattern}/ matches {how} at {quote(found.group(0))}")
