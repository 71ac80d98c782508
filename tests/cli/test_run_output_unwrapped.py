"""Without a terminal, `tiller run` never wraps a line (issue 18): rich wrapped at 80
columns, splitting the `tiller approve … | tiller deny …` hint, ids and arguments
mid-word, so the commands printed for a person could not be copied from a CI log."""

from __future__ import annotations

import re
from pathlib import Path

from ..cli_support import tiller

SCRIPT = """
turns:
  - tool_calls:
      - name: write_file
        arguments:
          path: a/rather/long/directory/name/for/the/notes/file/hello.txt
          content: "past the eightieth column"
  - "Done."
"""


def test_the_held_call_and_its_commands_are_one_line_each(tmp_path: Path) -> None:
    deep = tmp_path / "a-store-directory-with-a-long-name" / "and-another-one-below-it"
    deep.mkdir(parents=True)
    store = f"sqlite:///{deep / 'store.db'}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = tmp_path / "s.yaml"
    script.write_text(SCRIPT)
    held = tiller("run", "go", "-m", f"scripted:{script}", "-w", str(workspace), "--store", store)
    assert held.returncode == 0, held.stdout + held.stderr
    lines = held.stdout.splitlines()
    (approval_id,) = re.findall(r"tiller approve (ap-[0-9a-f]+)", held.stdout)
    hint = f"    tiller approve {approval_id} --store {store}   |   " + (
        f"tiller deny {approval_id} --reason TEXT --store {store}"
    )
    assert hint in lines
    assert len(hint) > 80
    call = next(line for line in lines if line.startswith(f"  {approval_id}  write_file("))
    assert call.endswith("content='past the eightieth column')")
    assert len(call) > 80
    assert next(line for line in lines if line.startswith("→ write_file(")).endswith(")")
