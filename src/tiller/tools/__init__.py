"""Tools: what the model may call, what each call receives, and what a run's tools may touch.

- `Tool`, `@tool`, `BaseTool`, `FunctionTool`, `ClientTool`, `ToolOutput`, `ToolError`,
  `Capability`, `RiskClass`: defining tools (what a tool may do is declared on it, law 12).
- `ExecContext`: what one call receives (cancel and background tokens, ids, the jail,
  progress, notify, safety mode, the user's goal, brokers, the web budget, the run's state).
- `SafetyMode`, `LiveSafetyMode`; `UserGoal`; `Progress`; `WebBudget`; `Notifier`;
  `CheckpointOrigin`; `QuestionBroker` and its questions (`CallbackQuestions`,
  `NoOneToAskQuestions`); `TaskBroker` and its `Task`s: what `ExecContext` carries.
- `Jail`: one run's jail and tool policy (the jail root, spill dir, output budget, shell
  timeout, live safety mode, the network grant (`WebAccess`, `HostRule`), an accepted
  unsandboxed shell).
- `Registry`: tools by name, what a phase shows, and executing one call into one result.
- `tiller.tools.builtin`: the coding tools (`coding_tools()`).

```
TillerError
├── UsageError
│   ├── DuplicateTool
│   └── ToolDefinitionError
├── InvalidToolArguments     (tiller.errors)
├── PathOutsideJail          a path the jail refuses
│   ├── InvalidPath          NUL bytes, control characters, not UTF-8
│   ├── PathTooLong          a name over NAME_MAX or a path over PATH_MAX bytes
│   ├── SymlinkRefused       a symlink met while walking from the jail's descriptor
│   ├── HardLinkRefused      a file with several links (it may live outside too)
│   └── ProtectedPathRefused a write to protected policy (tiller.toml, .tiller/, .git/...)
├── ChecklistError           a change the task checklist refuses
├── SandboxUnavailable       no bwrap or no namespaces, and no unsandboxed shell accepted
├── UnknownJob               a background job id this run does not have
├── PatternTooSlow           a `wait` pattern that backtracks past its time limit
├── TaintIndexError          the workspace's taint index could not be written
└── WebBudgetExceeded        the step's web downloads reached their limit
ToolError (Exception)         raised by tools on purpose; deliberately not a TillerError
```
"""

import warnings
from typing import TYPE_CHECKING, Any

from .. import _public

if TYPE_CHECKING:
    # For tiller's own packages (not API; not in __all__).
    from ._background import BackgroundJobs as BackgroundJobs
    from ._background import JobStatus as JobStatus
    from ._background import PatternTooSlow, UnknownJob
    from ._client_tool import ClientTool
    from ._errors import (
        DuplicateTool,
        HardLinkRefused,
        InvalidPath,
        PathOutsideJail,
        PathTooLong,
        ProtectedPathRefused,
        SymlinkRefused,
        ToolDefinitionError,
    )

    # For tiller's own packages (not API; not in __all__).
    from ._exec import CallSite as CallSite
    from ._exec import ExecContext
    from ._exec import LocalState as LocalState
    from ._exec import PendingContext as PendingContext
    from ._exec import StateAccess as StateAccess
    from ._exec import StepSignals as StepSignals
    from ._exec import ToolServices as ToolServices
    from ._exec import resolve_context as resolve_context
    from ._file_snapshots import MAX_SAVED_FILE_BYTES as MAX_SAVED_FILE_BYTES
    from ._file_snapshots import CheckpointOrigin

    # For tiller's own packages (not API; not in __all__).
    from ._file_snapshots import FileSnapshotter as FileSnapshotter
    from ._file_stamps import Stamps as Stamps
    from ._file_stamps import changed_files as changed_files
    from ._file_stamps import stamp_workspace as stamp_workspace
    from ._goal import UserGoal

    # For tiller's own packages (not API; not in __all__).
    from ._goal import person_text as person_text

    # For tiller's own packages (not API; not in __all__).
    from ._interrupt_questions import ASK_USER as ASK_USER
    from ._interrupt_questions import QUESTION_SCHEMA as QUESTION_SCHEMA
    from ._interrupt_questions import InterruptQuestions as InterruptQuestions
    from ._interrupt_questions import answers_from_payload as answers_from_payload
    from ._interrupt_questions import question_interrupt_id as question_interrupt_id
    from ._interrupt_questions import questions_metadata as questions_metadata

    # For tiller's own packages (not API; not in __all__).
    from ._jail import PROTECTED_PATHS as PROTECTED_PATHS
    from ._jail import SPILL_SUBDIR as SPILL_SUBDIR
    from ._jail import Jail
    from ._jail import private_copy as private_copy

    # For tiller's own packages (not API; not in __all__).
    from ._notify import Notice as Notice
    from ._notify import Notifier

    # For tiller's own packages (not API; not in __all__).
    from ._output import OutputBudget as OutputBudget
    from ._output import recorded_head as recorded_head

    # For tiller's own packages (not API; not in __all__): evals run a scorer's command in
    # a case's sandbox the way the shell tool runs one.
    from ._process import decode_output as decode_output
    from ._process import describe_exit as describe_exit
    from ._process import spawn as spawn
    from ._progress import PROGRESS_EVENT as PROGRESS_EVENT
    from ._progress import Progress

    # For tiller's own packages (not API; not in __all__).
    from ._question_brokers import CANCELLED_REASON as CANCELLED_REASON
    from ._question_brokers import CallbackQuestions, NoOneToAskQuestions
    from ._questions import (
        Answer,
        Answered,
        Dismissed,
        Question,
        QuestionBroker,
        QuestionOption,
        QuestionOutcome,
    )

    # For tiller's own packages (not API; not in __all__).
    from ._read_watch import stop_watching_reads as stop_watching_reads
    from ._read_watch import watch_reads as watch_reads
    from ._registry import Execution as Execution
    from ._registry import Lookup as Lookup
    from ._registry import Outcome as Outcome
    from ._registry import Registry
    from ._risk_class import RiskClass
    from ._safety import LiveSafetyMode, SafetyMode

    # For tiller's own packages (not API; not in __all__).
    from ._safety import least_permissive as least_permissive
    from ._sandbox import DEFAULT_SANDBOX as DEFAULT_SANDBOX
    from ._sandbox import Sandbox as Sandbox
    from ._sandbox import SandboxUnavailable

    # For tiller's own packages (not API; not in __all__).
    from ._taint_index import TAINT_INDEX as TAINT_INDEX
    from ._taint_index import IndexHealth as IndexHealth
    from ._taint_index import TaintIndex as TaintIndex
    from ._taint_index import TaintIndexError

    # For tiller's own packages (not API; not in __all__).
    from ._tasks import TASKS_EVENT as TASKS_EVENT
    from ._tasks import ChecklistError, Task, TaskBroker, TaskStatus
    from ._tasks import checklist_text as checklist_text
    from ._tool import BaseTool, Capability, FunctionTool, Tool, ToolError, ToolOutput, tool

    # For tiller's own packages (not API; not in __all__).
    from ._vetted_network import VettedTransport as VettedTransport
    from ._walk import remove_tree as remove_tree
    from ._web_access import HostRule, WebAccess

    # For tiller's own packages (not API; not in __all__).
    from ._web_access import LocalAddresses as LocalAddresses
    from ._web_budget import WebBudget, WebBudgetExceeded
    from .builtin import coding_tools

__all__ = [
    "Answer",
    "Answered",
    "BaseTool",
    "CallbackQuestions",
    "Capability",
    "ChecklistError",
    "CheckpointOrigin",
    "ClientTool",
    "Dismissed",
    "DuplicateTool",
    "ExecContext",
    "FunctionTool",
    "HardLinkRefused",
    "HostRule",
    "InvalidPath",
    "Jail",
    "LiveSafetyMode",
    "NoOneToAskQuestions",
    "Notifier",
    "PathOutsideJail",
    "PathTooLong",
    "PatternTooSlow",
    "Progress",
    "ProtectedPathRefused",
    "Question",
    "QuestionBroker",
    "QuestionOption",
    "QuestionOutcome",
    "Registry",
    "RiskClass",
    "SafetyMode",
    "SandboxUnavailable",
    "SymlinkRefused",
    "TaintIndexError",
    "Task",
    "TaskBroker",
    "TaskStatus",
    "Tool",
    "ToolDefinitionError",
    "ToolError",
    "ToolOutput",
    "UnknownJob",
    "UserGoal",
    "WebAccess",
    "WebBudget",
    "WebBudgetExceeded",
    "coding_tools",
    "tool",
]


#: Where each name lives. A name's module is imported the first time the name is asked
#: for (PEP 562), so importing one name does not import the whole namespace (DESIGN §10).
_HOMES = {
    "._background": ("BackgroundJobs", "JobStatus", "PatternTooSlow", "UnknownJob"),
    "._client_tool": ("ClientTool",),
    "._errors": (
        "DuplicateTool",
        "HardLinkRefused",
        "InvalidPath",
        "PathOutsideJail",
        "PathTooLong",
        "ProtectedPathRefused",
        "SymlinkRefused",
        "ToolDefinitionError",
    ),
    "._exec": (
        "CallSite",
        "ExecContext",
        "LocalState",
        "PendingContext",
        "StateAccess",
        "StepSignals",
        "ToolServices",
        "resolve_context",
    ),
    "._file_snapshots": ("MAX_SAVED_FILE_BYTES", "CheckpointOrigin", "FileSnapshotter"),
    "._file_stamps": ("Stamps", "changed_files", "stamp_workspace"),
    "._goal": ("UserGoal", "person_text"),
    "._interrupt_questions": (
        "ASK_USER",
        "QUESTION_SCHEMA",
        "InterruptQuestions",
        "answers_from_payload",
        "question_interrupt_id",
        "questions_metadata",
    ),
    "._jail": ("PROTECTED_PATHS", "SPILL_SUBDIR", "Jail", "private_copy"),
    "._notify": ("Notice", "Notifier"),
    "._output": ("OutputBudget", "recorded_head"),
    "._process": ("decode_output", "describe_exit", "spawn"),
    "._progress": ("PROGRESS_EVENT", "Progress"),
    "._question_brokers": ("CANCELLED_REASON", "CallbackQuestions", "NoOneToAskQuestions"),
    "._questions": (
        "Answer",
        "Answered",
        "Dismissed",
        "Question",
        "QuestionBroker",
        "QuestionOption",
        "QuestionOutcome",
    ),
    "._read_watch": ("stop_watching_reads", "watch_reads"),
    "._registry": ("Execution", "Lookup", "Outcome", "Registry"),
    "._risk_class": ("RiskClass",),
    "._safety": ("LiveSafetyMode", "SafetyMode", "least_permissive"),
    "._sandbox": ("DEFAULT_SANDBOX", "Sandbox", "SandboxUnavailable"),
    "._taint_index": ("TAINT_INDEX", "IndexHealth", "TaintIndex", "TaintIndexError"),
    "._tasks": (
        "TASKS_EVENT",
        "ChecklistError",
        "Task",
        "TaskBroker",
        "TaskStatus",
        "checklist_text",
    ),
    "._tool": (
        "BaseTool",
        "Capability",
        "FunctionTool",
        "Tool",
        "ToolError",
        "ToolOutput",
        "tool",
    ),
    "._vetted_network": ("VettedTransport",),
    "._walk": ("remove_tree",),
    "._web_access": ("HostRule", "WebAccess", "LocalAddresses"),
    "._web_budget": ("WebBudget", "WebBudgetExceeded"),
    ".builtin": ("coding_tools",),
}


def _previous_release(name: str) -> Any:
    """The names of the previous release, for one more release (not in `__all__`)."""
    if name == "ToolCtx":
        warnings.warn(
            "ToolCtx is now Jail; ToolCtx goes in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
        from ._jail import Jail as jail

        return jail
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Hidden from type checkers, which see the names through the imports above: a visible
# module `__getattr__` would make every misspelt `tiller.tools.X` type-check, and the old
# name should not.
if not TYPE_CHECKING:
    __getattr__ = _public.lazy_names(__name__, globals(), _HOMES, otherwise=_previous_release)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
