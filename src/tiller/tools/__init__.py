"""Tools: what the model may call, what each call receives, and what a run's tools may touch.

- `Tool`, `@tool`, `ToolOutput`, `ToolError`, `Capability`, `RiskClass`: defining tools
  (what a tool may do is declared on it, law 12).
- `ExecContext`: what one call receives (cancel and background tokens, ids, the jail,
  progress, notify, safety mode, the user's goal, brokers, the web budget, the run's state),
  built by `ExecContext.assemble(turn, call_id, progress, TurnSignals, CallSite,
  ToolServices)`.
- `SafetyMode`, `LiveSafetyMode`, `least_permissive`; `UserGoal`; `Progress`;
  `WebBudget`; `Notifier`; `QuestionBroker` and its questions; `CheckpointOrigin` and
  `FileSnapshotter`: what `ExecContext` carries.
- `TaskBroker`: the run's task checklist (the task tools write through it);
  `NoOneToAskQuestions`, `CallbackQuestions`: question brokers; `Fetcher`: `web_fetch`'s
  HTTP side; `Sandbox`: the `bwrap` command line `execute_command` runs under;
  `BackgroundJobs`: one run's detached commands.
- `ToolCtx`: one run's tool policy (the jail root, spill dir, output budget, shell
  timeout, live safety mode, the network grant, an accepted unsandboxed shell).
- `OutputBudget`: one turn's shared output byte budget; the overflow is spilled to files.
- `Registry`: tools by name, what a phase shows, and executing one call into one result.
- `TaintIndex`: the taint files carry from one run to the next (`.tiller/taint.json`).
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
└── WebBudgetExceeded        the turn's web downloads reached their limit
ToolError (Exception)         raised by tools on purpose; deliberately not a TillerError
```
"""

from .. import _public
from ._background import (
    BackgroundJobs,
    JobOutput,
    JobState,
    JobStatus,
    PatternTooSlow,
    UnknownJob,
)
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
from ._exec import CallSite, ExecContext, LocalState, StateAccess, ToolServices, TurnSignals
from ._fetcher import Fetched, Fetcher
from ._file_snapshots import CheckpointOrigin, FileSnapshotter
from ._fs import NAME_MAX, PATH_MAX, JailFS
from ._goal import UserGoal
from ._html import html_to_text
from ._interrupt_questions import (
    ASK_USER,
    QUESTION_SCHEMA,
    InterruptQuestions,
    answers_from_payload,
    question_interrupt_id,
    questions_metadata,
)
from ._jail import (
    DEFAULT_OUTPUT_BUDGET_BYTES,
    DEFAULT_SHELL_TIMEOUT,
    PROTECTED_PATHS,
    SPILL_SUBDIR,
    ToolCtx,
    private_copy,
)
from ._notify import Notice, Notifier
from ._output import OutputBudget
from ._progress import PROGRESS_EVENT, Progress
from ._question_brokers import (
    NO_ONE_TO_ASK,
    CallbackQuestions,
    NoOneToAskQuestions,
)
from ._questions import (
    Answer,
    Answered,
    Dismissed,
    Question,
    QuestionBroker,
    QuestionOption,
    QuestionOutcome,
)
from ._registry import Execution, Lookup, Outcome, Refusal, Registry
from ._risk_class import RiskClass
from ._safety import LiveSafetyMode, SafetyMode, least_permissive
from ._sandbox import DEFAULT_SANDBOX, Sandbox, SandboxUnavailable
from ._taint_index import IndexHealth, TaintEntry, TaintIndex, TaintIndexError
from ._tasks import (
    MAX_TASKS,
    TASKS_EVENT,
    ChecklistError,
    Task,
    TaskBroker,
    TaskSnapshot,
    TaskStatus,
    checklist_text,
)
from ._tool import BaseTool, Capability, FunctionTool, Tool, ToolError, ToolOutput, tool
from ._vetted_network import VettedTransport
from ._web_access import HostRule, LocalAddresses, PrivateDestination, WebAccess
from ._web_budget import (
    BODY_LIMIT_BYTES,
    TURN_LIMIT_BYTES,
    BodyMeter,
    WebBudget,
    WebBudgetExceeded,
)
from .builtin import Mailer, coding_tools

__all__ = [
    "ASK_USER",
    "BODY_LIMIT_BYTES",
    "DEFAULT_OUTPUT_BUDGET_BYTES",
    "DEFAULT_SANDBOX",
    "DEFAULT_SHELL_TIMEOUT",
    "MAX_TASKS",
    "NAME_MAX",
    "NO_ONE_TO_ASK",
    "PATH_MAX",
    "PROGRESS_EVENT",
    "PROTECTED_PATHS",
    "QUESTION_SCHEMA",
    "SPILL_SUBDIR",
    "TASKS_EVENT",
    "TURN_LIMIT_BYTES",
    "Answer",
    "Answered",
    "BackgroundJobs",
    "BaseTool",
    "BodyMeter",
    "CallSite",
    "CallbackQuestions",
    "Capability",
    "ChecklistError",
    "CheckpointOrigin",
    "ClientTool",
    "Dismissed",
    "DuplicateTool",
    "ExecContext",
    "Execution",
    "Fetched",
    "Fetcher",
    "FileSnapshotter",
    "FunctionTool",
    "HardLinkRefused",
    "HostRule",
    "IndexHealth",
    "InterruptQuestions",
    "InvalidPath",
    "JailFS",
    "JobOutput",
    "JobState",
    "JobStatus",
    "LiveSafetyMode",
    "LocalAddresses",
    "LocalState",
    "Lookup",
    "Mailer",
    "NoOneToAskQuestions",
    "Notice",
    "Notifier",
    "Outcome",
    "OutputBudget",
    "PathOutsideJail",
    "PathTooLong",
    "PatternTooSlow",
    "PrivateDestination",
    "Progress",
    "ProtectedPathRefused",
    "Question",
    "QuestionBroker",
    "QuestionOption",
    "QuestionOutcome",
    "Refusal",
    "Registry",
    "RiskClass",
    "SafetyMode",
    "Sandbox",
    "SandboxUnavailable",
    "StateAccess",
    "SymlinkRefused",
    "TaintEntry",
    "TaintIndex",
    "TaintIndexError",
    "Task",
    "TaskBroker",
    "TaskSnapshot",
    "TaskStatus",
    "Tool",
    "ToolCtx",
    "ToolDefinitionError",
    "ToolError",
    "ToolOutput",
    "ToolServices",
    "TurnSignals",
    "UnknownJob",
    "UserGoal",
    "VettedTransport",
    "WebAccess",
    "WebBudget",
    "WebBudgetExceeded",
    "answers_from_payload",
    "checklist_text",
    "coding_tools",
    "html_to_text",
    "least_permissive",
    "private_copy",
    "question_interrupt_id",
    "questions_metadata",
    "tool",
]

# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
