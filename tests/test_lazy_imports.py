"""Starting is cheap (DESIGN §10, issue 19): a script that uses the front door, and
`tiller --help`, load neither httpx, rich, the AG-UI models nor the parts of tiller they
do not use; each namespace imports a name's module the first time the name is asked for.

What a fresh interpreter has loaded is read from `sys.modules` in a subprocess; how long
it takes is measured in `bench/imports.py`, never here.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import tiller

#: The namespaces whose `__init__` imports its names on first use (PEP 562).
LAZY = (
    "tiller.events",
    "tiller.loop",
    "tiller.model",
    "tiller.policy",
    "tiller.store",
    "tiller.tools",
    "tiller.tools.builtin",
)

#: Third-party packages that only providers, web tools, the terminal, the server or a
#: backend need: a script that builds and runs an `Agent` loads none of them up front.
NOT_FOR_THE_FRONT_DOOR = (
    "ag_ui",
    "click",
    "httpcore",
    "httpx",
    "mcp",
    "nats",
    "pygments",
    "regex",
    "rich",
    "starlette",
    "tree_sitter",
    "typer",
    "uvicorn",
    "yaml",
)

#: Parts of tiller itself the same script does not load until it uses them.
TILLER_NOT_FOR_THE_FRONT_DOOR = (
    "tiller.cli",
    "tiller.model.anthropic",
    "tiller.model.openai_compat",
    "tiller.policy._shell_commands",
    "tiller.policy._shell_parse",
    "tiller.serve",
    "tiller.store._file_checkpoints",
    "tiller.store._sqlite",
    "tiller.tools.builtin._ask",
    "tiller.tools.builtin._files",
    "tiller.tools.builtin._patch",
    "tiller.tools.builtin._shell",
    "tiller.tools.builtin._web",
)


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded once `code` has run."""
    script = f"{code}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return set(done.stdout.split())


def _packages(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


FRONT_DOOR = f"from tiller import {', '.join(n for n in tiller.__all__ if n != '__version__')}"


def test_the_front_door_in_use_loads_no_provider_web_terminal_or_server_package() -> None:
    loaded = _loaded_after(FRONT_DOOR)
    assert sorted(_packages(loaded) & set(NOT_FOR_THE_FRONT_DOOR)) == []


def test_the_front_door_in_use_leaves_the_parts_of_tiller_it_does_not_use() -> None:
    loaded = _loaded_after(FRONT_DOOR)
    assert sorted(m for m in TILLER_NOT_FOR_THE_FRONT_DOOR if m in loaded) == []


def test_a_scripted_run_still_loads_only_what_it_uses() -> None:
    """The first use is correct, and using the loop does not pull the rest in after all."""
    code = (
        "from tiller import Agent, ScriptedModel, tool\n"
        "@tool(read_only=True)\n"
        "def add(a: int, b: int) -> int:\n"
        "    'Add.'\n"
        "    return a + b\n"
        "model = ScriptedModel(\n"
        "    [{'tool_calls': [{'name': 'add', 'arguments': {'a': 2, 'b': 3}}]}, 'five']\n"
        ")\n"
        "assert Agent(model, [add]).run_sync('2 + 3?').text == 'five'\n"
    )
    loaded = _loaded_after(code)
    assert sorted(_packages(loaded) & set(NOT_FOR_THE_FRONT_DOOR) - {"ag_ui"}) == []
    assert "tiller.tools.builtin._web" not in loaded
    assert "tiller.store._file_checkpoints" not in loaded  # a run without a store


def test_tiller_help_loads_no_provider_web_or_loop_code() -> None:
    """Typer draws the help with rich; the commands' own code (pydantic's models, the
    loop, the tools) loads when a command runs."""
    code = (
        "import sys\n"
        "from tiller.cli import main\n"
        "sys.argv = ['tiller', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as stop:\n"
        "    assert stop.code in (0, None), stop.code\n"
    )
    loaded = _loaded_after(code)
    assert (
        sorted(
            _packages(loaded) & {"ag_ui", "httpcore", "httpx", "nats", "pydantic", "tree_sitter"}
        )
        == []
    )
    assert (
        sorted(m for m in loaded if m.split(".")[:2] in (["tiller", "loop"], ["tiller", "tools"]))
        == []
    )


@pytest.mark.parametrize("namespace", LAZY)
def test_a_lazy_namespace_imports_nothing_of_its_own_up_front(namespace: str) -> None:
    loaded = _loaded_after(f"import {namespace}")
    own = sorted(m for m in loaded if m.startswith(namespace + "."))
    assert own == []


@pytest.mark.parametrize("namespace", LAZY)
def test_every_name_of_a_lazy_namespace_resolves_in_a_fresh_interpreter(namespace: str) -> None:
    """`import *` asks for every name in `__all__`, then the plumbing is asked for too:
    an import cycle that only the eager order hid fails here."""
    table = importlib.import_module(namespace)._HOMES
    names = [n for defined in table.values() for n in defined]
    code = (
        f"from {namespace} import *\n"
        f"import {namespace} as m\n"
        f"missing = [n for n in {names!r} if not hasattr(m, n)]\n"
        "assert not missing, missing\n"
    )
    _loaded_after(code)


@pytest.mark.parametrize("namespace", LAZY)
def test_the_lazy_table_matches_the_imports_type_checkers_see(namespace: str) -> None:
    """The `if TYPE_CHECKING:` imports are what mypy and readers see; `_HOMES` is what
    runs. Each name is in both, from the same module."""
    module = importlib.import_module(namespace)
    tree = ast.parse(Path(module.__file__ or "").read_text())
    seen: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.level == 1:
                    for alias in statement.names:
                        seen[alias.asname or alias.name] = f".{statement.module}"
    table = {n: home for home, defined in module._HOMES.items() for n in defined}
    assert table == seen
    assert set(module.__all__) <= set(table) | set(vars(module))


def _first_names(namespace: str) -> list[str]:
    """One name of each module the namespace imports from: asking for any of them first
    imports that module first."""
    table = importlib.import_module(namespace)._HOMES
    return [defined[0] for defined in table.values()]


@pytest.mark.parametrize("namespace", (*LAZY, "tiller"))
def test_each_module_s_names_import_first_and_alone(namespace: str) -> None:
    """Which module a namespace imports first depends on which name a program asks for
    first, so an import cycle can hide behind the order `import *` happens to take. Each
    child below is forked from an interpreter that has imported nothing of tiller, and
    imports one name alone: the first name of each home module (every front-door name
    for `tiller`)."""
    names = (
        [n for n in tiller.__all__ if n != "__version__"]
        if namespace == "tiller"
        else _first_names(namespace)
    )
    script = (
        "import os, sys\n"
        "failed = []\n"
        f"for name in {names!r}:\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        try:\n"
        f"            exec(f'from {namespace} import {{name}}')\n"
        "        except BaseException as error:\n"
        "            print(f'{name}: {error!r}', file=sys.stderr)\n"
        "            os._exit(1)\n"
        "        os._exit(0)\n"
        "    if os.waitpid(pid, 0)[1]:\n"
        "        failed.append(name)\n"
        "print(failed)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    assert done.stdout.strip() == "[]", done.stderr


def test_a_cycle_behind_a_lazy_name_is_named_as_a_cycle(tmp_path: Path) -> None:
    """A name asked for while its module is still being imported (a cycle) is an
    ImportError that says so and names the module, as Python's own `from m import n`
    says "partially initialized module ... circular import", not a bare "cannot import
    name" that reads like a misspelling."""
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from tiller import _public\n"
        "_HOMES = {'._a': ('A',), '._b': ('B',)}\n"
        "__getattr__ = _public.lazy_names(__name__, globals(), _HOMES)\n"
    )
    (package / "_a.py").write_text("A = 1\nfrom planted import B\n")
    (package / "_b.py").write_text("from planted import A\nB = 2\n")
    done = subprocess.run(
        [sys.executable, "-c", "from planted import B"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: cannot import name 'B' from 'planted'"), last
    assert "'planted._b' is still being imported (an import cycle)" in last, last
