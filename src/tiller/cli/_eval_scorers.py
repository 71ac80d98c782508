"""`--scorer` on the command line (`tiller eval rescore ID --scorer ...`): a built-in scorer
by name, with at most one argument, or a scorer of your own by reference.

| `--scorer`          | scorer                                                     |
|---------------------|------------------------------------------------------------|
| `exact`             | `ExactMatch()`: the text equals the case's `expected`      |
| `exact=TEXT`        | `ExactMatch("TEXT")`                                       |
| `includes`          | `Includes()`: the text includes the case's `expected`      |
| `includes=TEXT`     | `Includes("TEXT")`                                         |
| `regex`             | `RegexMatch()`: the case's `expected` is the pattern       |
| `regex=PATTERN`     | `RegexMatch("PATTERN")` (searched anywhere in the text)    |
| `json`              | `JsonMatch()`: the answer equals the expected JSON         |
| `json=subset`       | `JsonMatch(subset=True)`: the expected keys match          |
| `numeric`           | `NumericMatch()`: the answer's number equals the expected  |
| `numeric=TOL`       | `NumericMatch(abs_tol=TOL)`                                |
| `module:attr`       | a `Scorer` object, or a function or class called with no   |
|                     | arguments that returns one (`myapp.scorers:strict`)        |

Everything after the first `=` is the argument, as written (`regex=a=b` is the pattern
`a=b`). A scorer keys its scores by its name (`exact`, `includes`, `regex`, `json_match`,
`numeric`, or your scorer's own), and a rescore replaces the scores of that name: two
`--scorer`s with the same name are refused, as an eval refuses them.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import UsageError
from ._held import allow_cwd_imports

if TYPE_CHECKING:
    from ..evals import Scorer

__all__ = ["BUILT_IN_SCORERS", "parse_scorers"]

#: The built-in names, each with what its argument means (for help and errors).
BUILT_IN_SCORERS = {
    "exact": "exact[=TEXT]",
    "includes": "includes[=TEXT]",
    "regex": "regex[=PATTERN]",
    "json": "json[=subset]",
    "numeric": "numeric[=ABS_TOLERANCE]",
}


def parse_scorers(texts: Sequence[str]) -> list[Scorer]:
    """The scorers `texts` name (see the module docstring); `UsageError` saying what to
    write for the first one that names none."""
    if not texts:
        raise UsageError(f"give at least one --scorer: {_known()}, or module:attr")
    return [parse_scorer(text) for text in texts]


def parse_scorer(text: str) -> Scorer:
    """One `--scorer` value as a scorer."""
    name, has_argument, argument = text.partition("=")
    name = name.strip()
    if name in BUILT_IN_SCORERS:
        return _built_in(name, argument if has_argument else None, text)
    if not has_argument and ":" in text:
        return _referenced(text)
    raise UsageError(f"--scorer {text!r}: no such scorer; use {_known()}, or module:attr")


def _known() -> str:
    return ", ".join(BUILT_IN_SCORERS.values())


def _built_in(name: str, argument: str | None, text: str) -> Scorer:
    from ..evals import ExactMatch, Includes, JsonMatch, NumericMatch, RegexMatch

    if argument == "":
        raise UsageError(
            f"--scorer {text!r}: nothing after '='; write {BUILT_IN_SCORERS[name]} "
            f"(without '=' it compares with each case's expected value)"
        )
    builders: dict[str, Callable[[str | None], Scorer]] = {
        "exact": lambda arg: ExactMatch() if arg is None else ExactMatch(arg),
        "includes": lambda arg: Includes() if arg is None else Includes(arg),
        "regex": lambda arg: RegexMatch() if arg is None else RegexMatch(arg),
        "json": lambda arg: JsonMatch(subset=_subset(arg)),
        "numeric": lambda arg: NumericMatch(abs_tol=_tolerance(arg)),
    }
    try:
        return builders[name](argument)
    except UsageError as exc:
        raise UsageError(f"--scorer {text!r}: {exc}") from None


def _subset(argument: str | None) -> bool:
    if argument is None:
        return False
    if argument == "subset":
        return True
    raise UsageError(
        "json takes no argument, or 'subset' (json=subset: the expected object's keys "
        "must match, extra keys in the answer are fine)"
    )


def _tolerance(argument: str | None) -> float:
    if argument is None:
        return 0.0
    try:
        tolerance = float(argument)
    except ValueError:
        tolerance = math.nan
    if not math.isfinite(tolerance) or tolerance < 0:
        raise UsageError(
            "the tolerance is a number >= 0 (numeric=0.01: within 0.01 of the expected value)"
        )
    return tolerance


def _referenced(reference: str) -> Scorer:
    from ..evals import Scorer

    module_name, _, attribute = reference.rpartition(":")
    if not module_name or not attribute:
        raise UsageError(f"--scorer {reference!r}: write module:attr (myapp.scorers:strict)")
    allow_cwd_imports()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"--scorer {reference!r}: cannot import {module_name!r} ({exc}); is it on "
            "PYTHONPATH or in the current directory?"
        ) from None
    except Exception as exc:
        raise UsageError(
            f"--scorer {reference!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        found: object = getattr(module, attribute)
    except AttributeError:
        raise UsageError(f"--scorer {reference!r}: {module_name!r} has no {attribute!r}") from None
    # A class has `name` and `score` too (as attributes): it is a factory, not a scorer.
    if isinstance(found, type) or (not isinstance(found, Scorer) and callable(found)):
        try:
            found = found()
        except Exception as exc:
            raise UsageError(
                f"--scorer {reference!r}: calling it with no arguments failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(found, Scorer):
        raise UsageError(
            f"--scorer {reference!r} is a {type(found).__name__}, not a scorer (an object "
            "with a `name` and an async `score(outcome)`), nor a function returning one"
        )
    return found
