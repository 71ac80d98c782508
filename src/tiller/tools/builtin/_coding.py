"""`coding_tools()`: the set of built-in tools the built-in coding agent uses."""

from __future__ import annotations

from .._tool import Tool
from ._agent_tool import agent
from ._ask import ask_user
from ._background import background_process
from ._files import edit_file, list_dir, read_file, write_file
from ._glob import glob
from ._patch import apply_patch
from ._search import grep
from ._shell import execute_command
from ._tasks import task_create, task_list, task_update
from ._web import web_fetch

__all__ = ["coding_tools"]


def coding_tools(*, web: bool = False, subagents: bool = False) -> list[Tool]:
    """The built-in coding tools, read-only ones first: read_file, list_dir, glob, grep,
    task_create, task_update, task_list, ask_user, write_file, edit_file, apply_patch,
    execute_command, background_process — web_fetch when `web` is true, and agent when
    `subagents` is. A new list each time, to extend freely."""
    tools: list[Tool] = [
        read_file,
        list_dir,
        glob,
        grep,
        task_create,
        task_update,
        task_list,
        ask_user,
        write_file,
        edit_file,
        apply_patch,
        execute_command,
        background_process,
    ]
    if web:
        tools.append(web_fetch)
    if subagents:
        tools.append(agent)
    return tools
