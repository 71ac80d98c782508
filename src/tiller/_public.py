"""The front door's table: which names `tiller` re-exports, and from which namespace.

One table serves two ends. `tiller/__init__.py` imports these names on first use (PEP 562),
so `import tiller` does not pull in the loop. And each module that defines one of them calls
`rehome` at its end, so each name reports `tiller` as its `__module__` (as httpx's do) from
the moment it can be reached at all: `tiller.loop.Agent.__module__` and
`tiller.Agent.__module__` agree whichever is imported first, and a pickle or a repr says
`tiller.Agent`, which resolves through the front door. It has to be the defining module,
not the namespace: the namespaces import their names on first use (`lazy_names`), and
tiller's own modules import a name from the module that defines it, so a namespace would
rehome `RunResult` only once someone asked it for `RunResult`, and a run's result would say
`tiller.loop._result` in one process and `tiller` in another.

A class's string annotations were written for the namespace of the module that defines it,
and tools that read them (`typing.get_type_hints`, pydantic's `TypeAdapter`) look them up in
the module `__module__` names. `rehome` therefore resolves them in their own module first,
so changing the name changes nothing those tools see.

`lazy_names` is the other half of keeping imports cheap: it makes a namespace's module
`__getattr__` (PEP 562), so `from tiller.tools import Tool` imports the module that defines
`Tool` and not every module the namespace re-exports (the built-in tools, httpx, ...).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["EAGER", "FRONT", "lazy_names", "rehome"]

#: Every name `tiller` re-exports on first use, and the namespace it comes from. A name
#: here is also listed in `tiller.__all__`.
FRONT: Mapping[str, str] = {
    "Agent": "tiller.loop",
    "AllowAll": "tiller.policy",
    "AlreadyResumed": "tiller.store",
    "Budget": "tiller.loop",
    "ExecContext": "tiller.tools",
    "ResumeDecision": "tiller.loop",
    "ResumeReplayBlocked": "tiller.loop",
    "RunContext": "tiller.loop",
    "RunControls": "tiller.loop",
    "RunOptions": "tiller.loop",
    "RunResult": "tiller.loop",
    "RunStillRunning": "tiller.store",
    "ScriptedModel": "tiller.model",
    "StopCause": "tiller.state",
    "Tool": "tiller.tools",
    "ToolError": "tiller.tools",
    "open_bus": "tiller.store",
    "tool": "tiller.tools",
}

#: The names `tiller` imports at once: their modules are cheap (no pydantic, no loop).
EAGER: Mapping[str, str] = {
    "CancellationToken": "tiller.cancel",
    "Cancelled": "tiller.errors",
    "HandleClosed": "tiller.errors",
    "InvalidResume": "tiller.errors",
    "InvalidToolArguments": "tiller.errors",
    "NewerSchemaError": "tiller.errors",
    "ProtocolViolation": "tiller.errors",
    "StateDecodeError": "tiller.errors",
    "StatePatchError": "tiller.errors",
    "SubscriberLagged": "tiller.errors",
    "TillerError": "tiller.errors",
    "UsageError": "tiller.errors",
}


def rehome(module: str, names: Mapping[str, Any]) -> None:
    """Make each front-door name that `module` defines report `tiller` as its module.

    `names` is the module's globals (the front door passes its own for the names it imports
    at once). Called at the end of that module, so no importer ever sees the old name.
    """
    for table in (FRONT, EAGER):
        for name, home in table.items():
            value = names.get(name)
            inside = module == home or module.startswith(home + ".")
            if inside and getattr(value, "__module__", None) == module:
                if isinstance(value, type):
                    _resolve_annotations(value)
                value.__module__ = "tiller"


def lazy_names(
    namespace: str,
    names: dict[str, Any],
    homes: Mapping[str, tuple[str, ...]],
    *,
    otherwise: Callable[[str], Any] | None = None,
) -> Callable[[str], Any]:
    """A module `__getattr__` for `namespace` that imports each name from its home module
    (`homes`: a relative module name to the names it defines) the first time it is asked
    for, and keeps it in `names` (the namespace's globals), so later lookups skip it.

    A name no module defines goes to `otherwise` (a deprecated alias, say), or raises
    `AttributeError` as a missing attribute does. A name asked for while its module is
    still being imported (an import cycle) raises an `ImportError` that says so.
    """
    where = {name: module for module, defined in homes.items() for name in defined}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            if otherwise is not None:
                return otherwise(name)
            raise AttributeError(f"module {namespace!r} has no attribute {name!r}")
        home = importlib.import_module(module, namespace)
        try:
            value = getattr(home, name)
        except AttributeError:
            if getattr(home.__spec__, "_initializing", False):
                # Python's own `from m import n` says "partially initialized module";
                # through this function it would read "cannot import name", like a typo.
                raise ImportError(
                    f"cannot import name {name!r} from {namespace!r}: its module "
                    f"{home.__name__!r} is still being imported (an import cycle)",
                    name=namespace,
                ) from None
            raise
        names[name] = value
        return value

    return __getattr__


def _resolve_annotations(cls: type) -> None:
    """Replace the string annotations of `cls` (and its dataclass fields' types) by what
    they name in the module that defines `cls`; one that cannot be resolved there (a
    name imported only for type checkers) stays a string."""
    module = sys.modules.get(cls.__module__)
    if module is None or cls.__module__ == "tiller":
        return
    namespace = {**vars(module), cls.__name__: cls}
    annotations: dict[str, Any] = dict(inspect.get_annotations(cls))
    for key, annotation in annotations.items():
        annotations[key] = _evaluated(annotation, namespace)
    if annotations:
        cls.__annotations__ = annotations
    if dataclasses.is_dataclass(cls):
        for field in dataclasses.fields(cls):
            if field.name in annotations:
                field.type = annotations[field.name]


def _evaluated(annotation: Any, namespace: dict[str, Any]) -> Any:
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, namespace)
    except Exception:  # a name only type checkers import: leave the text as it was
        return annotation
