#!/usr/bin/env bash
# Create .venv-anchors, the environment bench/anchors/ and bench/hot_path.py run in: the
# agent runtimes tiller is measured beside (issue 19), pinned to the versions the figures
# in BENCHMARKS.md were measured with, and tiller itself, editable from this checkout.
# Kept out of git (.gitignore). Idempotent: an existing .venv-anchors is reused and
# brought to these pins.
#
#   scripts/setup-bench-anchors.sh [PYTHON]     # PYTHON: the interpreter (default python3)
#
# The pins are what installed on 2026-12-07 (CPython 3.11.7). To move them, change them
# here and say so beside the figures that were measured with the new ones.
set -euo pipefail

say() { printf 'setup-bench-anchors: %s\n' "$*"; }

root="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
venv="$root/.venv-anchors"

pins=(
    "pydantic-ai-slim==2.78.0"
    "openai-agents==0.25.0"
    "langgraph==1.2.24"
    "langgraph-prebuilt==1.1.3"
    "langgraph-checkpoint==4.3.2"
    "langgraph-checkpoint-sqlite==3.1.2"
    "langchain-core==1.8.3"
    "langchain==1.5.2"
    "aiosqlite==0.22.1"
    "psutil==7.2.2"
)

if [ -x "$venv/bin/python" ]; then
    say "reusing $venv"
else
    say "creating $venv with $("$python" --version 2>&1)"
    "$python" -m venv "$venv"
fi
say "installing the anchors: ${pins[*]}"
"$venv/bin/python" -m pip install --quiet "${pins[@]}"
say "installing tiller, editable, from $root"
"$venv/bin/python" -m pip install --quiet -e "$root"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version

names = ("tiller", "pydantic", "pydantic-ai-slim", "openai-agents", "langgraph",
         "langchain", "langchain-core", "langgraph-checkpoint-sqlite")
print("setup-bench-anchors: " + ", ".join(f"{n} {version(n)}" for n in names))
PY
say "done: $venv/bin/python bench/hot_path.py --quick"
