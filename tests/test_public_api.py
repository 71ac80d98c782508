"""The public namespaces: what each exports is pinned, documented and resolvable, and the
front door (`tiller`) re-exports what a user needs daily, cheaply, under its own name.

Every namespace's `__all__` is pinned below as a literal list, so adding or removing a
public name is a deliberate diff to this file. Plumbing that tiller's own packages import
stays importable from a namespace (`from ._m import X as X`) without being listed.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pickle
import pkgutil
import subprocess
import sys
import typing
from typing import Any

import pytest
from pydantic import TypeAdapter

import tiller
import tiller.events
import tiller.loop


def test_all_is_sorted_and_complete() -> None:
    for module in (tiller, tiller.events, tiller.loop):
        assert module.__all__ == sorted(module.__all__, key=lambda n: (not n.isupper(), n))
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is listed but missing"


def test_every_error_is_a_tiller_error() -> None:
    import tiller.errors

    for name in tiller.errors.__all__:
        assert issubclass(getattr(tiller.errors, name), tiller.TillerError)
        assert name in tiller.__all__, f"tiller.{name} should be exported"


def test_the_resume_errors_are_importable_from_tiller() -> None:
    """Pins the break where `RunStillRunning` (what a recovery raises while a live process
    holds the run's lease) could only be imported from `tiller.store._checkpoints`."""
    import tiller.loop
    import tiller.store

    assert tiller.RunStillRunning is tiller.store.RunStillRunning
    assert tiller.AlreadyResumed is tiller.store.AlreadyResumed
    assert tiller.ResumeReplayBlocked is tiller.loop.ResumeReplayBlocked
    for name in ("AlreadyResumed", "ResumeReplayBlocked", "RunStillRunning"):
        assert name in tiller.__all__
    assert "RunStillRunning" in tiller.store.__all__
    assert issubclass(tiller.RunStillRunning, tiller.TillerError)


#: `TillerError`s that never leave tiller: each is caught where it is raised and turned
#: into a result, a log line or another error, so a user has nothing to catch.
_INTERNAL_ERRORS = {
    # The compaction step catches it and records why it gave up (RunState.compaction).
    "tiller.loop._summary.SummaryFailed",
}


def test_every_error_a_user_can_meet_has_a_public_import() -> None:
    """Pins the sibling break of `RunStillRunning`: `TillerError`s defined in private
    modules (`MalformedRecord`, `PatternTooSlow`) that a public API raises, but that no
    public namespace exported, so catching them meant importing a private module."""
    import importlib
    import pkgutil

    public: set[type] = set()
    defined: dict[str, type] = {}
    for info in pkgutil.walk_packages(tiller.__path__, "tiller."):
        if info.name == "tiller.__main__" or info.name.startswith(
            ("tiller.store._nats", "tiller.examples")
        ):
            continue  # runs the CLI; NATS needs an optional extra; examples are not API
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, tiller.TillerError)
                and value.__module__ == info.name
                and not value.__name__.startswith("_")
            ):
                defined[f"{info.name}.{value.__name__}"] = value
        if not any(part.startswith("_") for part in info.name.split(".")):
            exported = getattr(module, "__all__", ())
            public.update(v for n in exported if isinstance(v := getattr(module, n), type))
    public.update(getattr(tiller, n) for n in tiller.__all__ if n != "__version__")
    private_only = sorted(
        name for name, cls in defined.items() if cls not in public and name not in _INTERNAL_ERRORS
    )
    assert private_only == [], f"export these from a public namespace: {private_only}"


def test_run_controls_are_public_beside_the_run_context() -> None:
    """Law 13's `RunControls` is exported where `RunContext` is (`tiller.loop`)."""
    assert "RunControls" in tiller.loop.__all__
    assert tiller.loop.RunControls is tiller.loop._controls.RunControls


# ── every namespace's __all__, pinned ────────────────────────────────────────────────

#: The order is the one `test_all_is_sorted_and_complete` keeps: constants first.
PUBLIC_API: dict[str, list[str]] = {
    "tiller": [
        "Agent",
        "AllowAll",
        "AlreadyResumed",
        "Budget",
        "CancellationToken",
        "Cancelled",
        "ExecContext",
        "HandleClosed",
        "InvalidResume",
        "InvalidToolArguments",
        "NewerSchemaError",
        "ProtocolViolation",
        "ResumeDecision",
        "ResumeReplayBlocked",
        "RunContext",
        "RunControls",
        "RunOptions",
        "RunResult",
        "RunStillRunning",
        "ScriptedModel",
        "StateDecodeError",
        "StatePatchError",
        "StopCause",
        "SubscriberLagged",
        "TillerError",
        "Tool",
        "ToolError",
        "UsageError",
        "__version__",
        "open_bus",
        "tool",
    ],
    "tiller.cli": [
        "app",
        "main",
    ],
    "tiller.events": [
        "SSE_CONTENT_TYPE",
        "ActivityDeltaEvent",
        "ActivitySnapshotEvent",
        "AgUiAgent",
        "AgUiContext",
        "CustomEvent",
        "Event",
        "FilterToolCalls",
        "Interrupt",
        "MessageHandle",
        "MessageLog",
        "MessagesSnapshotEvent",
        "RawEvent",
        "ReasoningEncryptedValueEvent",
        "ReasoningEndEvent",
        "ReasoningHandle",
        "ReasoningMessageChunkEvent",
        "ReasoningMessageContentEvent",
        "ReasoningMessageEndEvent",
        "ReasoningMessageStartEvent",
        "ReasoningStartEvent",
        "ResumeEntry",
        "RunErrorEvent",
        "RunFinishedEvent",
        "RunOutcome",
        "RunStartedEvent",
        "RunStream",
        "StateDeltaEvent",
        "StateSnapshotEvent",
        "StepFinishedEvent",
        "StepHandle",
        "StepStartedEvent",
        "StreamConsumed",
        "SubagentErrorEvent",
        "SubagentFinishedEvent",
        "SubagentHandle",
        "SubagentStartedEvent",
        "SubagentVisibility",
        "TextMessageChunkEvent",
        "TextMessageContentEvent",
        "TextMessageEndEvent",
        "TextMessageStartEvent",
        "ToolCallArgsEvent",
        "ToolCallChunkEvent",
        "ToolCallEndEvent",
        "ToolCallHandle",
        "ToolCallResultEvent",
        "ToolCallStartEvent",
        "ToolResultToState",
        "Transformer",
        "TransformerFactory",
        "encode_sse",
        "event_from_wire",
        "run_agent",
    ],
    "tiller.evals": [
        "DEFAULT_SPEC_ATTRIBUTE",
        "CaseChange",
        "CaseComparison",
        "EvalComparison",
        "EvalSpec",
        "compare_reports",
        "list_evals",
        "load_eval_spec",
        "load_report",
        "DATASET_SUFFIXES",
        "JUDGE_SYSTEM_PROMPT",
        "EVAL_RESULTS_BUCKET",
        "MAX_CASE_ID",
        "MAX_EVAL_ID",
        "Case",
        "CaseBudget",
        "CaseOutcome",
        "Dataset",
        "DatasetError",
        "ExactMatch",
        "ExpectedCall",
        "FunctionScorer",
        "Includes",
        "JsonMatch",
        "LlmJudge",
        "NumericMatch",
        "PassRates",
        "RegexMatch",
        "CaseResult",
        "CaseResultRecord",
        "CaseStatus",
        "Eval",
        "EvalProgress",
        "EvalRecord",
        "EvalReport",
        "EvalResultStore",
        "Score",
        "ScorerSummary",
        "Scorer",
        "ToolTraceMatch",
        "WorkspaceCheck",
        "check_case_id",
        "pass_at_k",
        "pass_hat_k",
        "pass_rates",
        "check_eval_id",
        "error_line",
        "rescore",
        "REPORT_JSON_FORMAT",
        "report_to_json",
        "report_to_junit",
        "write_json_report",
        "write_junit_report",
        "check_html_report",
        "render_html_report",
        "write_html_report",
    ],
    "tiller.fleet": [
        "BATCHES_BUCKET",
        "BATCH_BUDGET_BUCKET",
        "DEFAULT_CHUNK_RUNS",
        "HELD",
        "MAX_TEXT_DIFF_BYTES",
        "RESULTS_BUCKET",
        "RUN_QUEUE",
        "WORKERS_BUCKET",
        "WORKER_LOST",
        "WORKSPACES_BUCKET",
        "BatchAmounts",
        "BatchBudget",
        "BatchBudgetFromNewerTiller",
        "BatchBudgetStatus",
        "BatchCancelled",
        "BatchLimitsDiffer",
        "BatchStore",
        "Deferred",
        "FileChange",
        "FixtureNotFound",
        "FixtureTooLarge",
        "Fleet",
        "FleetLimits",
        "FleetStatus",
        "JobBudget",
        "JobPrice",
        "LimitedModel",
        "LocalWorkspaces",
        "MalformedBatchBudget",
        "MalformedJob",
        "MalformedLimitRecord",
        "MalformedWorkspace",
        "MaterializeFailed",
        "ModelLimit",
        "NoWorkspace",
        "NoWorkspaceDiff",
        "ResultStatus",
        "ResultStore",
        "RunGuard",
        "RunHandle",
        "RunJob",
        "RunOutcomeRecord",
        "SharedWorkspace",
        "SnapshotWorkspace",
        "StepBoundary",
        "UnknownBatch",
        "UnknownReservation",
        "Worker",
        "WorkerInfo",
        "WorkerRegistry",
        "WorkspaceDiff",
        "WorkspaceError",
        "WorkspaceFromNewerTiller",
        "WorkspaceNotStored",
        "WorkspacePathMissing",
        "WorkspaceProvider",
        "WorkspaceSpec",
        "limited_models",
        "load_diff",
        "materialize",
        "parse_model_limit",
        "provider_of",
        "snapshot_workspace",
        "workspace_diff",
    ],
    "tiller.loop": [
        "CALL_RERUN_EVENT",
        "MODEL_RETRY_EVENT",
        "Agent",
        "AgentRun",
        "Budget",
        "CaptureSink",
        "CaptureSinkFactory",
        "ContinueAs",
        "DetachSwitch",
        "Dispatch",
        "Finish",
        "FromCheckpoint",
        "Guardrail",
        "GuardrailOutcome",
        "LoopFailed",
        "MailboxRoute",
        "MaxResponseLength",
        "ModelCallRecord",
        "ModelTurn",
        "ModelWrapper",
        "NeverReview",
        "OutboxRoute",
        "PauseEveryStep",
        "PauseOnRisk",
        "PauseOnTools",
        "PauseOnWrites",
        "Pricing",
        "RefusalKeywords",
        "RefusedCall",
        "ResponseTooLarge",
        "ResumeDecision",
        "ResumeReplayBlocked",
        "ReviewPolicy",
        "RunContext",
        "RunControls",
        "RunOptions",
        "RunResult",
        "SteeringQueue",
        "Step",
        "SubagentConfig",
        "SubagentType",
        "Suspend",
        "ToolResultRecord",
        "ToolTraceEntry",
        "recover",
        "resume",
    ],
    "tiller.model": [
        "AnthropicModel",
        "ContextOverflow",
        "Finish",
        "FinishReason",
        "ForceTool",
        "Model",
        "ModelConnectionError",
        "ModelError",
        "ModelHTTPError",
        "ModelProtocolError",
        "ModelRequest",
        "ModelTimeout",
        "OUTPUT_MODES",
        "OUTPUT_TOOL_NAME",
        "OpenAICompatModel",
        "OutputMode",
        "OutputSchema",
        "ReasoningDelta",
        "RetryNotice",
        "RetryPolicy",
        "ScriptedModel",
        "StreamEvent",
        "TextDelta",
        "ToolCallArgsDelta",
        "ToolCallEnd",
        "ToolCallStart",
        "ToolChoice",
        "ToolSpec",
        "Turn",
        "TurnCall",
        "TurnError",
        "TurnInfo",
        "UsageReport",
        "resolve_model",
        "strict_json_schema",
    ],
    "tiller.policy": [
        "AllowAll",
        "Approver",
        "AskReason",
        "AutoClassifier",
        "Callback",
        "ClassifierBudget",
        "Decision",
        "DecisionKind",
        "ExplainedApprover",
        "FunctionHook",
        "HookConfigError",
        "HookEvent",
        "HookKind",
        "HookLike",
        "HookOutcome",
        "HookSet",
        "HookVerdict",
        "Interlock",
        "InterlockVerdict",
        "NoOneToAsk",
        "PolicyConfigError",
        "PolicyDecision",
        "PolicyEngine",
        "PolicyRule",
        "PolicyRules",
        "PostToolEvent",
        "PreToolEvent",
        "ReadOnly",
        "RiskClass",
        "RuleAction",
        "SessionEndEvent",
        "ShellHook",
        "VetRequest",
        "VetVerdict",
    ],
    "tiller.ops": [
        "Buckets",
        "CallVerdict",
        "Decided",
        "Reconciled",
        "approve",
        "close_cancelled",
        "deny",
        "held_approvals",
        "list_runs",
        "reconcile",
        "recover_run",
        "resume_decided",
        "resume_run",
        "uncertain_calls",
    ],
    "tiller.serve": [
        "AppSettings",
        "InvalidRunInput",
        "ServeSettings",
        "Server",
        "ThreadBusy",
        "create_app",
        "run_server",
    ],
    "tiller.store": [
        "AlreadyDecided",
        "AlreadyResumed",
        "ApprovalFromNewerTiller",
        "ApprovalStatus",
        "ApprovalStore",
        "Bus",
        "BusClosed",
        "BusMessage",
        "Checkpoint",
        "CheckpointFromNewerTiller",
        "CheckpointStore",
        "Clock",
        "ControlStore",
        "DeadLetter",
        "Entry",
        "EventLog",
        "EventLogFromNewerTiller",
        "FileCheckpointFromNewerTiller",
        "FileCheckpoints",
        "FileRestoreFailed",
        "HeldApproval",
        "Job",
        "JobLeaseLost",
        "JobQueue",
        "KeyValue",
        "Lease",
        "LeaseLost",
        "MailClaim",
        "MailIdentity",
        "MailMessage",
        "MailStatus",
        "MailboxFull",
        "MailboxStore",
        "MalformedApproval",
        "MalformedControl",
        "MalformedFileCheckpoint",
        "MalformedMail",
        "MalformedOutboxItem",
        "MalformedRecord",
        "MemoryBus",
        "MessageTooLarge",
        "NotFound",
        "OutboxItem",
        "OutboxItemFromNewerTiller",
        "OutboxResult",
        "OutboxStatus",
        "OutboxStatusError",
        "OutboxStore",
        "QuarantinedMail",
        "QueueDepth",
        "QueueOptions",
        "RecordFromNewerTiller",
        "RestoreReport",
        "RevisionConflict",
        "RunDurability",
        "RunStillRunning",
        "SqliteBus",
        "StoreDurability",
        "StoreError",
        "StoreUnavailable",
        "Subscription",
        "UnknownApproval",
        "UnknownOutboxItem",
        "open_bus",
    ],
    "tiller.telemetry": [
        "SEMCONV_VERSION",
        "ChatSpan",
        "OtelMissing",
        "RunTrace",
        "Telemetry",
        "configure_otlp",
        "context_of",
        "traceparent_of",
    ],
    "tiller.tools": [
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
    ],
    "tiller.tools.builtin": [
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
    ],
    "tiller.tools.mcp": [
        "McpClient",
        "McpConfigError",
        "McpServerConfig",
        "McpServers",
        "McpStartError",
        "McpTool",
        "SkippedTool",
        "open_mcp_tools",
    ],
}

#: Packages that are not API, with their subpackages (an example eval's), so they pin no
#: `__all__`.
_NOT_API = {"tiller.examples"}


def _packages() -> set[str]:
    found = {"tiller"}
    for info in pkgutil.walk_packages(tiller.__path__, "tiller."):
        if info.ispkg and not any(part.startswith("_") for part in info.name.split(".")):
            found.add(info.name)
    return {name for name in found if not name.startswith(tuple(_NOT_API))}


def test_every_package_has_its_all_pinned() -> None:
    assert _packages() == set(PUBLIC_API)


@pytest.mark.parametrize("namespace", sorted(PUBLIC_API))
def test_all_is_exactly_the_pinned_list(namespace: str) -> None:
    module = importlib.import_module(namespace)
    assert list(module.__all__) == PUBLIC_API[namespace]


@pytest.mark.parametrize("namespace", sorted(PUBLIC_API))
def test_all_has_no_duplicates_and_every_name_resolves(namespace: str) -> None:
    module = importlib.import_module(namespace)
    assert len(set(module.__all__)) == len(module.__all__)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


# ── every exported name is documented ────────────────────────────────────────────────

#: Exported values that cannot carry a docstring of their own (strings, `Literal`s, unions
#: and callable aliases: `#:` comments are not visible at runtime), each with what it
#: means. A new one is documented here, deliberately; classes, functions and tools carry
#: their own documentation and are checked for it.
DOCUMENTED_VALUES: dict[str, str] = {
    "tiller.__version__": "the installed tiller's version",
    "tiller.telemetry.SEMCONV_VERSION": "the semantic-conventions release the names follow",
    "tiller.cli.app": "the `tiller` command's Typer application",
    "tiller.events.SSE_CONTENT_TYPE": "the media type of an AG-UI SSE response",
    "tiller.events.TransformerFactory": "builds one run's stream transformers",
    "tiller.evals.DATASET_SUFFIXES": "the dataset file suffixes Dataset.load reads, by format",
    "tiller.evals.MAX_CASE_ID": "the longest case id (it is part of its runs' ids)",
    "tiller.evals.JUDGE_SYSTEM_PROMPT": "the system prompt the LLM judge grades with",
    "tiller.evals.EVAL_RESULTS_BUCKET": "the bucket eval results are kept in",
    "tiller.evals.MAX_EVAL_ID": "the longest eval id (it is part of its runs' ids)",
    "tiller.evals.CaseStatus": "what a resumed eval does with a case run's record",
    "tiller.evals.REPORT_JSON_FORMAT": "the `format` of an eval report's JSON document",
    "tiller.evals.DEFAULT_SPEC_ATTRIBUTE": "the attribute an eval spec reference names by default",
    "tiller.evals.CaseChange": "what happened to one case between two evals",
    "tiller.fleet.BATCH_BUDGET_BUCKET": "the bucket batch budgets are kept in by default",
    "tiller.fleet.DEFAULT_CHUNK_RUNS": "a run without ceilings gets the batch's rest over this",
    "tiller.fleet.MAX_TEXT_DIFF_BYTES": "the largest file a workspace diff shows as text",
    "tiller.fleet.WORKSPACES_BUCKET": "the bucket of workspace snapshot manifests and diffs",
    "tiller.loop.CALL_RERUN_EVENT": "the CUSTOM event of a call run again after a crash",
    "tiller.loop.MODEL_RETRY_EVENT": "the CUSTOM event of a model call retried before streaming",
    "tiller.fleet.BATCHES_BUCKET": "the bucket of batch members and cancellations",
    "tiller.fleet.HELD": "the result statuses that wait for a person",
    "tiller.fleet.RESULTS_BUCKET": "the bucket of fleet runs' results",
    "tiller.fleet.RUN_QUEUE": "the fleet's default run queue",
    "tiller.fleet.ResultStatus": "how a fleet run ended (or that it waits for a person)",
    "tiller.fleet.WORKERS_BUCKET": "the bucket of workers' heartbeats",
    "tiller.fleet.WORKER_LOST": "the RUN_ERROR code closing a segment whose worker died",
    "tiller.fleet.WorkspaceSpec": "where a fleet run works: none, a shared path or a snapshot",
    "tiller.loop.CaptureSinkFactory": "builds one run's capture sink from its run id",
    "tiller.loop.Step": "one step of a run, as `agent.iter` yields it",
    "tiller.ops.CallVerdict": "a person's verdict on an uncertain call: done, failed, rerun",
    "tiller.model.FinishReason": "why a model response ended",
    "tiller.model.StreamEvent": "one event of a model's response stream",
    "tiller.model.OUTPUT_MODES": "the structured-output modes: native, tool, prompted",
    "tiller.model.OUTPUT_TOOL_NAME": "the output tool's name in tool mode (final_result)",
    "tiller.model.OutputMode": "how a structured answer is asked for: native, tool, prompted",
    "tiller.model.ToolChoice": "whether and which tool a request makes the model call",
    "tiller.policy.DecisionKind": "the policy engine's answer: allow, ask, classify, deny",
    "tiller.policy.HookEvent": "what a hook is called with (pre_tool, post_tool, session_end)",
    "tiller.policy.HookKind": "when a hook runs: pre_tool, post_tool or session_end",
    "tiller.policy.HookLike": "a hook: a shell hook or a Python function hook",
    "tiller.policy.RuleAction": "what a policy rule does: allow, ask or deny",
    "tiller.store.ApprovalStatus": "a held approval's status",
    "tiller.store.Clock": "gives the time leases and job leases are measured in",
    "tiller.store.MailStatus": "a mailbox message's status",
    "tiller.store.OutboxStatus": "an outbox item's status",
    "tiller.tools.QuestionOutcome": "what a question broker returns: answered or dismissed",
    "tiller.tools.TaskStatus": "a checklist task's status",
}


def _undocumented(namespace: str, name: str, value: Any) -> bool:
    if f"{namespace}.{name}" in DOCUMENTED_VALUES:
        return False
    if inspect.isclass(value) or inspect.isroutine(value):
        return not (inspect.getdoc(value) or "").strip()
    if isinstance(value, tiller.tools.Tool):
        return not value.description.strip()  # a tool's documentation is what the model reads
    return True  # a value with no docstring of its own: document it in the table


def test_every_exported_name_is_documented() -> None:
    undocumented = [
        f"{namespace}.{name}"
        for namespace, names in PUBLIC_API.items()
        for name in names
        if _undocumented(namespace, name, getattr(importlib.import_module(namespace), name))
    ]
    assert undocumented == []


def test_the_documented_values_table_lists_only_exported_names() -> None:
    exported = {f"{ns}.{name}" for ns, names in PUBLIC_API.items() for name in names}
    assert set(DOCUMENTED_VALUES) <= exported
    assert all(text.strip() for text in DOCUMENTED_VALUES.values())


# ── the front door ───────────────────────────────────────────────────────────────────

_FRONT = [name for name in PUBLIC_API["tiller"] if name != "__version__"]


def _python(code: str) -> str:
    """Run `code` in a fresh interpreter (nothing imported yet) and return its output."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_the_names_a_user_needs_daily_come_from_tiller() -> None:
    from tiller import (  # noqa: F401 - the import is what is tested
        Agent,
        AllowAll,
        Budget,
        CancellationToken,
        ExecContext,
        RunContext,
        RunOptions,
        RunResult,
        ScriptedModel,
        StopCause,
        ToolError,
        tool,
    )

    assert len(_FRONT) <= 30, "the front door stays short"
    assert set(_FRONT) <= set(dir(tiller))


def test_attribute_access_after_a_bare_import_works() -> None:
    assert _python("import tiller; tiller.Agent; tiller.tool; print(tiller.loop.__name__)") == (
        "tiller.loop"
    )


def test_importing_tiller_does_not_import_the_loop() -> None:
    """`import tiller` stays cheap (DESIGN §10): the loop, the tools, pydantic and the
    AG-UI models are imported when a front-door name is first used, not before."""
    loaded = _python(
        "import sys, tiller; print(' '.join(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('tiller', 'pydantic', 'ag_ui'))))"
    ).split()
    assert loaded == ["tiller", "tiller._public", "tiller.cancel", "tiller.errors"]


@pytest.mark.parametrize("name", _FRONT)
def test_each_front_door_name_reports_tiller_as_its_module(name: str) -> None:
    assert getattr(tiller, name).__module__ == "tiller"


@pytest.mark.parametrize(
    "home",
    [
        "tiller.cancel",
        "tiller.errors",
        "tiller.loop",
        "tiller.model",
        "tiller.policy",
        "tiller.state",
        "tiller.store",
        "tiller.tools",
    ],
)
def test_the_module_is_tiller_before_the_front_door_is_used(home: str) -> None:
    """Set where the name is defined, not on first access through `tiller`: importing the
    home namespace alone already shows it."""
    names = [n for n in _FRONT if _home_of(n) == home]
    assert names
    code = f"import {home} as m; print(' '.join(getattr(m, n).__module__ for n in {names!r}))"
    assert _python(code).split() == ["tiller"] * len(names)


def _home_of(name: str) -> str:
    from tiller import _public

    return {**_public.FRONT, **_public.EAGER}[name]


def test_every_front_door_name_has_a_home_in_the_table() -> None:
    from tiller import _public

    assert sorted({**_public.FRONT, **_public.EAGER}) == sorted(_FRONT)
    for name in _FRONT:
        home = importlib.import_module(_home_of(name))
        assert getattr(home, name) is getattr(tiller, name)


def _defined_in(name: str) -> str | None:
    """The module a lazy namespace imports `name` from (None for an eager home)."""
    namespace = _home_of(name)
    table = getattr(importlib.import_module(namespace), "_HOMES", {})
    for module, defined in table.items():
        if name in defined:
            return importlib.util.resolve_name(module, namespace)
    return None


@pytest.mark.parametrize("name", [n for n in _FRONT if _defined_in(n) is not None])
def test_the_module_is_tiller_however_the_name_was_first_reached(name: str) -> None:
    """tiller's own modules import a name from the module that defines it (the loop takes
    `RunResult` from `._result`), never asking the namespace: what such a module hands out
    already says `tiller`, so a result's type, a traceback, help() and a pickle read the same
    in every process, whether or not anyone asked `tiller.RunResult` first."""
    module = _defined_in(name)
    code = (
        f"import importlib; m = importlib.import_module({module!r}); "
        f"print(getattr(m, {name!r}).__module__)"
    )
    assert _python(code) == "tiller"


def test_a_run_s_result_says_tiller_when_only_the_namespace_was_used() -> None:
    code = (
        "from tiller.loop import Agent\n"
        "from tiller.model import ScriptedModel\n"
        "print(type(Agent(ScriptedModel(['done'])).run_sync('go')).__module__)\n"
    )
    assert _python(code) == "tiller"


def test_rehomed_values_pickle_repr_and_introspect_as_before() -> None:
    options = tiller.RunOptions().with_max_steps(7)
    assert pickle.loads(pickle.dumps(options)) == options
    assert pickle.loads(pickle.dumps(tiller.StopCause.COMPLETED)) is tiller.StopCause.COMPLETED
    decision = tiller.ResumeDecision(approve=True)
    assert pickle.loads(pickle.dumps(decision)) == decision
    error = pickle.loads(pickle.dumps(tiller.UsageError("wrong")))
    assert type(error) is tiller.UsageError and str(error) == "wrong"
    assert repr(options).startswith("RunOptions(max_steps=7,")
    assert repr(tiller.Agent).startswith("<class 'tiller.Agent'>")
    # The string annotations were resolved where they were written, so introspection that
    # looks them up by `__module__` still finds them.
    hints = typing.get_type_hints(tiller.RunResult)
    assert hints["usage"] is tiller.loop.RunResult.__dataclass_fields__["usage"].type
    schema = TypeAdapter(tiller.Budget).json_schema()
    assert schema["title"] == "Budget" and "max_steps" in schema["properties"]
