// Drives `tiller serve` with the real @ag-ui/client (HttpAgent), as a browser app would.
//
//   node client.mjs <base-url> <token>
//
// Three conversations, one HttpAgent (and thread) each:
//   plain    - one run, echoed text;
//   approve  - "write a.txt: hi" ends with an approval interrupt; the client checks
//              `agent.pendingInterrupts`, answers it with `runAgent({resume})`, and the run
//              completes;
//   frontend - the client offers a tool (`show_banner`); the model calls it, the run ends with
//              `pendingToolCallIds`; the client appends the tool's result as a `tool` message
//              and runs again, and the model answers with it.
//
// Prints one JSON document on stdout: per conversation the client's final `state` and
// `messages`, and per run the event types the client applied, the raw SSE frames it received
// (for ag-ui-validate), what `onRunFinishedEvent` told it and what `runAgent` resolved with.
// tests/serve/test_agui_client_node.py checks all of it against the server. Any thrown error,
// failed check or RUN_ERROR makes the exit code nonzero (and is in the JSON as `error`).

import { HttpAgent } from "@ag-ui/client";

const [baseUrl, token] = process.argv.slice(2);
if (!baseUrl || !token) {
  console.error("usage: node client.mjs <base-url> <token>");
  process.exit(2);
}

const BANNER_TOOL = {
  name: "show_banner",
  description: "Shows a banner at the top of the page.",
  parameters: {
    type: "object",
    properties: { reason: { type: "string", description: "Why the banner is shown." } },
    required: [],
  },
};
const BANNER_RESULT = "banner shown to the person";

/** An HttpAgent whose fetch keeps a copy of every request body and SSE response body. */
function makeAgent(threadId, content) {
  const wire = [];
  const agent = new HttpAgent({
    url: `${baseUrl}/agui`,
    headers: { Authorization: `Bearer ${token}` },
    threadId,
    initialState: {},
    initialMessages: [{ id: `${threadId}-u1`, role: "user", content }],
    fetch: async (url, init) => {
      const response = await fetch(url, init);
      wire.push({
        status: response.status,
        contentType: response.headers.get("content-type"),
        request: JSON.parse(init.body),
        body: response
          .clone()
          .text()
          .catch((error) => `(the body could not be read: ${error})`),
      });
      return response;
    },
  });
  return { agent, wire };
}

/** One `runAgent`, recording what the client saw. */
async function run(conversation, params) {
  const { agent, wire } = conversation;
  const before = wire.length;
  const record = { runId: params.runId, types: [], events: [], finished: null, runError: null };
  conversation.runs.push(record);
  const result = await agent.runAgent(params, {
    onEvent: ({ event }) => {
      record.types.push(event.type);
      record.events.push(event);
    },
    onRunFinishedEvent: ({ outcome, result, interrupts, pendingToolCallIds }) => {
      record.finished = { outcome, result, interrupts, pendingToolCallIds };
    },
    onRunErrorEvent: ({ event }) => {
      record.runError = event;
    },
  });
  record.result = result;
  record.pendingInterrupts = structuredClone(agent.pendingInterrupts);
  const sent = wire.slice(before);
  if (sent.length !== 1) {
    throw new Error(`expected one POST for run ${params.runId}, got ${sent.length}`);
  }
  record.status = sent[0].status;
  record.contentType = sent[0].contentType;
  record.request = sent[0].request;
  record.sse = await sent[0].body;
  if (record.runError) {
    throw new Error(`run ${params.runId} errored: ${JSON.stringify(record.runError)}`);
  }
  return record;
}

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

const output = { ok: false, conversations: {} };
const conversations = {};

/** A conversation: its agent, and the records of its runs. */
function open(name, content) {
  const conversation = { ...makeAgent(`node-${name}`, content), runs: [] };
  conversations[name] = conversation;
  return conversation;
}

try {
  // (a) a plain run
  {
    const c = open("plain", "hello from node");
    const runs = c.runs;
    await run(c, { runId: "node-plain-r1" });
    check(runs[0].finished?.outcome === "success", "the plain run succeeds");
  }

  // (b) an approval interrupt, answered with resume
  {
    const c = open("approve", "write a.txt: hi");
    const runs = c.runs;
    await run(c, { runId: "node-approve-r1" });
    check(runs[0].finished?.outcome === "interrupt", "the write ends with an interrupt");
    const pending = c.agent.pendingInterrupts;
    check(pending.length === 1, `one pending interrupt (got ${pending.length})`);
    check(pending[0].reason === "tool_call", `an approval (got ${pending[0].reason})`);
    check(typeof pending[0].toolCallId === "string", "the approval names its tool call");
    const resume = [
      { interruptId: pending[0].id, status: "resolved", payload: { decision: "approve" } },
    ];
    await run(c, { runId: "node-approve-r2", resume });
    check(runs[1].finished?.outcome === "success", "the resumed run succeeds");
    check(c.agent.pendingInterrupts.length === 0, "no interrupt pending after the resume");
  }

  // (c) a frontend tool
  {
    const c = open("frontend", "client");
    const runs = c.runs;
    await run(c, { runId: "node-frontend-r1", tools: [BANNER_TOOL] });
    const ids = runs[0].finished?.pendingToolCallIds ?? [];
    check(runs[0].finished?.outcome === "success", "the run that calls the page's tool succeeds");
    check(ids.length === 1, `one pending tool call (got ${JSON.stringify(ids)})`);
    const call = c.agent.messages
      .flatMap((m) => m.toolCalls ?? [])
      .find((toolCall) => toolCall.id === ids[0]);
    check(call?.function.name === "show_banner", "the pending call is the page's tool");
    c.agent.addMessage({
      id: "node-frontend-tool-1",
      role: "tool",
      toolCallId: ids[0],
      content: BANNER_RESULT,
    });
    await run(c, { runId: "node-frontend-r2", tools: [BANNER_TOOL] });
    check(runs[1].finished?.outcome === "success", "the continued run succeeds");
    check((runs[1].finished?.pendingToolCallIds ?? []).length === 0, "nothing pending at the end");
    const last = c.agent.messages[c.agent.messages.length - 1];
    check(
      last.role === "assistant" && last.content === `The page answered: ${BANNER_RESULT}`,
      `the model used the page's answer (last message: ${JSON.stringify(last)})`,
    );
  }
  output.ok = true;
} catch (error) {
  output.error = String(error?.stack ?? error);
  process.exitCode = 1;
}

for (const [name, { agent, runs }] of Object.entries(conversations)) {
  output.conversations[name] = {
    threadId: agent.threadId,
    state: agent.state,
    messages: agent.messages,
    pendingInterrupts: agent.pendingInterrupts,
    runs,
  };
}
console.log(JSON.stringify(output));
