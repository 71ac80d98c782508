// tiller's web console: one page that talks to `tiller serve` over its HTTP API.
//
// No build step and no dependencies: plain ES modules the server hands out as they are.
// agui.js holds the thread model (events in, thread out), view.js and interrupts.js draw it,
// and this file does the talking: sending messages, following event streams, the runs list,
// steering and cancelling, and what is kept in localStorage across reloads.

import {
  applyEvent,
  isTerminal,
  messagesForInput,
  newThread,
  readEventStream,
} from "./agui.js";
import { h } from "./dom.js";
import { InterruptsView } from "./interrupts.js";
import { onToolRendererRegistered, registerToolRenderer } from "./tools.js";
import { ConversationView, renderRuns, renderState, renderTasks, renderUsage } from "./view.js";

// What an app's own scripts use (`AppSettings.console_scripts`): set before they load.
window.tillerConsole = Object.freeze({ registerToolRenderer, h });

const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);

// ── What survives a reload ──────────────────────────────────────────────────────────────

const KEYS = { token: "tiller.token", thread: "tiller.threadId", run: "tiller.lastRunId" };

const saved = {
  get: (key) => localStorage.getItem(KEYS[key]) ?? "",
  set(key, value) {
    if (value) localStorage.setItem(KEYS[key], value);
    else localStorage.removeItem(KEYS[key]);
  },
};

/** A random id. `crypto.randomUUID` exists only in secure contexts, and a console reached
 * over plain http on a LAN address is not one; `getRandomValues` works everywhere. */
function newId(prefix) {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `${prefix}-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

// ── The server ──────────────────────────────────────────────────────────────────────────

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** fetch with the bearer token; a non-2xx answer becomes an HttpError with the server's words.
 * Paths are relative, so the console also works when the app is mounted under a prefix. */
async function api(path, { method = "GET", body, accept = "application/json", signal } = {}) {
  const headers = { Accept: accept };
  const token = saved.get("token");
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: "no-store",
  });
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const text = await response.text();
      try {
        const parsed = JSON.parse(text);
        detail = parsed.error ?? parsed.detail ?? parsed.message ?? text;
        if (Array.isArray(parsed.details)) {
          detail += ` (${parsed.details.map((d) => `${d.loc}: ${d.msg}`).join("; ")})`;
        }
      } catch {
        detail = text || detail;
      }
    } catch {
      // keep the status text
    }
    if (response.status === 401) {
      detail =
        "The server wants a token: put it in the Token field (or open the page with #token=…).";
    }
    throw new HttpError(response.status, `${response.status}: ${detail}`);
  }
  return response;
}

// ── The page's state ────────────────────────────────────────────────────────────────────

const ui = {
  messages: $("messages"),
  interrupts: $("interrupts"),
  input: $("chat-input"),
  send: $("send"),
  composer: $("composer"),
  composerHint: $("composer-hint"),
  steerBar: $("steer"),
  steerInput: $("steer-input"),
  cancel: $("cancel"),
  runState: $("run-state"),
  banner: $("banner"),
  notices: $("notices"),
  threadId: $("thread-id"),
  threadName: $("thread-name"),
  tasks: $("tasks"),
  usage: $("usage"),
  budget: $("budget"),
  stateJson: $("state-json"),
  runsList: $("runs-list"),
  token: $("token"),
  tokenField: $("token-field"),
  detach: $("detach"),
};

let thread = newThread(saved.get("thread") || newId("thread"));
saved.set("thread", thread.threadId);
const conversation = new ConversationView(ui.messages);
const interrupts = new InterruptsView(ui.interrupts, resume);
// The stream the console follows now; aborting it stops reading (a detached run goes on).
let following = null;
let runs = [];
let runsSeen = "";

function showBanner(text) {
  ui.banner.textContent = text ?? "";
  ui.banner.hidden = !text;
}

// ── Drawing ─────────────────────────────────────────────────────────────────────────────

let drawQueued = false;

/** Draw at most once a frame: events arrive far faster than a screen refreshes. */
function scheduleDraw() {
  if (drawQueued) return;
  drawQueued = true;
  requestAnimationFrame(() => {
    drawQueued = false;
    draw();
  });
}

const STATUS_TEXT = {
  idle: "Ready",
  starting: "Starting…",
  running: "Working",
  interrupted: "Waiting for you",
  finished: "Finished",
  cancelled: "Cancelled",
  error: "Failed",
};

function draw() {
  const working = thread.status === "running" || thread.status === "starting";
  let status = STATUS_TEXT[thread.status] ?? thread.status;
  if (working && thread.step) status += ` · ${thread.step}`;
  if (thread.status === "error" && thread.error) status += `: ${thread.error}`;
  ui.runState.textContent = status;
  ui.runState.dataset.status = thread.status;
  ui.threadId.textContent = thread.threadId;
  // The thread as a person calls it: its first message (the id stays beside it, small).
  const first = thread.messages.find((m) => m.role === "user" && typeof m.content === "string");
  const name = first ? first.content.replace(/\s+/g, " ").trim() : "";
  ui.threadName.textContent = name.length > 60 ? `${name.slice(0, 59)}…` : name || "New thread";
  ui.threadId.title = thread.runId ? `run ${thread.runId}` : "no run yet";

  conversation.render(thread);
  interrupts.render(thread);

  // Only once the server has started the run (its RUN_STARTED came): before that, the
  // run id is only this page's, and a steer or cancel would ask about a run the server
  // may not know yet.
  ui.steerBar.hidden = !(thread.status === "running" && thread.runId);
  const blocked = thread.status === "interrupted" && !thread.resumed;
  ui.send.disabled = working || blocked;
  ui.composerHint.textContent = working
    ? "The run is working: steer it below, or wait for it to finish."
    : blocked
      ? "Answer the request above first, or start a new thread."
      : "";

  ui.notices.replaceChildren(
    ...thread.compactions.slice(-3).map(compactionNotice),
    ...thread.notices.slice(-5).map((n) =>
      h("li", { class: "notice", dataset: { kind: n.kind } }, n.text),
    ),
  );
  renderTasks(ui.tasks, thread.state);
  renderUsage(ui.usage, ui.budget, thread.state);
  renderState(ui.stateJson, thread.state, thread.stateStale);
}

const COMPACTION_PASSES = {
  supersede: (n) => `${n} old result${n === 1 ? " was" : "s were"} replaced by a newer one`,
  collapse_failures: (n) => `${n} repeated failure${n === 1 ? " was" : "s were"} folded`,
  thin: (n) => `${n} old result${n === 1 ? " was" : "s were"} shortened`,
  summary: (n) => `the ${n} oldest message${n === 1 ? " was" : "s were"} summarised`,
};

/** A compaction, as a person reads it: that it happened, how much it saved, and what. */
function compactionNotice(compaction) {
  const n = (value) => (typeof value === "number" ? value.toLocaleString("en-US") : "?");
  const passes = (Array.isArray(compaction.passes) ? compaction.passes : [])
    .map((pass) => COMPACTION_PASSES[pass.name]?.(pass.results ?? pass.messages ?? 0) ?? pass.name)
    .join("; ");
  const why =
    compaction.reason === "overflow"
      ? "The model said the conversation was too long, so it was compacted"
      : "The conversation was compacted to stay within the model's context";
  const text =
    `${why}: about ${n(compaction.tokensBefore)} → ${n(compaction.tokensAfter)} tokens` +
    (passes ? ` (${passes}).` : ".") +
    (compaction.summaryFailed ? ` A summary could not be made: ${compaction.summaryFailed}.` : "");
  return h(
    "li",
    { class: "notice notice-compaction", testid: "compaction-notice", dataset: { kind: "compaction" } },
    text,
  );
}

// ── Following a run ─────────────────────────────────────────────────────────────────────

/**
 * Read one event stream into the thread. `open(signal)` returns the fetch Response. Resolves
 * to `{opened, ended}`: whether the server accepted the request, and whether the run's
 * terminal event arrived (not: the stream broke, or the console left it).
 */
async function follow(open) {
  following?.abort();
  const controller = new AbortController();
  following = controller;
  let opened = false;
  let ended = false;
  try {
    const response = await open(controller.signal);
    opened = true;
    await readEventStream(response, (event, id) => {
      if (following !== controller) return; // another stream took over
      if (id !== null && id !== undefined) thread.lastEventId = id;
      applyEvent(thread, event);
      if (event.type === "RUN_STARTED" && event.runId) {
        saved.set("run", event.runId);
        refreshRuns(); // the new run shows up in the list at once
      }
      if (isTerminal(event)) {
        ended = true;
        reattempts = 0;
      }
      scheduleDraw();
    });
  } catch (error) {
    if (controller.signal.aborted) return { opened, ended };
    showBanner(error.status === 404 ? "That run is not stored on this server." : error.message);
  } finally {
    if (following === controller) following = null;
  }
  // Only a stream that was flowing is worth picking up again; a refused request is not.
  if (opened && !ended && !controller.signal.aborted) await reattach(thread.runId);
  refreshRuns();
  scheduleDraw();
  return { opened, ended };
}

/** A stream broke before its run ended (a network blip, a proxy's time-out): rebuild the
 * thread from the run's event log and follow it again, a few times at most (the count starts
 * over once a stream reaches its run's end). */
let reattempts = 0;
async function reattach(runId) {
  if (!runId || reattempts >= 3) {
    if (thread.status === "running" || thread.status === "starting") thread.status = "idle";
    showBanner("Lost the run's stream; reload the page to try again.");
    return;
  }
  reattempts += 1;
  try {
    const info = await (await api(`runs/${encodeURIComponent(runId)}`)).json();
    await new Promise((resolve) => setTimeout(resolve, 500 * reattempts));
    await replay(runId, info.status === "resumed");
  } catch (error) {
    showBanner(`Lost the run's stream: ${error.message}`);
  }
}

/** Rebuild the thread from a run's stored events (every served run starts with a snapshot of
 * its conversation) and keep following it while it is live. */
async function replay(runId, resumed) {
  const fresh = newThread(thread.threadId);
  fresh.resumed = resumed;
  thread = fresh;
  conversation.clear();
  scheduleDraw();
  return follow((signal) =>
    api(`runs/${encodeURIComponent(runId)}/events?after=0`, {
      accept: "text/event-stream",
      signal,
    }),
  );
}

/** Start a run on this thread: `extra` adds to the RunAgentInput (the resume list). Resolves
 * like `follow`; when the server refuses the run, the thread is left as it was. */
async function startRun(extra = {}) {
  const before = { runId: thread.runId, status: thread.status, resumed: thread.resumed };
  const runId = newId("run");
  const state =
    thread.state && typeof thread.state === "object" && !Array.isArray(thread.state)
      ? withoutRuntime(thread.state)
      : thread.state;
  const input = {
    threadId: thread.threadId,
    runId,
    state,
    messages: messagesForInput(thread),
    tools: [],
    context: [],
    forwardedProps: { tiller: { detach: ui.detach.checked } },
    ...extra,
  };
  thread.runId = runId;
  thread.status = "starting";
  thread.resumed = false;
  saved.set("run", runId);
  showBanner("");
  scheduleDraw();
  const result = await follow((signal) =>
    api("agui", { method: "POST", body: input, accept: "text/event-stream", signal }),
  );
  if (!result.opened) {
    Object.assign(thread, before);
    saved.set("run", before.runId);
    scheduleDraw();
  }
  return result;
}

/** The agent's own state, without the runtime's `tiller` section (the server writes that one;
 * sending it back would make it part of the agent's state). */
function withoutRuntime(state) {
  const { tiller: _runtime, ...agentState } = state;
  return agentState;
}

// ── What a person does ──────────────────────────────────────────────────────────────────

async function send() {
  const text = ui.input.value.trim();
  if (!text || ui.send.disabled) return;
  ui.input.value = "";
  // Shown at once; the run's MESSAGES_SNAPSHOT then replaces it with the server's copy.
  const message = { id: newId("msg"), role: "user", content: text };
  thread.messages.push(message);
  const { opened } = await startRun();
  if (!opened) {
    // Not sent: take it back out and give the text back, so a retry does not repeat it.
    thread.messages = thread.messages.filter((m) => m !== message);
    if (!ui.input.value) ui.input.value = text;
    scheduleDraw();
  }
}

/** Answer the open interrupts: a new run on the same thread carrying `resume`. Rejects when
 * the server refused to start it, so the form can offer another try. */
async function resume(entries) {
  const { opened } = await startRun({ resume: entries });
  if (!opened) throw new Error(ui.banner.textContent || "the server refused the answer");
}

async function steer() {
  const text = ui.steerInput.value.trim();
  if (!text || !thread.runId) return;
  try {
    await api(`runs/${encodeURIComponent(thread.runId)}/steer`, { method: "POST", body: { text } });
    ui.steerInput.value = "";
    thread.notices.push({ kind: "steering", text: `Steering sent: ${text}` });
  } catch (error) {
    showBanner(error.status === 409 ? "The run has already ended." : error.message);
  }
  scheduleDraw();
}

async function cancel() {
  if (!thread.runId) return;
  ui.cancel.disabled = true;
  try {
    await api(`runs/${encodeURIComponent(thread.runId)}/cancel`, { method: "POST", body: {} });
    thread.notices.push({ kind: "cancel", text: "Cancelling the run…" });
  } catch (error) {
    showBanner(error.status === 409 ? "The run has already ended." : error.message);
  } finally {
    ui.cancel.disabled = false;
  }
  scheduleDraw();
}

function newThreadClicked() {
  // Leaving does not stop a detached run: it stays in the runs list.
  following?.abort();
  thread = newThread(newId("thread"));
  saved.set("thread", thread.threadId);
  saved.set("run", "");
  conversation.clear();
  showBanner("");
  scheduleDraw();
  ui.input.focus();
}

function openRun(run) {
  if (run.runId === thread.runId && following) return;
  thread = newThread(run.threadId);
  saved.set("thread", run.threadId);
  saved.set("run", run.runId);
  showBanner("");
  replay(run.runId, run.status === "resumed");
}

// ── The runs list ───────────────────────────────────────────────────────────────────────

async function refreshRuns() {
  try {
    const body = await (await api("runs")).json();
    runs = Array.isArray(body.runs) ? body.runs : [];
  } catch (error) {
    if (error.status === 401) showBanner(error.message);
    return;
  }
  // The run this page works on is listed even before the server has a record of it (the
  // list comes from stored checkpoints, and a run's first one lands a moment after it starts).
  const working = thread.status === "running" || thread.status === "starting";
  if (working && thread.runId && !runs.some((run) => run.runId === thread.runId)) {
    runs.unshift({ runId: thread.runId, threadId: thread.threadId, status: "running" });
  }
  // Redraw only on a change, so a click never lands on a list being replaced.
  const seen = JSON.stringify([runs, thread.runId, thread.threadId]);
  if (seen === runsSeen) return;
  runsSeen = seen;
  renderRuns(ui.runsList, runs, thread.runId, openRun, thread.threadId);
}

// ── Start ───────────────────────────────────────────────────────────────────────────────

/** `#token=…` in the address sets the token, then leaves the address (so it is not copied
 * along with a link or caught in a screenshot). */
function tokenFromFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  if (token === null) return;
  saved.set("token", token);
  params.delete("token");
  const rest = params.toString();
  history.replaceState(null, "", `${location.pathname}${location.search}${rest ? `#${rest}` : ""}`);
}

function wire() {
  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  ui.input.addEventListener("keydown", (event) => {
    // Enter sends; Shift+Enter is a new line.
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  ui.steerBar.addEventListener("submit", (event) => {
    event.preventDefault();
    steer();
  });
  ui.cancel.addEventListener("click", cancel);
  $("new-thread").addEventListener("click", newThreadClicked);
  $("refresh-runs").addEventListener("click", refreshRuns);
  ui.token.value = saved.get("token");
  ui.token.addEventListener("change", () => {
    saved.set("token", ui.token.value.trim());
    showBanner("");
    refreshRuns();
  });
}

/** What this server tells its console (`GET console/settings.json`): whether it wants a
 * token (with `--no-auth` it does not, and the token field goes away), and the app's own
 * scripts to import (tool renderers). A server too old to say keeps the field. */
async function loadSettings() {
  let settings;
  try {
    const response = await fetch("console/settings.json", { cache: "no-store" });
    if (!response.ok) return;
    settings = await response.json();
  } catch {
    return;
  }
  ui.tokenField.hidden = settings.auth === "none";
  for (const script of Array.isArray(settings.scripts) ? settings.scripts : []) {
    try {
      await import(new URL(script, document.baseURI).href);
    } catch (error) {
      showBanner(`The app's console script ${script} failed to load: ${error.message}`);
    }
  }
}

onToolRendererRegistered(() => {
  conversation.clear(); // drawn again with the new renderer
  scheduleDraw();
});
tokenFromFragment();
wire();
draw();
refreshRuns();
loadSettings();
setInterval(() => {
  if (!document.hidden) refreshRuns();
}, 3000);
// After a reload: rebuild the thread from its last run, and follow it if it is still going.
async function restore() {
  const runId = saved.get("run");
  if (!runId) return;
  let info;
  try {
    info = await (await api(`runs/${encodeURIComponent(runId)}`)).json();
  } catch (error) {
    showBanner(
      error.status === 404
        ? `The last run (${runId}) is not stored on this server; the thread starts empty here.`
        : error.message,
    );
    return;
  }
  if (info.threadId && info.threadId !== thread.threadId) {
    thread = newThread(info.threadId);
    saved.set("thread", info.threadId);
  }
  await replay(runId, info.status === "resumed");
}
restore();
