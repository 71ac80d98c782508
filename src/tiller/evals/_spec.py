"""An eval spec: what `tiller eval run SPEC` runs, written once in a Python file.

```python
# evals/coder.py
from tiller.evals import Dataset, EvalSpec, Includes

spec = EvalSpec(
    agent="myapp.agents:coder",
    cases=Dataset.load("evals/coder.jsonl"),
    scorers=[Includes()],
    epochs=3,
)
```

`tiller eval run evals/coder.py` loads it (`load_eval_spec`) and builds the `Eval`
(`spec.build(store=..., eval_id=...)`); the command line overrides epochs, concurrency and
the budget. A spec is what an eval *is* (its agent, cases and scorers, and how many times
each case runs); where its results go and under which id is the caller's choice, so one
spec runs locally, in CI and on a fleet unchanged.

A reference is a path to a `.py` file (`evals/coder.py`, or `evals/coder.py:nightly` for an
attribute other than `spec`) or an importable module (`myapp.evals:coder`, or `myapp.evals`
for its `spec`). The attribute is an `EvalSpec` or a function with no parameters that
returns one. A file is imported with its own directory first on `sys.path`, so it can
import the modules beside it (the agent it names, say).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cancel import CancellationToken
from ..errors import UsageError
from ..fleet import Fleet
from ..loop import Agent, Budget, RunOptions
from ..policy import Approver
from ..store import Bus
from ._case import Case
from ._eval import Eval
from ._outcome import Scorer

__all__ = ["DEFAULT_SPEC_ATTRIBUTE", "EvalSpec", "load_eval_spec"]

#: The attribute a spec reference names when it names none.
DEFAULT_SPEC_ATTRIBUTE = "spec"


@dataclass(frozen=True, slots=True)
class EvalSpec:
    """What an eval is (see the module docstring). `name` prefixes the ids of the evals
    run from it (`{name}-{random}` unless an id is given), so a store's list says which
    spec each came from."""

    agent: Agent | Callable[[], Agent] | str
    cases: Sequence[Case]
    scorers: Sequence[Scorer]
    name: str = "eval"
    epochs: int = 1
    concurrency: int = 4
    budget: Budget | None = None
    approver: Approver | Callable[[Case], Approver | None] | None = None
    options: RunOptions | None = field(default=None)

    def __post_init__(self) -> None:
        if isinstance(self.cases, Case | str) or not isinstance(self.cases, Iterable):
            raise UsageError(
                "an eval spec's cases are a Dataset or a sequence of Case, not a "
                f"{type(self.cases).__name__}"
            )
        # A spec is a value: a dataset or a generator is read once, here.
        object.__setattr__(self, "cases", tuple(self.cases))
        object.__setattr__(self, "scorers", tuple(self.scorers))

    def build(  # noqa: PLR0913 (each keyword is one choice of the caller)
        self,
        *,
        store: Bus | str | os.PathLike[str] | None = None,
        eval_id: str | None = None,
        cancel: CancellationToken | None = None,
        epochs: int | None = None,
        concurrency: int | None = None,
        budget: Budget | None = None,
        workspace_root: str | os.PathLike[str] | None = None,
        keep_workspaces: bool = True,
        fleet: Fleet | None = None,
    ) -> Eval:
        """The `Eval` this spec describes, with the caller's store and id; `epochs`,
        `concurrency` and `budget` replace the spec's own when given. With `fleet`, its
        cases run on the fleet's workers (`Eval`'s `fleet`: the spec's agent must be a
        reference, and it can have no approver or options)."""
        return Eval(
            self.agent,
            self.cases,
            self.scorers,
            epochs=self.epochs if epochs is None else epochs,
            concurrency=self.concurrency if concurrency is None else concurrency,
            budget=self.budget if budget is None else budget,
            store=store,
            eval_id=eval_id if eval_id is not None else self.new_eval_id(),
            approver=self.approver,
            cancel=cancel,
            options=self.options,
            keep_workspaces=keep_workspaces,
            workspace_root=workspace_root,
            fleet=fleet,
        )

    def new_eval_id(self) -> str:
        """A fresh id for an eval of this spec: its name and a random suffix."""
        prefix = "".join(c if c.isalnum() or c in "_.-" else "-" for c in self.name)
        return f"{prefix.strip('-._')[:48] or 'eval'}-{uuid.uuid4().hex[:8]}"


def load_eval_spec(reference: str) -> EvalSpec:
    """The `EvalSpec` that `reference` names (see the module docstring); every failure
    is a `UsageError` saying what to fix."""
    if not isinstance(reference, str) or not reference.strip():
        raise UsageError("an eval spec reference is a path to a .py file or 'module:attr'")
    target, attribute = _split(reference)
    module = _import_file(Path(target), reference) if _is_file(target) else _import(target)
    try:
        found: Any = getattr(module, attribute)
    except AttributeError:
        raise UsageError(
            f"{target!r} has no attribute {attribute!r}: define `{attribute} = EvalSpec(...)` "
            f"there, or name the attribute ('{target}:NAME')"
        ) from None
    if not isinstance(found, EvalSpec) and callable(found):
        try:
            found = found()
        except TypeError as exc:
            raise UsageError(
                f"calling {reference!r} with no arguments failed ({exc}); point the "
                "reference at an EvalSpec or at a function with no parameters returning one"
            ) from exc
    if not isinstance(found, EvalSpec):
        raise UsageError(
            f"{reference!r} is a {type(found).__name__}, not a tiller.evals.EvalSpec (or a "
            "function returning one)"
        )
    return found


def _split(reference: str) -> tuple[str, str]:
    """(file or module, attribute). A Windows drive letter is not an attribute separator,
    and neither is a ':' inside a path that exists as given."""
    if os.path.exists(reference):
        return reference, DEFAULT_SPEC_ATTRIBUTE
    target, sep, attribute = reference.rpartition(":")
    if not sep or not attribute or "/" in attribute or "\\" in attribute:
        return reference, DEFAULT_SPEC_ATTRIBUTE
    if not target:
        raise UsageError(f"eval spec reference {reference!r} names no file or module")
    return target, attribute


def _is_file(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target


def _import_file(path: Path, reference: str) -> Any:
    if not path.is_file():
        raise UsageError(
            f"eval spec file {str(path)!r} does not exist (from {reference!r}); give the "
            "path to a .py file that defines `spec = EvalSpec(...)`"
        )
    if path.suffix != ".py":
        raise UsageError(f"eval spec file {str(path)!r} is not a .py file")
    path = path.resolve()
    directory = str(path.parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)  # the spec may import the modules beside it
    name = f"tiller_eval_spec_{abs(hash(str(path))):x}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise UsageError(f"eval spec file {str(path)!r} cannot be imported")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except UsageError:
        sys.modules.pop(name, None)
        raise
    except Exception as exc:
        sys.modules.pop(name, None)
        raise UsageError(
            f"importing eval spec file {str(path)!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    return module


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"cannot import eval spec module {module_name!r}: {exc}. Is it installed, or "
            "is its directory the current one or on PYTHONPATH? (A file: give its path.)"
        ) from exc
