"""Characters outside the Basic Multilingual Plane never reach bash's grammar.

tree-sitter's bash lexer corrupts its memory on them: a few thousand command lines with
emoji killed the process with SIGSEGV (seen as a crash of the whole test run inside
`test_never_raises_and_is_the_max_of_its_parts`). The classifier must survive any text a
model writes, so the crash is checked in a child process, seeded, deterministic.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tiller.policy import classify_command
from tiller.policy._shell_tree import parse_tree, read_tree

_MANY_ASTRAL_LINES = textwrap.dedent(
    """
    import random
    from tiller.policy._shell_tree import parse_tree

    for seed in (1, 2, 4):  # each crashed tree-sitter 0.26.1 / tree-sitter-bash 0.25.1
        rnd = random.Random(seed)
        for _ in range(5000):
            size = rnd.randint(0, 80)
            line = "".join(
                chr(rnd.choice([rnd.randint(32, 126), rnd.randint(0x10000, 0x10FFFF)]))
                for _ in range(size)
            )
            parse_tree(line)
    print("survived")
    """
)


def test_thousands_of_lines_with_astral_characters_do_not_crash_the_process(
    tmp_path: Path,
) -> None:
    # A script file, not `-c`: the crash depends on the heap's layout, and a file run
    # showed it every time where `-c` sometimes did not.
    script = tmp_path / "many_astral_lines.py"
    script.write_text(_MANY_ASTRAL_LINES)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "survived"


def test_the_tree_still_indexes_the_real_text() -> None:
    parsed = parse_tree("echo 🙂🙂 | rm -rf ./🙂build")
    words = [
        parsed.text(node)
        for node in _walk(parsed.tree.root_node)
        if node.type in {"word", "command_name"}
    ]
    assert "🙂🙂" in words
    assert "./🙂build" in words


def test_the_classifier_reads_astral_words_as_it_reads_others() -> None:
    assert classify_command("rm -rf /🙂").risk is classify_command("rm -rf /x").risk
    assert classify_command("ls 🙂").risk is classify_command("ls x").risk
    assert read_tree("echo 🙂 'x").error is not None  # the open quote, as with "echo x 'x"
    assert read_tree("echo x 'x").error is not None
    assert read_tree("echo 🙂").error is None


def _walk(node: object) -> list:  # type: ignore[type-arg]
    found = []
    stack = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(current.children)  # type: ignore[attr-defined]
    return found
