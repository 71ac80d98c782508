// Drawing the thread: the conversation, the tool calls, and the side panels.
//
// Elements are kept per message and per tool call (keyed by id) and updated in place, so a
// streaming answer changes one text node per frame, and an opened <details> stays open while
// the run goes on. The interrupt form is the exception: it is rebuilt only when the set of
// open interrupts changes, so what a person typed there is never redrawn away.

import { findToolResult } from "./agui.js";
import { h, placeChildren, setText } from "./dom.js";

/** Pretty JSON when `text` parses, else the text as it is (streaming arguments are partial). */
export function prettyJson(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2) ?? "";
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** A message's text: a string, or the text parts of a multi-part user message. */
function messageText(message) {
  if (typeof message.content === "string") return message.content;
  if (Array.isArray(message.content)) {
    return message.content
      .map((part) => (part.type === "text" ? part.text : `[${part.type}]`))
      .join("\n");
  }
  return "";
}

const ROLE_LABEL = {
  user: "You",
  assistant: "Assistant",
  system: "System",
  developer: "Developer",
  tool: "Tool result",
  activity: "Activity",
};

export class ConversationView {
  constructor(list) {
    this.list = list;
    this.items = new Map(); // message key -> {el, update(message, thread)}
    this.calls = new Map(); // toolCallId -> {el, update(call, thread)}
  }

  /** Forget every element (a new thread). */
  clear() {
    this.items.clear();
    this.calls.clear();
    this.list.replaceChildren();
  }

  render(thread) {
    const callIds = new Set();
    for (const message of thread.messages) {
      for (const call of message.toolCalls ?? []) callIds.add(call.id);
    }
    const wanted = [];
    const keys = new Set();
    for (const message of thread.messages) {
      // A tool result is drawn inside its call; only an orphan gets a block of its own.
      if (message.role === "tool" && callIds.has(message.toolCallId)) continue;
      const key = `${message.role}:${message.id}`;
      keys.add(key);
      let item = this.items.get(key);
      if (item === undefined) {
        item = this.createItem(message);
        this.items.set(key, item);
      }
      item.update(message, thread);
      wanted.push(item.el);
    }
    for (const key of [...this.items.keys()]) if (!keys.has(key)) this.items.delete(key);
    for (const id of [...this.calls.keys()]) if (!callIds.has(id)) this.calls.delete(id);
    placeChildren(this.list, wanted);
  }

  createItem(message) {
    if (message.role === "reasoning") return reasoningItem();
    if (message.role === "assistant") return this.assistantItem();
    return plainItem(message.role);
  }

  assistantItem() {
    const body = h("div", { class: "body", testid: "message-text" });
    const calls = h("div", { class: "tool-calls" });
    const badge = h("span", { class: "badge", hidden: true });
    const el = h(
      "li",
      { class: "msg msg-assistant", testid: "message-assistant" },
      h("div", { class: "who" }, ROLE_LABEL.assistant, " ", badge),
      body,
      calls,
    );
    const update = (message, thread) => {
      const text = messageText(message);
      setText(body, text);
      body.hidden = text === "";
      badge.hidden = !message.subagentRunId;
      setText(badge, message.subagentRunId ? `subagent ${message.subagentRunId}` : "");
      el.dataset.messageId = message.id;
      const wanted = (message.toolCalls ?? []).map((call) => {
        let entry = this.calls.get(call.id);
        if (entry === undefined) {
          entry = toolCallItem();
          this.calls.set(call.id, entry);
        }
        entry.update(call, thread);
        return entry.el;
      });
      placeChildren(calls, wanted);
    };
    return { el, update };
  }
}

function plainItem(role) {
  const body = h("div", { class: "body", testid: "message-text" });
  const el = h(
    "li",
    { class: `msg msg-${role}`, testid: `message-${role}` },
    h("div", { class: "who" }, ROLE_LABEL[role] ?? role),
    body,
  );
  return {
    el,
    update(message) {
      el.dataset.messageId = message.id;
      setText(body, messageText(message));
    },
  };
}

function reasoningItem() {
  const body = h("div", { class: "body" });
  const el = h(
    "li",
    { class: "msg msg-reasoning" },
    h(
      "details",
      { testid: "message-reasoning" },
      h("summary", {}, "Reasoning"),
      body,
    ),
  );
  return {
    el,
    update(message) {
      el.dataset.messageId = message.id;
      setText(body, messageText(message));
    },
  };
}

/** The state of one call as a person reads it. */
function callStatus(call, thread) {
  const result = findToolResult(thread, call.id);
  if (result !== undefined) return result.error ? ["error", "failed"] : ["done", "done"];
  if (thread.interrupts.some((i) => i.toolCallId === call.id)) return ["held", "waiting for you"];
  if (thread.pendingToolCallIds.includes(call.id)) return ["held", "left for the client"];
  if (thread.status === "running") return ["running", "running"];
  return ["stopped", "no result"];
}

function toolCallItem() {
  const name = h("span", { class: "tool-name", testid: "tool-name" });
  const status = h("span", { class: "tool-status", testid: "tool-status" });
  const args = h("pre", { class: "tool-args", testid: "tool-args" });
  const progress = h("pre", { class: "tool-progress", testid: "tool-progress", hidden: true });
  const result = h("pre", { class: "tool-result", testid: "tool-result" });
  const resultBlock = h("div", { hidden: true }, h("div", { class: "label" }, "Result"), result);
  const el = h(
    "details",
    { class: "tool-call", testid: "tool-call" },
    h("summary", {}, name, " ", status),
    h("div", { class: "label" }, "Arguments"),
    args,
    progress,
    resultBlock,
  );
  return {
    el,
    update(call, thread) {
      el.dataset.toolCallId = call.id;
      setText(name, call.function?.name ?? "");
      setText(args, prettyJson(call.function?.arguments ?? ""));
      const [kind, label] = callStatus(call, thread);
      el.dataset.status = kind;
      setText(status, label);
      const lines = thread.progress[call.id] ?? [];
      progress.hidden = lines.length === 0;
      setText(progress, lines.map((line) => line.text).join("\n"));
      const answer = findToolResult(thread, call.id);
      resultBlock.hidden = answer === undefined;
      setText(result, answer === undefined ? "" : messageText(answer));
    },
  };
}

// ── Side panels ─────────────────────────────────────────────────────────────────────────

const TASK_MARK = { pending: "[ ]", in_progress: "[~]", completed: "[x]" };

export function renderTasks(list, state) {
  const tasks = Array.isArray(state?.tiller?.tasks) ? state.tiller.tasks : [];
  const wanted = tasks.map((task) =>
    h(
      "li",
      { class: `task task-${task.status}`, testid: "task", dataset: { status: task.status } },
      h("span", { class: "mark", "aria-hidden": "true" }, TASK_MARK[task.status] ?? "[?]"),
      " ",
      h("span", { class: "visually-hidden" }, `${task.status}: `),
      task.subject ?? task.title ?? task.id,
    ),
  );
  if (wanted.length === 0) wanted.push(h("li", { class: "empty" }, "No tasks yet."));
  list.replaceChildren(...wanted);
}

const USAGE_FIELDS = [
  ["steps", "Steps"],
  ["inputTokens", "Input tokens"],
  ["outputTokens", "Output tokens"],
  ["totalTokens", "Total tokens"],
  ["costUsd", "Cost (USD)"],
];

function formatValue(value) {
  if (typeof value === "number" && !Number.isInteger(value)) return value.toFixed(4);
  if (value !== null && typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function rows(pairs) {
  return pairs.flatMap(([label, value]) => [h("dt", {}, label), h("dd", {}, formatValue(value))]);
}

export function renderUsage(usageList, budgetList, state) {
  const usage = state?.tiller?.usage ?? {};
  const known = USAGE_FIELDS.filter(([key]) => usage[key] !== undefined);
  const extra = Object.keys(usage).filter((key) => !USAGE_FIELDS.some(([k]) => k === key));
  usageList.replaceChildren(
    ...rows(known.map(([key, label]) => [label, usage[key]])),
    ...rows(extra.map((key) => [key, usage[key]])),
  );
  const budget = state?.tiller?.budget ?? {};
  budgetList.replaceChildren(...rows(Object.entries(budget)));
  budgetList.hidden = Object.keys(budget).length === 0;
}

export function renderState(pre, state, stale) {
  setText(pre, JSON.stringify(state ?? {}, null, 2));
  pre.classList.toggle("stale", stale);
}

/** The runs list; `onOpen(run)` opens one. `current` is the run the console shows. */
export function renderRuns(list, runs, current, onOpen) {
  const wanted = runs.map((run) => {
    const cause = run.stopCause && run.stopCause !== run.status ? run.stopCause : null;
    const status = cause ? `${run.status} (${cause})` : run.status;
    return h(
      "li",
      {
        class: run.runId === current ? "run current" : "run",
        testid: "run-item",
        dataset: { runId: run.runId, status: run.status },
      },
      h(
        "button",
        {
          type: "button",
          class: "run-open",
          title: `Open run ${run.runId} of thread ${run.threadId}`,
          "aria-current": run.runId === current ? "true" : undefined,
          onclick: () => onOpen(run),
        },
        h("span", { class: "run-id", testid: "run-id" }, run.runId),
        h("span", { class: "run-thread" }, run.threadId),
        h("span", { class: `run-status status-${run.status}`, testid: "run-status" }, status),
      ),
    );
  });
  if (wanted.length === 0) wanted.push(h("li", { class: "empty" }, "No runs yet."));
  list.replaceChildren(...wanted);
}
