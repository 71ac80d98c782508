"""How much one state publish costs, next to one `orjson.dumps` of the same state.

DESIGN §10: "State publishing: one serialization plus O(change)". The run changes one leaf
deep inside a ~1 KB and a ~1 MB state and publishes after each change. A publish encodes
the state once (`orjson.dumps`), compares the bytes with the last encoding (C `memcmp`)
and diffs only the members whose bytes changed, found through their encoded lengths; what
is left is proportional to the change. (The `==` column, a whole-state comparison with an
equal copy, is what a diff that compares unchanged subtrees would pay on top.) A Python
walk or a deep copy per publish would instead put the 1 MB row near
`jsonpatch.make_patch`, shown for scale.

Run: `python bench/state.py` (add `--quick` for fewer iterations). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import jsonpatch
import orjson

from tiller.events._state import StateManager


def make_state(todos: int) -> dict[str, Any]:
    """An agent-like state: a todo list with nested metadata, counters and settings."""
    return {
        "title": "release checklist",
        "todos": [
            {
                "id": i,
                "title": f"task {i}: check the thing that needs checking",
                "done": i % 3 == 0,
                "tags": ["infra", "docs", "ci"][: i % 4],
                "meta": {"priority": i % 4, "score": i / 7, "assignee": None, "flag": i % 2},
            }
            for i in range(todos)
        ],
        "counters": {f"k{i}": i for i in range(min(todos, 100))},
        "settings": {"theme": "dark", "autosave": True, "interval": 1.5},
    }


def median_us(fn: Callable[[], object], iterations: int) -> float:
    """Median wall time of one call, in microseconds (after a short warm-up)."""
    for _ in range(min(iterations, 20)):
        fn()
    samples = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def measure(state: dict[str, Any], iterations: int, make_patch_runs: int) -> dict[str, float]:
    leaf = state["todos"][len(state["todos"]) // 2]["meta"]
    manager = StateManager()
    manager.publish(state)
    tick = 0

    def publish_one_leaf() -> None:
        nonlocal tick
        tick += 1
        leaf["score"] = tick  # one leaf, in place, deep inside
        result = manager.publish(state)
        assert result is not None and result.kind == "delta", result

    def publish_unchanged() -> None:
        assert manager.publish(state) is None

    index = len(state["todos"]) // 2

    def patch_one_leaf() -> None:
        nonlocal tick
        tick += 1
        ops = [{"op": "replace", "path": f"/todos/{index}/meta/score", "value": tick}]
        manager.patch(ops)

    old = orjson.loads(orjson.dumps(state))
    new = orjson.loads(orjson.dumps(state))
    new["todos"][index]["meta"]["score"] = -1

    row = {
        "bytes": float(len(orjson.dumps(state))),
        "dumps": median_us(lambda: orjson.dumps(state), iterations),
        "equal": median_us(lambda: state == old, iterations),
        "publish": median_us(publish_one_leaf, iterations),
        "unchanged": median_us(publish_unchanged, iterations),
        "patch": median_us(patch_one_leaf, iterations),
        "make_patch": median_us(lambda: jsonpatch.make_patch(old, new), make_patch_runs),
    }
    leaf["score"] = 0
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    small, large = make_state(3), make_state(6_500)
    runs = 200 if args.quick else 2_000
    rows = [
        ("~1 KB", measure(small, runs * 10, runs)),
        ("~1 MB", measure(large, runs, 3 if args.quick else 10)),
    ]
    print(
        "| state | bytes | `orjson.dumps` µs | `==` with a copy µs "
        "| publish, one leaf changed µs | publish, unchanged µs | `patch()`, one leaf µs "
        "| `jsonpatch.make_patch` µs |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in rows:
        print(
            f"| {name} | {row['bytes']:,.0f} | {row['dumps']:,.1f} | {row['equal']:,.1f} "
            f"| {row['publish']:,.1f} | {row['unchanged']:,.1f} | {row['patch']:,.1f} "
            f"| {row['make_patch']:,.0f} |"
        )


if __name__ == "__main__":
    main()
