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

# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())

# Hidden from type checkers: a visible module `__getattr__` would make every misspelt
# `tiller.tools.X` type-check, and the old name should not.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """The names of the previous release, for one more release (not in `__all__`)."""
        if name == "ToolCtx":
            warnings.warn(
                "ToolCtx is now Jail; ToolCtx goes in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
            return Jail
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
