"""A dataset as YAML (not API): a list of cases, or a mapping with `cases` and the
dataset's own keys:

```yaml
name: invoices            # the dataset's name (default: the file's stem)
fixture_root: fixtures    # relative fixtures resolve here (relative to this file)
budget: {max_steps: 8}    # each case's budget unless it sets a key itself
metadata: {suite: smoke}  # merged under each case's metadata
tags: [invoice]           # come before each case's tags
cases:
  - id: total-rounding
    input: fix the rounding of totals
    fixture: rounding     # -> fixtures/rounding
```

The file is composed to nodes first, so an error names the line its case starts on.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ._case import Case, CaseBudget
from ._dataset_rows import (
    BUDGET_KEYS,
    RowDefaults,
    RowPlace,
    RowReader,
    unique_cases,
    unknown_keys_message,
)

__all__ = ["DATASET_KEYS", "YamlDataset", "read_yaml"]

DATASET_KEYS = ("name", "fixture_root", "budget", "metadata", "tags", "cases")


@dataclass(frozen=True, slots=True)
class YamlDataset:
    name: str | None
    cases: list[Case]


def _line(node: Any) -> int:
    return int(node.start_mark.line) + 1


def read_yaml(path: Path, text: str, input_type: Any, expected_type: Any) -> YamlDataset:
    import yaml  # lazily: only YAML datasets need it

    loader = _loader_class(yaml)(text)
    try:
        return _read(path, loader, input_type, expected_type)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        context = ""
        if exc.context and exc.context_mark is not None and exc.context_mark is not mark:
            context = f" ({exc.context}, which starts at line {exc.context_mark.line + 1})"
        raise RowPlace(str(path), line).error(f"not valid YAML: {exc.problem}{context}") from None
    except yaml.YAMLError as exc:
        raise RowPlace(str(path)).error(f"not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def _loader_class(yaml: Any) -> Any:
    """PyYAML's C loader when it is usable, else the pure-Python one. The C extension
    keeps the node classes of the first `import yaml`: once yaml is imported again in the
    process (pytester does; so may a plugin that reloads modules) its nodes are no longer
    the classes the new module resolves and constructs, and every document fails."""
    fast = getattr(yaml, "CSafeLoader", None)
    c_module = sys.modules.get("yaml._yaml")
    if fast is None or getattr(c_module, "ScalarNode", None) is not yaml.ScalarNode:
        return yaml.SafeLoader
    return fast


def _read(path: Path, loader: Any, input_type: Any, expected_type: Any) -> YamlDataset:
    root = loader.get_single_node()
    if root is None:
        raise RowPlace(str(path)).error("the file is empty: write a list of cases")
    items, settings = _split(path, root, loader)
    defaults = _defaults(path, settings)
    reader = RowReader(defaults=defaults, input_type=input_type, expected_type=expected_type)
    placed = []
    for item in items:
        place = RowPlace(str(path), _line(item))
        _refuse_repeated_keys(item, place)
        row = loader.construct_object(item, deep=True)
        placed.append((reader.case(row, place), place))
    name = settings.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise RowPlace(str(path)).error(f"the dataset's name must be a string, not {name!r}")
    return YamlDataset(name, unique_cases(placed))


def _split(path: Path, root: Any, loader: Any) -> tuple[list[Any], dict[str, Any]]:
    """The case nodes, and the dataset-level keys constructed."""
    import yaml

    if isinstance(root, yaml.SequenceNode):
        return list(root.value), {}
    if not isinstance(root, yaml.MappingNode):
        raise RowPlace(str(path), _line(root)).error(
            "a YAML dataset is a list of cases, or a mapping with `cases`"
        )
    settings: dict[str, Any] = {}
    cases_node = None
    for key_node, value_node in root.value:
        key = loader.construct_object(key_node, deep=True)
        if key not in DATASET_KEYS:
            raise RowPlace(str(path), _line(key_node)).error(
                unknown_keys_message("dataset key", [str(key)], DATASET_KEYS)
            )
        if key == "cases":
            cases_node = value_node
        else:
            settings[key] = loader.construct_object(value_node, deep=True)
    if cases_node is None:
        raise RowPlace(str(path), _line(root)).error(
            "the dataset has no `cases`: list them under `cases:`"
        )
    if not isinstance(cases_node, yaml.SequenceNode):
        raise RowPlace(str(path), _line(cases_node)).error("`cases` must be a list of cases")
    return list(cases_node.value), settings


def _refuse_repeated_keys(item: Any, place: RowPlace) -> None:
    """YAML keeps the last of two equal keys; a case that says `input` twice is a mistake."""
    import yaml

    if not isinstance(item, yaml.MappingNode):
        return
    seen: set[str] = set()
    for key_node, _ in item.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if key in seen:
            raise RowPlace(place.source, _line(key_node)).error(
                f"key {key!r} is given twice in this case (the case starts at line {place.line})"
            )
        if key is not None:
            seen.add(key)


def _defaults(path: Path, settings: Mapping[str, Any]) -> RowDefaults:
    where = RowPlace(str(path))
    root = settings.get("fixture_root")
    if root is not None and (not isinstance(root, str) or not root):
        raise where.error(f"fixture_root must be a directory path, not {root!r}")
    budget = settings.get("budget") or {}
    if not isinstance(budget, Mapping):
        raise where.error(f"the default budget must be a mapping with keys {BUDGET_KEYS}")
    unknown = [str(key) for key in budget if key not in BUDGET_KEYS]
    if unknown:
        raise where.error(unknown_keys_message("default budget key", unknown, BUDGET_KEYS))
    try:
        CaseBudget(**budget)
    except UsageError as exc:
        raise where.error(f"the default budget: {exc}") from None
    metadata = settings.get("metadata") or {}
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise where.error(f"the default metadata must be a mapping, not {metadata!r}")
    tags = settings.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise where.error(f"the default tags must be a list of strings, not {tags!r}")
    return RowDefaults(
        fixture_root=path.parent / root if root is not None else path.parent,
        budget=dict(budget),
        metadata=dict(metadata),
        tags=tuple(tags),
    )
