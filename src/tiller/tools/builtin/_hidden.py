"""What of tiller's own files the agent's listings leave out.

tiller keeps its bookkeeping in the workspace's `.tiller/` (the taint index and its lock,
a `.gitignore`, the sessions' scratchpads, spilled tool outputs). An agent that lists the
workspace should see the project, not that: a `.tiller/` entry in `list_dir` makes models
wonder about it, read it, or try to tidy it away. So `list_dir` of the root leaves
`.tiller` out, and listing `.tiller/` itself (`list_dir`, `glob`, `grep` with it as the
path) shows only what is the agent's own there: `scratch/` (its scratchpad) and `spill/`
(the full outputs its results point to). The walks of `glob` and `grep` skip `.tiller`
wherever they meet it (`SKIPPED_DIRS`).

Hidden is not protected, and not unreadable: `read_file` still reads what a result names,
and whether the agent may *write* under `.tiller/` is the jail's decision (law 11:
`Jail.protected` refuses it, except the scratchpad), which nothing here changes.
"""

from __future__ import annotations

from typing import Final

__all__ = ["TILLER_DIR", "hidden_entry"]

#: tiller's directory in the workspace (`tiller.tools.SPILL_SUBDIR`'s first part).
TILLER_DIR: Final = ".tiller"
#: What under `.tiller/` is the agent's own: its scratchpads (`.tiller/scratch`, see
#: `tiller.loop.SCRATCH_SUBDIR`) and spilled outputs (`tiller.tools.SPILL_SUBDIR`).
AGENT_SUBDIRS: Final = frozenset({"scratch", "spill"})


def hidden_entry(parent: tuple[str, ...], name: str) -> bool:
    """Whether the entry `name` of the directory `parent` (its path below the jail root,
    as parts; `()` for the root) is tiller's, left out of the agent's listings."""
    if not parent:
        return name == TILLER_DIR
    if parent == (TILLER_DIR,):
        return name not in AGENT_SUBDIRS
    return False
