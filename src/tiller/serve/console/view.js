// Drawing the thread: the conversation, the tool calls, and the side panels.
//
// Elements are kept per message and per tool call (keyed by id) and updated in place, so a
// streaming answer changes one text node per frame, and an opened <details> stays open while
// the run goes on. The interrupt form is the exception: it is rebuilt only when the set of
// open interrupts changes, so what a person typed there is never redrawn away.

import { findToolResult } from "./agui.js";
import { h, placeChildren, setText } from "./dom.js";
import {
  asNode,
  callRenderer,
  onToolRendererRegistered,
  parseArgs,
  toolRenderer,
} from "./tools.js";

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
  /** `owner`: the subagent whose messages this list shows (null: the run's own). */
  constructor(list, owner = null) {
    this.list = list;
    this.owner = owner;
    this.items = new Map(); // message key -> {el, update(message, thread)}
    this.calls = new Map(); // toolCallId -> {el, update(call, thread)}
    this.segments = new Map(); // subagentRunId -> {el, update(segment, thread)}
  }

  /** Forget every element (a new thread). */
  clear() {
    this.items.clear();
    this.calls.clear();
    this.segments.clear();
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
      // A subagent's messages are drawn inside its segment, under the call that started it.
      if ((message.subagentRunId ?? null) !== this.owner) continue;
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
    // A segment whose starting call is not in the thread (a resumed run) gets its own block.
    if (this.owner === null) {
      for (const segment of Object.values(thread.subagents ?? {})) {
        if (segment.parentToolCallId && callIds.has(segment.parentToolCallId)) continue;
        if (segment.parentSubagentRunId) continue;
        wanted.push(h("li", { class: "msg msg-segment" }, this.segment(segment, thread)));
      }
    }
    for (const key of [...this.items.keys()]) if (!keys.has(key)) this.items.delete(key);
    for (const id of [...this.calls.keys()]) if (!callIds.has(id)) this.calls.delete(id);
    placeChildren(this.list, wanted);
  }

  /** The element of one subagent segment, kept across redraws. */
  segment(segment, thread) {
    let entry = this.segments.get(segment.id);
    if (entry === undefined) {
      entry = subagentItem(segment.id);
      this.segments.set(segment.id, entry);
    }
    entry.update(segment, thread);
    return entry.el;
  }

  createItem(message) {
    if (message.role === "reasoning") return reasoningItem();
    if (message.role === "assistant") return this.assistantItem();
    return plainItem(message.role);
  }

  assistantItem() {
    const body = h("div", { class: "body", testid: "message-text" });
    const calls = h("div", { class: "tool-calls" });
    const el = h(
      "li",
      { class: "msg msg-assistant", testid: "message-assistant" },
      h("div", { class: "who" }, ROLE_LABEL.assistant),
      body,
      calls,
    );
    const update = (message, thread) => {
      const text = messageText(message);
      setText(body, text);
      body.hidden = text === "";
      el.dataset.messageId = message.id;
      const wanted = (message.toolCalls ?? []).map((call) => {
        let entry = this.calls.get(call.id);
        if (entry === undefined) {
          entry = toolCallItem();
          this.calls.set(call.id, entry);
        }
        const segments = Object.values(thread.subagents ?? {})
          .filter((segment) => segment.parentToolCallId === call.id)
          .map((segment) => this.segment(segment, thread));
        entry.update(call, thread, segments);
        return entry.el;
      });
      placeChildren(calls, wanted);
    };
    return { el, update };
  }
}

const SEGMENT_STATUS = {
  running: "working",
  finished: "done",
  failed: "failed",
  suspended: "waiting for you",
};

/** A subagent's segment: its own messages and calls, nested and collapsible, with its own
 * status. Open while it works; a person may fold it, and it stays as they left it. */
function subagentItem(id) {
  const list = h("ol", { class: "messages nested", "aria-label": "What the helper did" });
  const inner = new ConversationView(list, id);
  const title = h("span", { class: "subagent-title", testid: "subagent-title" });
  const status = h("span", { class: "subagent-status", testid: "subagent-status" });
  const report = h("p", { class: "subagent-report", testid: "subagent-report", hidden: true });
  const el = h(
    "details",
    { class: "subagent", testid: "subagent", open: true, dataset: { subagentRunId: id } },
    h("summary", {}, h("span", { class: "subagent-kind" }, "Helper"), " ", title, " ", status),
    list,
    report,
  );
  return {
    el,
    update(segment, thread) {
      el.dataset.status = segment.status;
      setText(title, segment.description || segment.name);
      title.title = `${segment.name} subagent, run ${segment.id}`;
      setText(status, SEGMENT_STATUS[segment.status] ?? segment.status);
      inner.render(thread);
      const said = segment.status === "failed" ? `Failed: ${segment.error}` : "";
      report.hidden = !said;
      setText(report, said);
    },
  };
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

let renderersSeen = 0;
/** A renderer was registered: calls drawn before must be drawn again. */
onToolRendererRegistered(() => {
  renderersSeen += 1;
});

function toolCallItem() {
  const name = h("span", { class: "tool-name", testid: "tool-name" });
  const status = h("span", { class: "tool-status", testid: "tool-status" });
  const custom = h("div", { class: "tool-custom", testid: "tool-custom", hidden: true });
  const args = h("pre", { class: "tool-args", testid: "tool-args" });
  const argsBlock = h("div", {}, h("div", { class: "label" }, "Arguments"), args);
  const result = h("pre", { class: "tool-result", testid: "tool-result" });
  const resultBlock = h("div", { hidden: true }, h("div", { class: "label" }, "Result"), result);
  // A long command's progress, shown while it runs (and kept after): its status line, how
  // far along, and its output as it comes.
  const liveStatus = h("span", { class: "tool-live-status", testid: "tool-progress" });
  const bar = h("progress", { max: 1, testid: "tool-progress-bar", hidden: true });
  // Focusable: it scrolls, and a keyboard must be able to scroll it too.
  const output = h("pre", {
    class: "tool-output",
    testid: "tool-output",
    tabindex: "0",
    role: "log",
    hidden: true,
  });
  const live = h(
    "div",
    { class: "tool-live", testid: "tool-live", hidden: true },
    h("div", { class: "tool-live-head" }, liveStatus, bar),
    output,
  );
  const segments = h("div", { class: "tool-segments" });
  const details = h(
    "details",
    { class: "tool-details" },
    h("summary", {}, name, " ", status),
    argsBlock,
    resultBlock,
  );
  const el = h("div", { class: "tool-call", testid: "tool-call" }, details, custom, live, segments);
  let customKey = null;
  return {
    el,
    update(call, thread, children = []) {
      el.dataset.toolCallId = call.id;
      const toolName = call.function?.name ?? "";
      const argsText = call.function?.arguments ?? "";
      setText(name, toolName);
      output.setAttribute("aria-label", `Output of ${toolName}`);
      setText(args, prettyJson(argsText));
      const [kind, label] = callStatus(call, thread);
      el.dataset.status = kind;
      setText(status, label);
      const answer = findToolResult(thread, call.id);
      const resultText = answer === undefined ? null : messageText(answer);
      resultBlock.hidden = answer === undefined;
      setText(result, resultText ?? "");

      const progress = thread.progress[call.id];
      live.hidden = !progress || (!progress.output && !progress.status);
      if (progress) {
        setText(liveStatus, progress.status ?? (kind === "running" ? "running…" : ""));
        bar.hidden = typeof progress.fraction !== "number";
        if (!bar.hidden) {
          bar.value = progress.fraction;
          bar.setAttribute("aria-label", `${toolName}: ${Math.round(progress.fraction * 100)}%`);
        }
        output.hidden = !progress.output;
        if (output.textContent !== progress.output) {
          const atEnd = output.scrollTop + output.clientHeight >= output.scrollHeight - 4;
          output.textContent = progress.output;
          if (atEnd) output.scrollTop = output.scrollHeight; // follow, as a terminal does
        }
      }

      // An app's renderer for this tool draws the call in place of the raw JSON (which
      // stays under the call's disclosure); it runs again only when what it shows changed.
      const renderer = toolRenderer(toolName);
      const key = renderer?.render
        ? JSON.stringify([renderersSeen, argsText, kind, resultText, progress?.output?.length])
        : null;
      if (key !== customKey) {
        customKey = key;
        let node = null;
        if (renderer?.render) {
          const view = {
            name: toolName,
            args: parseArgs(argsText),
            argsText,
            status: kind,
            result: resultText,
            progress: progress ?? null,
            h,
          };
          const { value, error } = callRenderer(renderer, "render", view);
          node = error ? asNode(`(the ${toolName} renderer failed: ${error.message})`) : asNode(value);
        }
        custom.replaceChildren(...(node ? [node] : []));
        custom.hidden = node === null;
        el.classList.toggle("has-custom", node !== null);
      }
      placeChildren(segments, children);
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

/** Every field the runtime publishes, labelled as a person reads it (`state.tiller`). */
const USAGE_LABELS = {
  steps: "Steps",
  inputTokens: "Input tokens",
  outputTokens: "Output tokens",
  totalTokens: "Total tokens",
  cacheReadTokens: "Tokens read from cache",
  cacheWriteTokens: "Tokens written to cache",
  reasoningTokens: "Reasoning tokens",
  costUsd: "Cost",
};

/** The budget: what was spent of each limit (`spentSteps` of `maxSteps`, ...). */
const BUDGET_LINES = [
  ["Steps", "spentSteps", "maxSteps"],
  ["Output tokens", "spentOutputTokens", "maxOutputTokens"],
  ["Cost", "spentCostUsd", "maxCostUsd"],
];

/** A label for a field the console does not know yet: `spentTurns` -> "Spent turns". */
export function humanize(key) {
  const words = String(key)
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replace(/[_-]+/g, " ")
    .trim()
    .toLowerCase()
    .replace(/\busd\b/g, "(USD)");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

function formatValue(key, value) {
  if (typeof value === "number" && /usd$/i.test(key)) return `$${value.toFixed(4)}`;
  if (typeof value === "number") return value.toLocaleString("en-US");
  if (value !== null && typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function rows(pairs) {
  return pairs.flatMap(([label, value]) => [
    h("dt", {}, label),
    h("dd", { testid: "usage-value" }, value),
  ]);
}

export function renderUsage(usageList, budgetList, state) {
  const usage = state?.tiller?.usage ?? {};
  const keys = [
    ...Object.keys(USAGE_LABELS).filter((key) => usage[key] !== undefined),
    ...Object.keys(usage).filter((key) => !(key in USAGE_LABELS)),
  ];
  const usageRows = keys.map((key) => [USAGE_LABELS[key] ?? humanize(key), formatValue(key, usage[key])]);
  if (usageRows.length === 0) usageRows.push(["Nothing spent yet", ""]);
  usageList.replaceChildren(...rows(usageRows));

  const budget = state?.tiller?.budget ?? {};
  const known = new Set(BUDGET_LINES.flatMap(([, spent, max]) => [spent, max]));
  const budgetRows = [];
  for (const [label, spent, max] of BUDGET_LINES) {
    if (budget[max] === undefined) continue; // no limit: the usage above says it all
    const used = formatValue(spent, budget[spent] ?? 0);
    budgetRows.push([label, `${used} of ${formatValue(max, budget[max])}`]);
  }
  for (const key of Object.keys(budget)) {
    if (!known.has(key)) budgetRows.push([humanize(key), formatValue(key, budget[key])]);
  }
  budgetList.replaceChildren(
    ...(budgetRows.length ? [h("dt", { class: "kv-head" }, "Budget"), h("dd", {})] : []),
    ...rows(budgetRows),
  );
  budgetList.hidden = budgetRows.length === 0;
}

export function renderState(pre, state, stale) {
  setText(pre, JSON.stringify(state ?? {}, null, 2));
  pre.classList.toggle("stale", stale);
}

/** The runs list, grouped by thread (the threads in the order of their newest run), each
 * thread named by its first message. `onOpen(run)` opens one; `current` is the run shown
 * and `currentThread` its thread. */
export function renderRuns(list, runs, current, onOpen, currentThread) {
  const threads = new Map();
  for (const run of runs) {
    let group = threads.get(run.threadId);
    if (group === undefined) {
      group = { threadId: run.threadId, title: "", runs: [] };
      threads.set(run.threadId, group);
    }
    group.runs.push(run);
    if (!group.title && run.title) group.title = run.title;
  }
  const wanted = [...threads.values()].map((group) => {
    const title = group.title || "Untitled thread";
    const here = group.threadId === currentThread;
    const count = group.runs.length;
    return h(
      "li",
      {
        class: here ? "thread-group current" : "thread-group",
        testid: "thread-group",
        dataset: { threadId: group.threadId },
      },
      h(
        "div",
        { class: "thread-title", testid: "thread-title", title: `thread ${group.threadId}` },
        title,
      ),
      h(
        "ol",
        { class: "thread-runs", "aria-label": `${count} run${count === 1 ? "" : "s"} of “${title}”` },
        ...group.runs.map((run, index) => runItem(run, current, onOpen, count - index)),
      ),
    );
  });
  if (wanted.length === 0) wanted.push(h("li", { class: "empty" }, "No runs yet."));
  list.replaceChildren(...wanted);
}

function runItem(run, current, onOpen, number) {
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
        title: `Open run ${run.runId}`,
        "aria-current": run.runId === current ? "true" : undefined,
        onclick: () => onOpen(run),
      },
      h("span", { class: "run-id", testid: "run-id" }, `Run ${number}`),
      h("span", { class: `run-status status-${run.status}`, testid: "run-status" }, status),
    ),
  );
}
