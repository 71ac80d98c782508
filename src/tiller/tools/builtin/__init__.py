"""The built-in tools: files, search, a sandboxed shell, background jobs, the web, the task
checklist and questions for the person.

`coding_tools()` is the set the built-in coding agent uses. Every file tool opens its paths
by walking them from the jail's directory descriptor (`Jail.fs`), so nothing outside the
run's jail can be read or written, even by a symlink swapped in mid-call; writes snapshot
the files first when the run keeps file checkpoints. `execute_command` runs under `bwrap`
(no network unless granted) and refuses where the sandbox is unavailable, unless the user
accepted an unsandboxed shell. `web_fetch` is not in `coding_tools()`: it sends data off
the machine, so add it knowingly (`coding_tools(web=True)`). Nor is `agent`, which hands
tasks to subagents (`coding_tools(subagents=True)`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import _public

if TYPE_CHECKING:
    # For tiller's own packages (not API; not in __all__).
    from ._agent_tool import agent
    from ._ask import ask_user
    from ._background import background_process
    from ._coding import coding_tools
    from ._files import edit_file, list_dir, read_file, write_file
    from ._glob import glob
    from ._mail import Mailer, message_send
    from ._patch import apply_patch
    from ._search import grep
    from ._shell import execute_command, execute_command_tool
    from ._subagent_report import AGENT_TOOL as AGENT_TOOL
    from ._subagent_report import SubagentReport as SubagentReport
    from ._subagent_report import SubagentRunner
    from ._subagent_report import describe_report as describe_report
    from ._tasks import task_create, task_list, task_update
    from ._web import web_fetch

__all__ = [
    "Mailer",
    "SubagentRunner",
    "agent",
    "apply_patch",
    "ask_user",
    "background_process",
    "coding_tools",
    "edit_file",
    "execute_command",
    "execute_command_tool",
    "glob",
    "grep",
    "list_dir",
    "message_send",
    "read_file",
    "task_create",
    "task_list",
    "task_update",
    "web_fetch",
    "write_file",
]

#: Where each tool lives: a tool's module (and what it needs: httpx for `web_fetch`, the
#: shell's parser for `execute_command`) is imported when the tool is first asked for.
_HOMES = {
    "._agent_tool": ("agent",),
    "._ask": ("ask_user",),
    "._background": ("background_process",),
    "._coding": ("coding_tools",),
    "._files": ("edit_file", "list_dir", "read_file", "write_file"),
    "._glob": ("glob",),
    "._mail": ("Mailer", "message_send"),
    "._patch": ("apply_patch",),
    "._search": ("grep",),
    "._shell": ("execute_command", "execute_command_tool"),
    "._subagent_report": ("AGENT_TOOL", "SubagentReport", "SubagentRunner", "describe_report"),
    "._tasks": ("task_create", "task_list", "task_update"),
    "._web": ("web_fetch",),
}

# Hidden from type checkers, which see the names through the imports above: a visible
# module `__getattr__` would make every misspelt `tiller.tools.builtin.X` type-check.
if not TYPE_CHECKING:
    __getattr__ = _public.lazy_names(__name__, globals(), _HOMES)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
