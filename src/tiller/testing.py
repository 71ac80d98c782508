"""Helpers for testing agents and streams offline. Public API, like `trio.testing`.

- `assert_valid_stream(events)` (alias `assert_valid_events`) checks a stream two ways:
  every event, encoded, validates against the `ag-ui-protocol` 1.0 models with no unknown
  fields, and the whole stream passes `ag-ui-validate` with zero warnings. Both checkers
  come with tiller's `dev` extra. `assert_valid_agui(events, max_warnings=...)` is
  `ag-ui-validate`'s own check alone, taking tiller events too.
- `run_scripted(agent, turns, prompt)` runs an agent on a `ScriptedModel` and returns its
  result and every event; `run_capture(agent, capture, prompt)` replays a capture (a
  `Capture` or a `.json` / `.jsonl` file) through `ReplayModel`, raising `Divergence` if the
  agent no longer does what was recorded. Both check the stream by default.
- `Sequencer` forces an order on what concurrent tasks do, so a race is a test, not luck.
- `eval_cases(dataset)` makes an eval a pytest test: one test per case (`@eval_cases(
  "cases.yaml") async def test_agent(case): ...`); in it, `run_case(agent, case, scorers)`
  runs and scores that one case as the eval runner does, and `assert_case_passed(result)`
  fails with the explanations of the scorers that failed it.

Nothing here imports pytest, or `tiller.evals`, until it is used.

The pytest plugin (`tiller.pytest_plugin`, registered as the `tiller` pytest11 entry point)
wraps these as fixtures and adds record mode (`--tiller-record`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import os
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import orjson

from .capture import Capture
from .errors import UsageError
from .events import Event, encode_json
from .loop import Agent, RunOptions, RunResult
from .model import Model, ModelRequest, ScriptedModel, StreamEvent
from .model.replay import Divergence, ReplayModel
from .state import StopCause

if TYPE_CHECKING:
    from .evals import Case, CaseResult, Dataset, Scorer
    from .loop import Budget
    from .model.scripted import TurnFunction, TurnLike
    from .policy import Approver

__all__ = [
    "AgentOrFactory",
    "Sequencer",
    "assert_case_passed",
    "assert_valid_agui",
    "assert_valid_events",
    "assert_valid_stream",
    "eval_cases",
    "load_capture_file",
    "run_capture",
    "run_case",
    "run_scripted",
    "wire_events",
]

#: An `Agent` (run with its model swapped for the test's), or `(model) -> Agent`.
AgentOrFactory: TypeAlias = Agent | Callable[[Model], Agent]


def wire_events(events: Iterable[Event | dict[str, Any]]) -> list[dict[str, Any]]:
    """Events as the JSON objects a client receives (decoded from the real encoding)."""
    return [e if isinstance(e, dict) else orjson.loads(encode_json(e)) for e in events]


def assert_valid_stream(
    events: Iterable[Event | dict[str, Any]], *, features: list[str] | None = None
) -> list[dict[str, Any]]:
    """Fail with a readable message unless the stream is valid AG-UI 1.0; return it as JSON."""
    try:
        from ag_ui.core import Event as AgUiEvent
        from ag_ui_validate.pytest_plugin import assert_valid_agui
        from pydantic import TypeAdapter, ValidationError
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise UsageError(
            "assert_valid_stream needs the dev extra: pip install 'tiller[dev]'"
        ) from exc
    wire = wire_events(events)
    adapter: TypeAdapter[Any] = TypeAdapter(AgUiEvent)
    for index, obj in enumerate(wire):
        try:
            model = adapter.validate_python(obj)
        except ValidationError as exc:
            raise AssertionError(
                f"event {index} does not fit the AG-UI 1.0 model: {obj}\n{exc}"
            ) from exc
        if model.model_extra:
            raise AssertionError(
                f"event {index} has fields AG-UI does not know: {model.model_extra}"
            )
        if any(value is None for key, value in obj.items() if key not in ("snapshot", "value")):
            raise AssertionError(f"event {index} carries an explicit null: {obj}")
    assert_valid_agui(wire, features=features, max_warnings=0)
    return wire


#: The name the issue and the docs use; the same check.
assert_valid_events = assert_valid_stream


def assert_valid_agui(
    events: str | Iterable[Event | dict[str, Any]],
    *,
    features: list[str] | None = None,
    severity_overrides: dict[str, str] | None = None,
    max_warnings: int | None = None,
) -> None:
    """`ag-ui-validate`'s check of a stream (`ag_ui_validate.pytest_plugin`), which fails
    with one line per rule broken: `events` are tiller `Event`s, wire dicts, or an SSE
    body as text. `max_warnings=0` fails on warnings too (`assert_valid_stream` does, and
    checks each event against the protocol's models besides)."""
    try:
        from ag_ui_validate.pytest_plugin import assert_valid_agui as validate
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise UsageError(
            "assert_valid_agui needs ag-ui-validate (tiller's dev extra): pip install 'tiller[dev]'"
        ) from exc
    received: str | list[dict[str, Any]] = (
        events if isinstance(events, str) else wire_events(events)
    )
    validate(
        received,
        features=features,
        severity_overrides=severity_overrides,
        max_warnings=max_warnings,
    )


# ── running agents offline ───────────────────────────────────────────────────────────


def agent_with_model(agent_or_factory: AgentOrFactory, model: Model) -> Agent:
    """The agent to run on `model`: a factory is called with it; an `Agent` is copied
    (shallowly: tools and settings are shared, which is safe, as an agent holds nothing
    per run) with its model replaced, so the caller's agent is left as it was."""
    if isinstance(agent_or_factory, Agent):
        agent = copy.copy(agent_or_factory)
        agent.model = model
        return agent
    return agent_or_factory(model)


async def run_scripted(
    agent_or_factory: AgentOrFactory,
    turns: Iterable[TurnLike] | TurnLike | TurnFunction | Model,
    prompt: str = "go",
    *,
    check: bool = True,
    on_event: Callable[[Event], None] | None = None,
    **run_kwargs: Any,
) -> tuple[RunResult, list[Event]]:
    """Run the agent on `ScriptedModel(turns)` (or on `turns` if it is already a model)
    and collect every event it emits.

    `run_kwargs` go to `Agent.run` (`workspace`, `approver`, `context`, `options`,
    `run_id`, ...); without `workspace` or `context` the run gets a temporary directory.
    With `check` (the default) the stream must be valid AG-UI (`assert_valid_stream`),
    since every stream a test produces should be checked (DESIGN §9).
    """
    model = turns if isinstance(turns, Model) else ScriptedModel(turns)
    agent = agent_with_model(agent_or_factory, model)
    return await _run(agent, prompt, check, on_event, run_kwargs)


def load_capture_file(path: str | Path) -> Capture:
    """A capture from a file: JSON Lines if the name ends in `.jsonl`, else JSON."""
    path = Path(path)
    data = path.read_bytes()
    return Capture.from_jsonl(data) if path.suffix == ".jsonl" else Capture.from_json(data)


async def run_capture(
    agent_or_factory: AgentOrFactory,
    capture: Capture | str | Path,
    prompt: str,
    *,
    strict: bool = True,
    allow_prompt_edits: bool = False,
    check: bool = True,
    on_event: Callable[[Event], None] | None = None,
    **run_kwargs: Any,
) -> tuple[RunResult, list[Event]]:
    """Replay `capture` offline: the agent runs on a `ReplayModel` under the capture's run
    id, so an unchanged agent emits the recorded stream, ids included.

    A divergence (the agent now sends the model something else — other tool results,
    another system prompt, tool set or output schema — or asks for more calls than were
    recorded) ends the run with an error, as in production; here it is raised as the
    `Divergence` itself, naming the step, since that is what a test wants to see.
    `strict=False` only collects the mismatches (`result` is returned; see
    `ReplayModel.mismatches`); `allow_prompt_edits=True` lets the system prompt differ.
    `prompt` must be the recorded run's prompt.
    """
    if not isinstance(capture, Capture):
        capture = load_capture_file(capture)
    model = _WatchedReplay(capture, strict=strict, allow_prompt_edits=allow_prompt_edits)
    run_kwargs.setdefault("run_id", capture.run_id)
    agent = agent_with_model(agent_or_factory, model)
    result, events = await _run(agent, prompt, False, on_event, run_kwargs)
    if model.divergence is not None:
        raise model.divergence
    if check:
        assert_valid_stream(events)
    return result, events


async def _run(
    agent: Agent,
    prompt: str,
    check: bool,
    on_event: Callable[[Event], None] | None,
    run_kwargs: dict[str, Any],
) -> tuple[RunResult, list[Event]]:
    events: list[Event] = []

    def record(event: Event) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    result = await agent.run(prompt, on_event=record, **run_kwargs)
    if check:
        assert_valid_stream(events)
    return result, events


class _WatchedReplay(ReplayModel):
    """A `ReplayModel` that keeps the divergence it raised, which the loop turns into a
    failed run, so that `run_capture` can raise the divergence itself."""

    divergence: Divergence | None = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        try:
            async for event in super().stream(request):
                yield event
        except Divergence as exc:
            self.divergence = exc
            raise


# ── ordering concurrent tasks ────────────────────────────────────────────────────────


class Sequencer:
    """Forces an order on sections of concurrent tasks, like `trio.testing.Sequencer`.

    ```python
    seq = Sequencer()

    async def worker_a():
        async with seq(1):
            ...  # runs only after worker_b's `seq(0)` block has finished

    async def worker_b():
        async with seq(0):
            ...
    ```

    `async with seq(n)` waits until the block of position `n - 1` has exited, then runs;
    position 0 runs at once. Each position is used once (`RuntimeError` otherwise). If a
    task is cancelled while waiting for its turn, the sequence is broken: every waiting and
    later `seq(...)` raises `RuntimeError` instead of hanging the test.
    """

    def __init__(self) -> None:
        self._done: dict[int, asyncio.Event] = {}
        self._claimed: set[int] = set()
        self._broken = False

    def _point(self, position: int) -> asyncio.Event:
        return self._done.setdefault(position, asyncio.Event())

    @contextlib.asynccontextmanager
    async def __call__(self, position: int) -> AsyncIterator[None]:
        if position < 0:
            raise UsageError(f"sequence positions start at 0, not {position}")
        if position in self._claimed:
            raise RuntimeError(f"sequence point {position} was already used")
        if self._broken:
            raise RuntimeError("the sequence is broken: a task was cancelled waiting its turn")
        self._claimed.add(position)
        if position > 0:
            try:
                await self._point(position - 1).wait()
            except asyncio.CancelledError:
                self._broken = True
                for event in self._done.values():
                    event.set()
                raise  # the cancel goes on; the others see a broken sequence
            if self._broken:
                raise RuntimeError("the sequence is broken: a task was cancelled waiting its turn")
        try:
            yield
        finally:
            self._point(position).set()


# ── evals as pytest tests ────────────────────────────────────────────────────────────

_Test = TypeVar("_Test", bound=Callable[..., Any])

#: The eval id `run_case` runs under: its run ids are `test:{case_id}:e0`.
_CASE_EVAL_ID = "test"
#: How many of a scorer's traceback lines a failure message shows.
_TRACEBACK_LINES = 8
#: How much of the agent's answer a failure message quotes.
_ANSWER_CHARS = 500


def eval_cases(
    cases: Dataset | Iterable[Case] | str | os.PathLike[str],
    *,
    argname: str = "case",
    tags_as_marks: bool = True,
    input_type: Any = None,
    expected_type: Any = None,
) -> Callable[[_Test], _Test]:
    """Parametrize a pytest test by an eval's cases: one test per case, its id the case's
    id (`test_agent[refund-late]`, so `-k` picks cases), the `Case` given as `argname`.

    ```python
    @eval_cases("cases.yaml")
    async def test_agent(case: Case) -> None:
        assert_case_passed(await run_case(make_agent, case, [ExactMatch()]))
    ```

    `cases` is a `tiller.evals.Dataset`, an iterable of `Case`s (their ids unique), or the
    path of a dataset file (`Dataset.load`, with `input_type`/`expected_type`); a relative
    path is relative to the test module's directory, not to wherever pytest was started.
    The file is read when the module is collected: a malformed row fails the collection
    with its file and line. With `tags_as_marks` (the default) each of a case's tags is a
    pytest mark of that name, so `-m smoke` selects the cases tagged `smoke`; register the
    tags as markers (the `markers` ini option) as for any mark, or pytest warns. A tag
    named as one of pytest's own marks (`skip`, `xfail`, `skipif`,
    `parametrize`, `usefixtures`, `filterwarnings`) is refused with a `UsageError` when
    the module is collected: as a mark it would silently turn its test off or change it.
    """
    from .evals import Case, Dataset

    if isinstance(cases, Case):
        raise UsageError(
            "eval_cases takes a dataset, cases or a dataset file: wrap one case in [...]"
        )
    if not isinstance(argname, str) or not argname.isidentifier():
        raise UsageError(f"eval_cases(argname=) names the test's parameter, not {argname!r}")
    path = Path(cases) if isinstance(cases, str | os.PathLike) else None
    given: Dataset | None = None
    if path is None:
        if input_type is not None or expected_type is not None:
            raise UsageError(
                "eval_cases(input_type=, expected_type=) type the rows of a dataset file; "
                "give typed cases directly, or use Dataset.from_cases(..., input_type=...)"
            )
        given = cases if isinstance(cases, Dataset) else Dataset(cases)  # type: ignore[arg-type]
        if not given.cases:
            raise UsageError("eval_cases was given no cases: a test of nothing passes vacuously")

    def parametrize(test: _Test) -> _Test:
        import pytest  # here: importing tiller.testing does not need pytest

        dataset = given
        if dataset is None:
            assert path is not None
            where = path if path.is_absolute() else Path(inspect.getfile(test)).parent / path
            dataset = Dataset.load(where, input_type=input_type, expected_type=expected_type)
        params = [
            pytest.param(
                case,
                id=case.id,
                marks=[getattr(pytest.mark, tag) for tag in _mark_tags(case)]
                if tags_as_marks
                else (),
            )
            for case in dataset
        ]
        return pytest.mark.parametrize(argname, params)(test)  # type: ignore[no-any-return]

    return parametrize


#: pytest's own marks, which change whether or how a test runs: a case tag of one of
#: these names, as a mark, would turn its test off (`skip`) or change it silently.
_PYTEST_OWN_MARKS = frozenset(
    {"skip", "skipif", "xfail", "parametrize", "usefixtures", "filterwarnings"}
)


def _mark_tags(case: Case) -> tuple[str, ...]:
    """`case`'s tags, to become marks; `UsageError` for one that is pytest's own mark."""
    for tag in case.tags:
        if tag in _PYTEST_OWN_MARKS:
            raise UsageError(
                f"case {case.id!r} has the tag {tag!r}, which is pytest's own mark: as a "
                f"mark it would change how its test runs ({tag!r} does not select cases). "
                "Rename the tag, or pass eval_cases(tags_as_marks=False) to keep tags "
                f"out of marks. pytest's own: {', '.join(sorted(_PYTEST_OWN_MARKS))}"
            )
    return case.tags


async def run_case(
    agent: Agent | Callable[[], Agent] | str,
    case: Case,
    scorers: Sequence[Scorer],
    *,
    budget: Budget | None = None,
    approver: Approver | Callable[[Case], Approver | None] | None = None,
    options: RunOptions | None = None,
    workspace_root: str | os.PathLike[str] | None = None,
) -> CaseResult:
    """Run `case` once as an eval runs it, and score it: its `CaseResult`.

    It is `tiller.evals.Eval` with this one case, one epoch and an in-memory store that
    lives as long as the call, so the case runs as it does in an eval: jailed to a
    private copy of its fixture, within its own budget (and `budget`, the eval's), with
    `approver` (by default none: calls that need approval are blocked), its run id
    `test:{case_id}:e0`. `agent` is what `Eval` takes: an `Agent` (offline: on a
    `ScriptedModel` or a `tiller.model.replay.ReplayModel`), a function returning one (a
    fresh agent, and model, per run), or a reference `"module:attr"`. Scorers see the
    workspace the agent left; it is removed afterwards, and nothing is kept.
    """
    from .evals import Case, Eval

    if not isinstance(case, Case):
        raise UsageError(f"run_case runs one tiller.evals.Case, not a {type(case).__name__}")
    if isinstance(scorers, str) or not isinstance(scorers, Sequence) or not scorers:
        raise UsageError(
            "run_case needs a list of scorers (at least one): a case with no score "
            "neither passes nor fails"
        )
    report = await Eval(
        agent,
        [case],
        scorers,
        concurrency=1,
        budget=budget,
        eval_id=_CASE_EVAL_ID,
        approver=approver,
        options=options,
        keep_workspaces=False,
        workspace_root=workspace_root,
    ).run()
    (result,) = report.results  # one case, one epoch, no cancel: it has its result
    return result


def assert_case_passed(result: CaseResult) -> None:
    """Fail (`AssertionError`) unless `result`'s run passed (`CaseResult.passed`: it ended
    without an error and every scorer passed it), saying why: each
    failing scorer's value and explanation (an error score's traceback, cut), how the run
    ended if not as it should, and the agent's answer."""
    __tracebackhide__ = True  # pytest shows the test's line, not this one
    if not result.passed:
        raise AssertionError(_case_failure(result))


def _case_failure(result: CaseResult) -> str:
    """Why `result` did not pass, in the words `assert_case_passed` fails with."""
    case, outcome = result.case, result.outcome
    if result.status == "not_run":
        return f"case {case.id!r} was not run: {outcome.error or 'the budget was spent'}"
    if result.status == "cancelled":
        return f"case {case.id!r} was cancelled before it was scored"
    failing = {name: score for name, score in result.scores.items() if not score.passed}
    lines = [f"case {case.id!r} failed {len(failing)} of {len(result.scores)} scorers:"]
    for name, score in failing.items():
        value = "error" if score.error is not None else f"{score.value:.2f}"
        lines.append(f"  {name} ({value}): {score.explanation}")
        if score.error is not None and score.error != score.explanation:
            tail = score.error.rstrip().splitlines()[-_TRACEBACK_LINES:]
            lines.extend(f"    {line}" for line in tail)
    if outcome.error is not None:
        tail = outcome.error.rstrip().splitlines()[-_TRACEBACK_LINES:]
        lines.append(f"the run ended in error ({outcome.stop_cause.value}):")
        lines.extend(f"    {line}" for line in tail)
    elif outcome.stop_cause is not StopCause.COMPLETED:
        lines.append(f"the run stopped: {outcome.stop_cause.value}")
    answer = outcome.text if outcome.output is None else repr(outcome.output)
    shown = repr(answer) if len(answer) <= _ANSWER_CHARS else f"{answer[:_ANSWER_CHARS]!r}..."
    lines.append(f"the agent answered: {shown}")
    return "\n".join(lines)
