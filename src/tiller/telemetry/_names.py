"""The names tiller's spans and metrics use: the OpenTelemetry GenAI semantic conventions
as shipped in `opentelemetry-semantic-conventions` 0.66b2 (GenAI conventions, development
status), copied here as constants so that only `opentelemetry-api` is needed at run time.
`tests/telemetry/test_names.py` checks every `gen_ai.*` constant against that package.

tiller's own facts are `tiller.*` attributes (not part of any convention).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "AGENT_ID",
    "AGENT_NAME",
    "CONVERSATION_ID",
    "ERROR_TYPE",
    "INPUT_MESSAGES",
    "INVOKE_AGENT",
    "CHAT",
    "EXECUTE_TOOL",
    "OPERATION_DURATION",
    "OPERATION_NAME",
    "OUTPUT_MESSAGES",
    "PROVIDER_NAME",
    "REQUEST_MAX_TOKENS",
    "REQUEST_MODEL",
    "REQUEST_TEMPERATURE",
    "RESPONSE_FINISH_REASONS",
    "RESPONSE_MODEL",
    "SEMCONV_VERSION",
    "SYSTEM_INSTRUCTIONS",
    "TOKEN_TYPE",
    "TOKEN_TYPE_INPUT",
    "TOKEN_TYPE_OUTPUT",
    "TOKEN_USAGE",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_ID",
    "TOOL_CALL_RESULT",
    "TOOL_NAME",
    "TOOL_TYPE",
    "USAGE_CACHE_READ_INPUT_TOKENS",
    "USAGE_INPUT_TOKENS",
    "USAGE_OUTPUT_TOKENS",
    "USAGE_REASONING_OUTPUT_TOKENS",
]

#: The semantic-conventions release these names follow.
SEMCONV_VERSION: Final = "0.66b2"

# ── operations (`gen_ai.operation.name` values; also the spans' first word) ──────────
INVOKE_AGENT: Final = "invoke_agent"
CHAT: Final = "chat"
EXECUTE_TOOL: Final = "execute_tool"

# ── attributes ────────────────────────────────────────────────────────────────────────
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
AGENT_NAME: Final = "gen_ai.agent.name"
AGENT_ID: Final = "gen_ai.agent.id"
CONVERSATION_ID: Final = "gen_ai.conversation.id"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
TOKEN_TYPE: Final = "gen_ai.token.type"
TOKEN_TYPE_INPUT: Final = "input"
TOKEN_TYPE_OUTPUT: Final = "output"
#: The general convention's error attribute (stable).
ERROR_TYPE: Final = "error.type"

# ── metrics ───────────────────────────────────────────────────────────────────────────
TOKEN_USAGE: Final = "gen_ai.client.token.usage"
OPERATION_DURATION: Final = "gen_ai.client.operation.duration"

# ── tiller's own (not in any convention) ──────────────────────────────────────────────
#: Metric: one tool call's duration (seconds), by tool name and outcome.
TOOL_DURATION: Final = "tiller.tool.duration"
#: Metric: runs ended, by stop cause.
RUNS: Final = "tiller.runs"

RUN_ID: Final = "tiller.run.id"
THREAD_ID: Final = "tiller.thread.id"
STOP_CAUSE: Final = "tiller.stop_cause"
STEPS: Final = "tiller.steps"
COST_USD: Final = "tiller.cost_usd"
USAGE_COMPLETE: Final = "tiller.usage_complete"
BUDGET_SPENT_TOKENS: Final = "tiller.budget.spent.tokens"
BUDGET_SPENT_COST_USD: Final = "tiller.budget.spent.cost_usd"
BUDGET_SPENT_STEPS: Final = "tiller.budget.spent.steps"
TAINT: Final = "tiller.taint"
COMPACTIONS: Final = "tiller.compactions"
SUSPENDED: Final = "tiller.suspended"
INTERRUPTS: Final = "tiller.interrupts"
RESUMED: Final = "tiller.resumed"
SUBAGENT: Final = "tiller.subagent"
ERROR: Final = "tiller.error"
RUN_CALL: Final = "tiller.model.call"
GATE_DECISION: Final = "tiller.gate.decision"
GATE_DECIDED_BY: Final = "tiller.gate.decided_by"
RISK_CLASS: Final = "tiller.risk_class"
TOOL_IS_ERROR: Final = "tiller.tool.is_error"
TOOL_ANSWERED_FROM_RECORD: Final = "tiller.tool.recorded"
#: Why a `chat` span's call was made when it is not a turn of the run (`compaction`).
PURPOSE: Final = "tiller.purpose"
#: The event on a run's span when its history was compacted, and its attributes.
COMPACTION_EVENT: Final = "tiller.compaction"
COMPACTION_REASON: Final = "tiller.compaction.reason"
COMPACTION_BEFORE: Final = "tiller.compaction.before_tokens"
COMPACTION_AFTER: Final = "tiller.compaction.after_tokens"
