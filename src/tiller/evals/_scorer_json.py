"""`JsonMatch`: a structured answer compared with the expected one, key by key, and
optionally checked against a JSON schema."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs are published
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]
from pydantic import BaseModel

from ..errors import UsageError
from ._json_values import (
    JsonParseError,
    json_data,
    json_equal,
    json_subset,
    keys_listed,
    parse_json_text,
    short_json,
)
from ._outcome import CaseOutcome
from ._score import Score
from ._scorer_support import NO_TARGET, check_scorer_name, scorer_error

__all__ = ["JsonMatch"]


class JsonMatch:
    """Compares the answer as JSON with the expected value (the case's `expected`, or
    `target`; an expected *string* is parsed as JSON, as a CSV row gives it).

    The answer is `outcome.output` when the run produced a structured one (a pydantic
    model is dumped), else the final text parsed as JSON, a ```json fenced block
    tolerated. Text that is not JSON fails the case, saying where it stops being JSON.

    When both are objects the score is partial: the fraction of compared keys whose
    values match, and a pass only when all do. The keys compared are `keys` when given;
    else with `subset=True` the expected object's keys (extra keys in the answer are
    fine, and nested objects match as subsets too); else every key of either (an extra
    key or a missing one counts against). Anything else (lists, scalars) is one value:
    equal or not. Equality is JSON's: `1` equals `1.0`, `true` never equals `1`.

    `schema` (a JSON schema, or a pydantic model class whose schema is used) is checked
    first: an answer that does not fit fails, with the first error (by its path in the
    answer) in the explanation. With a schema and no expected value, fitting it passes.
    A schema that is itself invalid is a `UsageError` here.
    """

    __slots__ = ("_validator", "keys", "name", "schema", "subset", "target")

    def __init__(
        self,
        target: Any = NO_TARGET,
        *,
        subset: bool = False,
        keys: Sequence[str] | None = None,
        schema: Mapping[str, Any] | type[BaseModel] | None = None,
        name: str = "json_match",
    ) -> None:
        self.target = json_data(target)
        self.subset = subset
        if keys is not None and (
            isinstance(keys, str) or not keys or not all(isinstance(k, str) for k in keys)
        ):
            raise UsageError(f"JsonMatch(keys=) is a non-empty list of key names, not {keys!r}")
        self.keys = tuple(keys) if keys is not None else None
        self.name = check_scorer_name(name)
        self.schema = _schema_of(schema)
        self._validator = _validator(self.schema) if self.schema is not None else None

    async def score(self, outcome: CaseOutcome) -> Score:
        if outcome.output is not None:
            answer = json_data(outcome.output)
        else:
            try:
                answer = parse_json_text(outcome.text)
            except JsonParseError as exc:
                return Score.of(False, f"the answer is {exc}")
        if self._validator is not None:
            misfit = _first_error(self._validator, answer)
            if misfit is not None:
                return Score.of(False, f"the answer does not fit the schema: {misfit}")
        expected = self._expected(outcome)
        if isinstance(expected, Score):
            return expected
        if expected is NO_TARGET:
            return Score.of(True, "the answer fits the schema")
        if isinstance(expected, dict):
            return self._compare_objects(expected, answer)
        if self.keys is not None:
            return scorer_error(
                f"case {outcome.case.id!r}: JsonMatch(keys=) compares objects, and the "
                f"expected value is {short_json(expected)}"
            )
        same = json_subset(expected, answer) if self.subset else json_equal(expected, answer)
        if same:
            return Score.of(True, f"the answer equals {short_json(expected)}")
        return Score.of(False, f"expected {short_json(expected)}, got {short_json(answer)}")

    def _expected(self, outcome: CaseOutcome) -> Any:
        """The expected JSON value; `NO_TARGET` when only the schema is checked; an
        error score when there is nothing to compare with or it is not JSON."""
        if self.target is not NO_TARGET:
            return self.target
        expected = outcome.case.expected
        if expected is None:
            if self._validator is not None:
                return NO_TARGET
            return scorer_error(
                f"case {outcome.case.id!r} has no expected answer, which the {self.name!r} "
                "scorer compares with: give the case `expected`, the scorer a target, or "
                "a schema to check the answer against"
            )
        if isinstance(expected, str):
            try:
                return parse_json_text(expected)
            except JsonParseError as exc:
                return scorer_error(f"case {outcome.case.id!r}: the expected value is {exc}")
        return json_data(expected)

    def _compare_objects(self, expected: dict[str, Any], answer: Any) -> Score:
        if not isinstance(answer, dict):
            return Score.of(False, f"expected an object, got {short_json(answer)}")
        if self.keys is not None:
            keys = list(self.keys)
        elif self.subset:
            keys = list(expected)
        else:
            keys = list(dict.fromkeys([*expected, *answer]))
        if not keys:
            same = answer == {} or self.subset
            return Score.of(same, "both are empty objects" if same else "expected {}")
        missing = [k for k in keys if k in expected and k not in answer]
        extra = [k for k in keys if k not in expected and k in answer]
        differ = [
            k
            for k in keys
            if k in expected
            and k in answer
            and not (json_subset if self.subset else json_equal)(expected[k], answer[k])
        ]
        # A key named in `keys` that neither has matches (both lack it).
        matched = len(keys) - len(missing) - len(extra) - len(differ)
        if matched == len(keys):
            return Score.of(True, f"all {len(keys)} compared keys match")
        problems = []
        if differ:
            problems.append(
                "differ: "
                + "; ".join(
                    f"{k!r} (expected {short_json(expected[k], 60)}, got "
                    f"{short_json(answer[k], 60)})"
                    for k in differ
                )
            )
        if missing:
            problems.append(f"missing: {keys_listed(missing)}")
        if extra:
            problems.append(f"not expected: {keys_listed(extra)}")
        return Score(
            matched / len(keys),
            f"{matched} of {len(keys)} keys match; {'; '.join(problems)}",
            passed=False,
        )


def _schema_of(schema: Mapping[str, Any] | type[BaseModel] | None) -> dict[str, Any] | None:
    if schema is None:
        return None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_json_schema()
    if isinstance(schema, Mapping):
        return json_data(schema)  # type: ignore[no-any-return]
    raise UsageError(
        f"JsonMatch(schema=) is a JSON schema (a mapping) or a pydantic model class, not {schema!r}"
    )


def _validator(schema: dict[str, Any]) -> Any:  # a jsonschema `Validator`
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise UsageError(f"JsonMatch(schema=) is not a valid JSON schema: {exc.message}") from exc
    return cls(schema)


def _first_error(validator: Any, answer: Any) -> str | None:
    """The first schema error by its place in the answer, as `at $.a.b: message`."""
    errors = sorted(validator.iter_errors(answer), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return None
    first = errors[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.absolute_path)
    return f"at ${where}: {first.message}"
