"""The tests use tiller's public names (issue 15).

A test imports what a user or another of tiller's packages would: a public namespace
(`tiller.store`, `tiller.tools`), its `# For tiller's own packages` re-exports, or the front
door (`tiller`). A private module (`tiller.store._records`, `from tiller.tools import
_sandbox`, `importlib.import_module("tiller.store._nats")`) is imported only by the tests
listed below, each group with the reason its internals are tested directly; nothing is
exported only so that a test can reach it.

The test fails on a private import that is not listed, and on a listed one that is no
longer there, so the list only shrinks (as `tests/test_layering.py`'s lists do).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


def _is_private(dotted: str) -> bool:
    """`tiller.x._y` and `tiller._y` are private; `tiller.__main__` and `tiller.x` are not."""
    parts = dotted.split(".")
    return parts[0] == "tiller" and any(
        part.startswith("_") and not part.endswith("__") for part in parts[1:]
    )


def _is_module(dotted: str) -> bool:
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported_modules(tree: ast.AST) -> list[str]:
    """Every tiller module the code imports: `import m`, `from m import n` (and `n` when it
    is a module itself), and `import_module("m")` with a literal name."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append(node.module)
            found += [
                dotted
                for alias in node.names
                if _is_module(dotted := f"{node.module}.{alias.name}")
            ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(func := node.func, ast.Attribute | ast.Name)
            and (func.attr if isinstance(func, ast.Attribute) else func.id) == "import_module"
            and node.args
            and isinstance(name := node.args[0], ast.Constant)
            and isinstance(name.value, str)
        ):
            found.append(name.value)
    return found


def private_imports_of(path: Path, source: str | None = None) -> set[str]:
    """`"<path under tests/> -> <private module>"` for each private module the test file at
    `path` imports (`source` stands in for its text)."""
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    where = path.relative_to(TESTS).as_posix()
    return {f"{where} -> {module}" for module in _imported_modules(tree) if _is_private(module)}


def _all_private_imports() -> set[str]:
    found: set[str] = set()
    for path in sorted(TESTS.rglob("*.py")):
        found |= private_imports_of(path)
    return found


#: The tests that import a private module, and why.
ALLOWED_PRIVATE = frozenset(
    {
        # The tiller-wide private modules are what these tests check: the front door's
        # table of homes, and the schema ledger (with every record kind it must list).
        "test_public_api.py -> tiller._public",
        "test_schema_ledger.py -> tiller._schema_ledger",
        "test_schema_ledger.py -> tiller.store._records",
        # The tiller-wide task stopper (law 8), and the background keepers it stops whose
        # cancellation the tests drive directly (not API, so not exported).
        "test_task_stop.py -> tiller._task_stop",
        "loop/test_stop_cancelled.py -> tiller.loop._lease_keeper",
        "fleet/test_stop_cancelled.py -> tiller.fleet._job_lease",
        "serve/test_fleet_runs_idle.py -> tiller.serve._fleet_runs",
        # The model wrapper's call-site helper (no wrapper: the model itself, untouched),
        # and the compaction summary's system prompt, by which a scripted model tells a
        # summary call from a turn (not API).
        "loop/test_model_wrapper.py -> tiller.loop._model_wrapper",
        "loop/test_model_wrapper.py -> tiller.loop._summary",
        # An eval's purse (its share of the eval budget, named per attempt): a killed
        # process's share is simulated by reserving one directly (not API).
        "evals/test_eval_budget.py -> tiller.evals._eval_budget",
        # Removing a case's fixture copy: a link swapped in mid-removal is injected at the
        # moment it would race, which the runner gives no handle on (not API).
        "evals/test_fixture_copy.py -> tiller.evals._fixture_copy",
        # Rebuilding a fleet run's workspace from its diff: property tests of the patch
        # itself (every text, mode and link the diff carries), far below what a fleet
        # eval's test can reach case by case (not API).
        "evals/test_fleet_diff_apply.py -> tiller.evals._diff_apply",
        # A durable run's step segments: how many deltas fill one, so a test writes past a
        # segment's end and across a new one (a storage layout constant, not API).
        "store/test_checkpoint_steps.py -> tiller.store._checkpoint_steps",
        # The GenAI attribute and metric names, checked one by one against the semantic
        # conventions package (the names are constants of the module, not API).
        "telemetry/test_names.py -> tiller.telemetry._names",
        # The cli package exports only its app: unit tests of its parts (line router,
        # terminal approver and questions, views and their safe printing, release check,
        # serve's token rule).
        "cli/test_bad_arguments.py -> tiller.cli._options",
        "cli/test_eval_progress_bar.py -> tiller.cli._eval_progress",
        "cli/test_line_router.py -> tiller.cli._run",
        "cli/test_outbox_release.py -> tiller.cli._release",
        "cli/test_serve_cli.py -> tiller.cli._serve",
        "cli/test_terminal_approver.py -> tiller.cli._run",
        "cli/test_view_hostile.py -> tiller.cli._progress_view",
        "cli/test_view_hostile.py -> tiller.cli._safe",
        "cli/test_view_hostile.py -> tiller.cli._view",
        "cli/test_view_progress.py -> tiller.cli._progress_view",
        "cli/test_view_progress.py -> tiller.cli._view",
        "tools/test_ask_user.py -> tiller.cli._run",
        # The CLI's copies of the store's bucket names are pinned equal to the store's (and
        # the outbox command's send and terminal check are driven directly).
        "test_approvals_cli.py -> tiller.cli._approvals",
        "test_mail_cli.py -> tiller.cli._mail",
        "test_outbox_cli.py -> tiller.cli._outbox",
        "test_runs_cli.py -> tiller.cli._runs",
        # Unit tests of the events package's JSON diff, JSON-prefix parser and state
        # manager (whose guided-diff threshold a fixture turns on and off).
        "events/test_json_prefix.py -> tiller.events._json_prefix",
        "events/test_jsondiff.py -> tiller.events._jsondiff",
        "events/test_state.py -> tiller.events._state",
        # What a checkpoint rebuilds that only the loop's resume uses (options_from,
        # policy_of): no package outside the loop imports it, so it has no re-export.
        "loop/test_review_risk.py -> tiller.loop._agent_ref",
        "test_runs_cli.py -> tiller.loop._agent_ref",
        "tools/test_web_ssrf.py -> tiller.loop._agent_ref",
        # Unit tests of the loop's steps (compaction and its summary, loop guard, taint
        # flow, refusal wording, the shell's may-write rule), and the custom-event names
        # and prompts the scripted models match on.
        "loop/test_compaction.py -> tiller.loop._compaction",
        "loop/test_compaction.py -> tiller.loop._summary",
        "loop/test_loop_guard.py -> tiller.loop._compaction",
        "loop/test_loop_guard.py -> tiller.loop._loop_guard",
        "loop/test_loop_guard.py -> tiller.loop._summary",
        "loop/test_overflow.py -> tiller.loop._compaction",
        "loop/test_overflow.py -> tiller.loop._summary",
        "loop/test_taint_flow.py -> tiller.loop._taint_flow",
        "policy/test_verdict_vocabulary.py -> tiller.loop._gate_answer",
        "store/test_workspace_checkpoints.py -> tiller.loop._services",
        # The nudges the model turn writes into the conversation: the tests check the
        # model reads exactly that text (not API, so not exported).
        "loop/test_budget.py -> tiller.loop._model_turn",
        "loop/test_empty_turns.py -> tiller.loop._model_turn",
        # Unit tests of the model's HTTP plumbing (SSE parsing, Retry-After, overflow).
        "model/test_openai_compat.py -> tiller.model._http",
        # Unit tests of the policy's internals: the shell parser and tree, the safety
        # modes' default table, the classifier's fences, the verdict vocabulary.
        "policy/test_classifier.py -> tiller.policy._classifier",
        "policy/test_engine.py -> tiller.policy._engine",
        "policy/test_shell_hostile.py -> tiller.policy._shell_parse",
        "policy/test_shell_hostile.py -> tiller.policy._shell_tree",
        "policy/test_shell_tree_astral.py -> tiller.policy._shell_tree",
        "policy/test_verdict_vocabulary.py -> tiller.policy._verdict",
        # NatsBus needs the optional nats extra, so `open_bus` imports it on first use and
        # the store does not re-export it: these tests build it (or probe for it) directly.
        "loop/test_crash.py -> tiller.store._nats",
        "loop/test_durable.py -> tiller.store._nats",
        "loop/test_mailbox_processes.py -> tiller.store._nats",
        "loop/test_subagent_resume.py -> tiller.store._nats",
        "serve/test_two_servers.py -> tiller.store._nats",
        "store/conftest.py -> tiller.store._nats",
        "store/test_control.py -> tiller.store._nats",
        "store/test_file_checkpoints.py -> tiller.store._nats",
        "store/test_nats.py -> tiller.store._nats",
        # Unit tests of the store's internals: record ids, the SQLite schema version, the
        # file manifest and workspace walk, the event log's bucket, a slowed memory put.
        "loop/test_compaction.py -> tiller.store._memory",
        "store/test_approvals_store.py -> tiller.store._records",
        "store/test_sqlite.py -> tiller.store._sqlite",
        "store/test_workspace_checkpoints.py -> tiller.store._file_manifest",
        "store/test_workspace_checkpoints.py -> tiller.store._workspace_fs",
        "test_event_log.py -> tiller.store._event_log",
        # Unit tests of the tools' internals (jail fs, sandbox, capture and output bounds,
        # background jobs, web fetch and budget, SSRF checks, taint index, checklist...).
        "store/test_workspace_checkpoints.py -> tiller.tools._file_snapshots",
        "tools/test_ask_user.py -> tiller.tools._question_brokers",
        "tools/test_background_process.py -> tiller.tools._background",
        "tools/test_background_process.py -> tiller.tools._process",
        "tools/test_docstring.py -> tiller.tools._docstring",
        "tools/test_execute_command.py -> tiller.tools._capture",
        "tools/test_live_output_bound.py -> tiller.tools.builtin._shell",
        "tools/test_file_tools.py -> tiller.tools._fs",
        "tools/test_html_text.py -> tiller.tools._html",
        "tools/test_protected_shell.py -> tiller.tools._protected_snapshot",
        "tools/test_protected_writes.py -> tiller.tools._fs",
        "tools/test_sandbox_as_user.py -> tiller.tools._protected_snapshot",
        "tools/test_sandbox_as_user.py -> tiller.tools._sandbox",
        "tools/test_sandbox_root.py -> tiller.tools._sandbox",
        "tools/test_sandbox_root.py -> tiller.tools._workspace_acl",
        "tools/test_taint_index.py -> tiller.tools._file_stamps",
        "tools/test_taint_index.py -> tiller.tools._taint_index",
        "tools/test_tasks.py -> tiller.tools._tasks",
        "tools/test_walk.py -> tiller.tools._walk",
        "tools/test_web_budget.py -> tiller.tools._web_budget",
        "tools/test_web_fetch.py -> tiller.tools._fetcher",
        "tools/test_web_ssrf.py -> tiller.tools._vetted_network",
        "tools/test_web_ssrf.py -> tiller.tools._web_access",
        # Unit tests of the built-in tools' and MCP client's internals (patch parser,
        # glob pattern, checklist wording, message limits, argument schema check).
        "policy/test_engine.py -> tiller.tools.mcp._schema",
        "tools/test_apply_patch.py -> tiller.tools.builtin._diff",
        "tools/test_glob_grep.py -> tiller.tools.builtin._glob",
        "tools/test_mcp.py -> tiller.tools.mcp._client",
        "tools/test_mcp_config.py -> tiller.tools.mcp._schema",
        "tools/test_tasks.py -> tiller.tools.builtin._tasks",
    }
)


def test_no_new_private_import() -> None:
    new = sorted(_all_private_imports() - ALLOWED_PRIVATE)
    assert not new, (
        "tests importing a private module: import the name from its public namespace "
        "(or list the test here with the reason):\n" + "\n".join(new)
    )


def test_allow_list_only_shrinks() -> None:
    gone = sorted(ALLOWED_PRIVATE - _all_private_imports())
    assert not gone, "no longer there; remove from the allow-list:\n" + "\n".join(gone)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from tiller.store._records import Record\n", {"tiller.store._records"}),
        ("import tiller.model._codec\n", {"tiller.model._codec"}),
        ("import tiller.tools._sandbox as sandbox\n", {"tiller.tools._sandbox"}),
        ("from tiller.tools import Sandbox, _sandbox\n", {"tiller.tools._sandbox"}),
        ("from tiller import _public\n", {"tiller._public"}),
        (
            "def f():\n    from tiller.loop._compaction import thin_results\n",
            {"tiller.loop._compaction"},
        ),
        (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from tiller.store._nats import NatsBus\n",
            {"tiller.store._nats"},
        ),
        (
            "import importlib\nimportlib.import_module('tiller.store._nats')\n",
            {"tiller.store._nats"},
        ),
        (
            "from importlib import import_module\nimport_module('tiller.cli._run')\n",
            {"tiller.cli._run"},
        ),
        ("from tiller.store import DEFAULT_BUCKET, MemoryBus\n", set()),
        ("from tiller.tools.builtin import task_create\nimport tiller.loop\n", set()),
        ("from tiller import Agent, __version__\nimport tiller.__main__\n", set()),
        ("from ._support import assert_legal\nfrom _pytest import fixtures\n", set()),
        ("import importlib\nimportlib.import_module(NAME)\n", set()),
    ],
)
def test_a_planted_private_import_is_found(source: str, found: set[str]) -> None:
    where = TESTS / "tools" / "test_planted.py"
    assert private_imports_of(where, source) == {f"tools/test_planted.py -> {m}" for m in found}
