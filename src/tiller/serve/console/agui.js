// The console's model of one thread, and how AG-UI events change it.
//
// Pure data, no DOM: the same code runs in the browser and under `node` in the tests
// (tests/serve/console_reducer_check.mjs). `applyEvent` changes the thread in place, since a
// long answer arrives as thousands of small deltas and copying the message list for each one
// would be wasteful; the view redraws from the thread after a batch of events.

import { applyPatch } from "./jsonpatch.js";

/** A fresh, empty thread. `status` is one of idle | running | interrupted | finished |
 * cancelled | error. */
export function newThread(threadId) {
  return {
    threadId,
    runId: null,
    status: "idle",
    step: null,
    messages: [],
    state: {},
    // The open interrupts of the last run (approvals and questions), answered by a resume.
    interrupts: [],
    // Frontend tool calls the last run left for the client (the console offers none, but a
    // run started elsewhere may have them; they are shown, not answered).
    pendingToolCallIds: [],
    error: null,
    // Things the runtime said outside the conversation (tiller.notice, steering folded in).
    notices: [],
    // toolCallId -> progress reported by the running tool (tiller.progress): `lines`, the
    // status and output reports as they came; `output`, the command's output so far;
    // `status` and `fraction`, its latest status line.
    progress: {},
    // subagentRunId -> a subagent's segment: {id, name, description, parentToolCallId,
    // status (running | finished | failed | suspended), text, error}.
    subagents: {},
    // Each compaction of the history (tiller.compacted), oldest first.
    compactions: [],
    // Set when a STATE_DELTA did not apply: the state shown may be behind until a snapshot.
    stateStale: false,
    // The id of the last `id:` frame seen on an events stream, to resume a dropped stream.
    lastEventId: null,
  };
}

function findMessage(thread, id) {
  // Newest first: streaming events almost always address the last message.
  for (let i = thread.messages.length - 1; i >= 0; i -= 1) {
    if (thread.messages[i].id === id) return thread.messages[i];
  }
  return undefined;
}

/** The message with `id`, created (with `fields`) at the end of the list when missing. */
function ensureMessage(thread, id, fields) {
  let message = findMessage(thread, id);
  if (message === undefined) {
    message = { id, ...fields };
    thread.messages.push(message);
  }
  return message;
}

/** `{call, message}` for a tool call id, searching the assistant messages newest first. */
export function findToolCall(thread, toolCallId) {
  for (let i = thread.messages.length - 1; i >= 0; i -= 1) {
    const message = thread.messages[i];
    const call = message.toolCalls?.find((c) => c.id === toolCallId);
    if (call !== undefined) return { call, message };
  }
  return undefined;
}

/** The tool message answering `toolCallId`, if any. */
export function findToolResult(thread, toolCallId) {
  for (let i = thread.messages.length - 1; i >= 0; i -= 1) {
    const message = thread.messages[i];
    if (message.role === "tool" && message.toolCallId === toolCallId) return message;
  }
  return undefined;
}

function startToolCall(thread, { toolCallId, toolCallName, parentMessageId, subagentRunId }) {
  if (findToolCall(thread, toolCallId) !== undefined) return;
  // A call belongs to its parent assistant message (the one whose text came just before);
  // without one, it gets a message of its own, as the AG-UI client does.
  const parentId = parentMessageId ?? toolCallId;
  const parent = ensureMessage(thread, parentId, { role: "assistant", subagentRunId });
  parent.toolCalls ??= [];
  parent.toolCalls.push({
    id: toolCallId,
    type: "function",
    function: { name: toolCallName ?? "", arguments: "" },
  });
}

function appendToolArgs(thread, toolCallId, delta) {
  const found = findToolCall(thread, toolCallId);
  if (found !== undefined) found.call.function.arguments += delta ?? "";
}

function appendText(thread, id, delta, fields) {
  const message = ensureMessage(thread, id, fields);
  message.content = (typeof message.content === "string" ? message.content : "") + (delta ?? "");
}

function note(thread, kind, text) {
  thread.notices.push({ kind, text });
  // A console left open for a day should not grow without bound.
  if (thread.notices.length > 200) thread.notices.splice(0, thread.notices.length - 200);
}

/** The most output of one call kept (characters): the tail, as a terminal scrolls. */
const OUTPUT_KEPT = 64 * 1024;

function applyProgress(thread, value) {
  const progress = (thread.progress[value.toolCallId] ??= {
    lines: [],
    output: "",
    status: null,
    fraction: null,
  });
  const kind = value.kind ?? "status";
  if (kind === "output") {
    progress.output += String(value.text ?? "");
    if (progress.output.length > OUTPUT_KEPT) {
      progress.output = progress.output.slice(progress.output.length - OUTPUT_KEPT);
    }
    return;
  }
  const text = value.message ?? value.text ?? kind;
  progress.lines.push({ kind, text: String(text), fraction: value.fraction });
  if (progress.lines.length > 500) progress.lines.splice(0, progress.lines.length - 500);
  if (kind === "status" || kind === "subagent_activity") {
    progress.status = String(text);
    if (typeof value.fraction === "number") progress.fraction = value.fraction;
  }
}

function applyCustom(thread, name, value) {
  if (name === "tiller.progress" && value && typeof value.toolCallId === "string") {
    applyProgress(thread, value);
  } else if (name === "tiller.compacted" && value && typeof value === "object") {
    thread.compactions.push(value);
  } else if (name === "tiller.notice" && value) {
    note(thread, value.source ?? "notice", String(value.text ?? ""));
  } else if (name === "tiller.queued_input" && value) {
    note(thread, "steering", `Steering reached the run: ${value.text ?? ""}`);
  } else if (name === "tiller.model_retry" && value && typeof value === "object") {
    note(thread, "model-retry", retryNotice(value));
  }
}

/** The most of a provider's error message a retry notice shows (characters). */
const RETRY_ERROR_SHOWN = 200;

/** A retried model call (tiller.model_retry), as a person reads it: "The model did not
 * answer (HTTP 500: …); trying again in 2 s, attempt 2 of 4." `attempt` is the one that
 * failed, so the one about to start is the next. The provider's text is kept as text (the
 * view never parses it as markup) and cut to a line. */
export function retryNotice(value) {
  let error = String(value.error ?? "").trim();
  if (error.length > RETRY_ERROR_SHOWN) error = `${error.slice(0, RETRY_ERROR_SHOWN)}…`;
  const why = error ? ` (${error})` : "";
  const delay = Number(value.delaySeconds);
  const when =
    Number.isFinite(delay) && delay >= 0.1 ? `in ${Number(delay.toFixed(1))} s` : "now";
  const attempt = Number(value.attempt);
  const max = Number(value.maxAttempts);
  const which =
    Number.isInteger(attempt) && Number.isInteger(max) ? `, attempt ${attempt + 1} of ${max}` : "";
  return `The model did not answer${why}; trying again ${when}${which}.`;
}

/** Change `thread` by one AG-UI event (a parsed JSON object). Unknown types are ignored:
 * the console shows what it understands and never fails on something newer. */
export function applyEvent(thread, event) {
  if (!event || typeof event.type !== "string") return thread;
  // Events of a chunk stream may omit ids after the first; remember the last ones.
  switch (event.type) {
    case "RUN_STARTED":
      thread.runId = event.runId;
      if (event.threadId) thread.threadId = event.threadId;
      thread.status = "running";
      thread.step = null;
      thread.interrupts = [];
      thread.pendingToolCallIds = [];
      thread.error = null;
      thread.notices = []; // they were about the previous run
      break;
    case "RUN_FINISHED": {
      const outcome = event.outcome ?? { type: "success" };
      thread.step = null;
      if (outcome.type === "interrupt") {
        thread.status = "interrupted";
        thread.interrupts = Array.isArray(outcome.interrupts) ? outcome.interrupts : [];
      } else if (outcome.type === "cancelled") {
        thread.status = "cancelled";
      } else {
        // An unknown outcome counts as success (AG-UI's rule).
        thread.status = "finished";
        thread.pendingToolCallIds = outcome.pendingToolCallIds ?? [];
      }
      break;
    }
    case "RUN_ERROR":
      thread.status = "error";
      thread.step = null;
      thread.error = event.code ? `${event.message} (${event.code})` : String(event.message);
      break;
    case "STEP_STARTED":
      thread.step = event.stepName;
      break;
    case "STEP_FINISHED":
      if (thread.step === event.stepName) thread.step = null;
      break;

    case "TEXT_MESSAGE_START":
      ensureMessage(thread, event.messageId, {
        role: event.role ?? "assistant",
        content: "",
        subagentRunId: event.subagentRunId,
      });
      break;
    case "TEXT_MESSAGE_CONTENT":
      appendText(thread, event.messageId, event.delta, {
        role: "assistant",
        content: "",
        subagentRunId: event.subagentRunId,
      });
      break;
    case "TEXT_MESSAGE_CHUNK": {
      const id = event.messageId ?? thread.chunkMessageId;
      if (id === undefined) break;
      thread.chunkMessageId = id;
      appendText(thread, id, event.delta, { role: event.role ?? "assistant", content: "" });
      break;
    }

    case "TOOL_CALL_START":
      startToolCall(thread, event);
      break;
    case "TOOL_CALL_ARGS":
      appendToolArgs(thread, event.toolCallId, event.delta);
      break;
    case "TOOL_CALL_CHUNK": {
      const id = event.toolCallId ?? thread.chunkToolCallId;
      if (id === undefined) break;
      thread.chunkToolCallId = id;
      startToolCall(thread, { ...event, toolCallId: id });
      appendToolArgs(thread, id, event.delta);
      break;
    }
    case "TOOL_CALL_RESULT": {
      const message = ensureMessage(thread, event.messageId, {
        role: "tool",
        toolCallId: event.toolCallId,
        // A subagent's result is its own, like its calls: the server leaves it out of the
        // parent's conversation when the thread is sent back.
        subagentRunId: event.subagentRunId,
      });
      message.content = event.content;
      break;
    }

    case "REASONING_MESSAGE_START":
      ensureMessage(thread, event.messageId, { role: "reasoning", content: "" });
      break;
    case "REASONING_MESSAGE_CONTENT":
    case "REASONING_MESSAGE_CHUNK":
      if (event.messageId !== undefined) {
        appendText(thread, event.messageId, event.delta, { role: "reasoning", content: "" });
      }
      break;

    case "STATE_SNAPSHOT":
      thread.state = event.snapshot ?? {};
      thread.stateStale = false;
      break;
    case "STATE_DELTA":
      try {
        thread.state = applyPatch(thread.state, event.delta);
      } catch (error) {
        // Keep the last good state and say so; the next snapshot puts it right.
        thread.stateStale = true;
        note(thread, "state", `A state change did not apply (${error.message}).`);
      }
      break;
    case "MESSAGES_SNAPSHOT":
      // The server's view of the conversation is authoritative: it replaces ours, including
      // the user message we showed before the server had it.
      thread.messages = structuredClone(event.messages ?? []);
      break;

    case "CUSTOM":
      applyCustom(thread, event.name, event.value);
      break;

    case "SUBAGENT_STARTED":
      thread.subagents[event.subagentRunId] = {
        id: event.subagentRunId,
        name: event.name ?? "subagent",
        description: event.description ?? "",
        parentToolCallId: event.parentToolCallId ?? null,
        parentSubagentRunId: event.parentSubagentRunId ?? null,
        status: "running",
        text: "",
        error: null,
      };
      break;
    case "SUBAGENT_FINISHED": {
      const segment = thread.subagents[event.subagentRunId];
      if (segment === undefined) break;
      const outcome = event.outcome?.type ?? event.outcome?.status;
      segment.status = outcome === "suspended" ? "suspended" : "finished";
      segment.text = typeof event.result?.text === "string" ? event.result.text : "";
      break;
    }
    case "SUBAGENT_ERROR": {
      const segment = thread.subagents[event.subagentRunId];
      if (segment === undefined) break;
      segment.status = "failed";
      segment.error = String(event.message ?? "");
      break;
    }
    default:
      break;
  }
  return thread;
}

/** The messages to send back in a RunAgentInput: the conversation, without the console's own
 * bookkeeping fields. Reasoning stays in: it is part of the thread at AG-UI 1.0. */
export function messagesForInput(thread) {
  return thread.messages.map((message) => {
    const copy = {};
    for (const [key, value] of Object.entries(message)) {
      if (value !== undefined && value !== null) copy[key] = value;
    }
    return copy;
  });
}

/** Whether `interrupt` asks a question (ask_user) rather than for an approval. */
export function isQuestion(interrupt) {
  return interrupt.reason === "question";
}

// ── Server-sent events ──────────────────────────────────────────────────────────────────

/** An incremental parser of the `text/event-stream` format: feed it text as it arrives and
 * it calls `onFrame({id, event, data})` for each complete frame. Comments (`: keep-alive`)
 * are skipped; several `data:` lines join with "\n", as the SSE spec says. */
export class SseParser {
  constructor(onFrame) {
    this.onFrame = onFrame;
    this.buffer = "";
    this.reset();
  }

  reset() {
    this.data = [];
    this.id = null;
    this.event = null;
  }

  feed(text) {
    this.buffer += text;
    // A line ends at \n, \r\n or \r; a trailing \r may be half of a \r\n, so wait for more.
    const pattern = /\r\n|\n|\r(?!$)/g;
    let start = 0;
    let match;
    while ((match = pattern.exec(this.buffer)) !== null) {
      this.line(this.buffer.slice(start, match.index));
      start = match.index + match[0].length;
    }
    this.buffer = this.buffer.slice(start);
  }

  /** The stream ended: a frame without its closing blank line is dropped, per the spec. */
  end() {
    this.buffer = "";
    this.reset();
  }

  line(line) {
    if (line === "") {
      if (this.data.length > 0) {
        this.onFrame({ id: this.id, event: this.event, data: this.data.join("\n") });
      }
      this.reset();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "id") this.id = value;
    else if (field === "event") this.event = value;
  }
}

/** Read a fetch Response carrying SSE, calling `onEvent(event, id)` with each frame's parsed
 * JSON. Resolves when the stream ends; rejects on a network error or an abort. */
export async function readEventStream(response, onEvent) {
  const parser = new SseParser((frame) => {
    let event;
    try {
      event = JSON.parse(frame.data);
    } catch {
      return; // not ours to show; a malformed frame must not end the stream
    }
    onEvent(event, frame.id);
  });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value, { stream: true }));
    }
    parser.feed(decoder.decode());
    parser.end();
  } finally {
    reader.releaseLock();
  }
}

/** True for the events after which a run sends nothing more. */
export function isTerminal(event) {
  return event.type === "RUN_FINISHED" || event.type === "RUN_ERROR";
}
