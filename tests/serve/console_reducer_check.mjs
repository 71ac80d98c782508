// The web console's pure parts under node: JSON Patch, the SSE parser, and the thread reducer.
// Run by tests/serve/test_console_reducer.py (`node --test` on this file).

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  SseParser,
  applyEvent,
  findToolCall,
  findToolResult,
  messagesForInput,
  newThread,
  readEventStream,
} from "../../src/tiller/serve/console/agui.js";
import { PatchError, applyPatch, parsePointer } from "../../src/tiller/serve/console/jsonpatch.js";

// ── JSON Patch ──────────────────────────────────────────────────────────────────────────

test("pointers unescape ~1 and ~0", () => {
  assert.deepEqual(parsePointer(""), []);
  assert.deepEqual(parsePointer("/a~1b/~0c/0"), ["a/b", "~c", "0"]);
  assert.throws(() => parsePointer("a"), PatchError);
});

test("add, remove, replace on objects and arrays", () => {
  const doc = { a: 1, list: [1, 2, 3], nested: { x: true } };
  const out = applyPatch(doc, [
    { op: "add", path: "/b", value: { c: [1] } },
    { op: "add", path: "/list/1", value: 9 },
    { op: "add", path: "/list/-", value: 4 },
    { op: "remove", path: "/list/0" },
    { op: "replace", path: "/nested/x", value: false },
    { op: "remove", path: "/a" },
  ]);
  assert.deepEqual(out, { b: { c: [1] }, list: [9, 2, 3, 4], nested: { x: false } });
  // The input is never changed, even by a nested value later patched.
  assert.deepEqual(doc, { a: 1, list: [1, 2, 3], nested: { x: true } });
});

test("move, copy and test", () => {
  const out = applyPatch({ a: { b: 1 }, c: [1, 2] }, [
    { op: "test", path: "/a", value: { b: 1 } },
    { op: "copy", from: "/a", path: "/d" },
    { op: "move", from: "/a/b", path: "/c/0" },
    { op: "test", path: "/c", value: [1, 1, 2] },
  ]);
  assert.deepEqual(out, { a: {}, c: [1, 1, 2], d: { b: 1 } });
  // A copy is a copy: changing it leaves the source alone.
  const copied = applyPatch({ a: { b: 1 } }, [
    { op: "copy", from: "/a", path: "/d" },
    { op: "replace", path: "/d/b", value: 2 },
  ]);
  assert.deepEqual(copied, { a: { b: 1 }, d: { b: 2 } });
});

test("the whole document can be replaced", () => {
  assert.deepEqual(applyPatch({ a: 1 }, [{ op: "replace", path: "", value: [1] }]), [1]);
  assert.deepEqual(applyPatch({ a: 1 }, [{ op: "add", path: "", value: { b: 2 } }]), { b: 2 });
});

test("a failing patch throws and leaves the input alone", () => {
  const doc = { a: [1], k: "v" };
  const cases = [
    [{ op: "test", path: "/k", value: "w" }],
    [{ op: "remove", path: "/missing" }],
    [{ op: "replace", path: "/missing", value: 1 }],
    [{ op: "add", path: "/a/5", value: 1 }],
    [{ op: "add", path: "/a/01", value: 1 }],
    [{ op: "add", path: "/no/such/parent", value: 1 }],
    [{ op: "move", from: "/a", path: "/a/0" }],
    [{ op: "frobnicate", path: "/a" }],
    [{ op: "add", path: "/x", value: 1 }, { op: "test", path: "/x", value: 2 }],
  ];
  for (const ops of cases) {
    assert.throws(() => applyPatch(doc, ops), PatchError, JSON.stringify(ops));
  }
  assert.deepEqual(doc, { a: [1], k: "v" });
});

test("test compares JSON values, not identities or key order", () => {
  const doc = { o: { a: 1, b: [1, { c: null }] } };
  applyPatch(doc, [{ op: "test", path: "/o", value: { b: [1, { c: null }], a: 1 } }]);
  assert.throws(() => applyPatch(doc, [{ op: "test", path: "/o/b", value: [1] }]), PatchError);
  assert.throws(() => applyPatch({ a: [] }, [{ op: "test", path: "/a", value: {} }]), PatchError);
});

// ── SSE ─────────────────────────────────────────────────────────────────────────────────

test("the SSE parser handles split chunks, CRLF, comments, ids and multi-line data", () => {
  const frames = [];
  const parser = new SseParser((frame) => frames.push(frame));
  const text =
    ': keep-alive\n\nid: 3\ndata: {"a":\r\ndata: 1}\r\n\r\ndata: x\r\rid: 7\nevent: e\ndata:y\n\n';
  // Every split point must give the same frames.
  for (let cut = 0; cut <= text.length; cut += 1) {
    frames.length = 0;
    parser.feed(text.slice(0, cut));
    parser.feed(text.slice(cut));
    parser.end();
    assert.deepEqual(
      frames,
      [
        { id: "3", event: null, data: '{"a":\n1}' },
        { id: null, event: null, data: "x" },
        { id: "7", event: "e", data: "y" },
      ],
      `cut at ${cut}`,
    );
  }
});

test("readEventStream decodes a byte stream split inside a UTF-8 character", async () => {
  const bytes = new TextEncoder().encode(
    'data: {"type":"CUSTOM","name":"x","value":"é€"}\n\nid: 2\ndata: not json\n\n' +
      'data: {"type":"RUN_ERROR","message":"m"}\n\n',
  );
  const body = new ReadableStream({
    start(controller) {
      for (const b of bytes) controller.enqueue(new Uint8Array([b]));
      controller.close();
    },
  });
  const seen = [];
  await readEventStream(new Response(body), (event, id) => seen.push([event, id]));
  assert.deepEqual(seen, [
    [{ type: "CUSTOM", name: "x", value: "é€" }, null],
    [{ type: "RUN_ERROR", message: "m" }, null],
  ]);
});

// ── The thread reducer ──────────────────────────────────────────────────────────────────

function run(events, thread = newThread("t1")) {
  for (const event of events) applyEvent(thread, event);
  return thread;
}

const START = { type: "RUN_STARTED", threadId: "t1", runId: "r1" };
const finished = (runId, outcome) => ({ type: "RUN_FINISHED", threadId: "t1", runId, outcome });

test("a streamed answer with reasoning and a tool call", () => {
  const thread = run([
    START,
    { type: "MESSAGES_SNAPSHOT", messages: [{ id: "u1", role: "user", content: "hi" }] },
    { type: "REASONING_START", messageId: "g1" },
    { type: "REASONING_MESSAGE_START", messageId: "g1", role: "reasoning" },
    { type: "REASONING_MESSAGE_CONTENT", messageId: "g1", delta: "think" },
    { type: "REASONING_MESSAGE_CONTENT", messageId: "g1", delta: "ing" },
    { type: "REASONING_MESSAGE_END", messageId: "g1" },
    { type: "REASONING_END", messageId: "g1" },
    { type: "TEXT_MESSAGE_START", messageId: "a1", role: "assistant" },
    { type: "TEXT_MESSAGE_CONTENT", messageId: "a1", delta: "Hel" },
    { type: "TEXT_MESSAGE_CONTENT", messageId: "a1", delta: "lo" },
    { type: "TEXT_MESSAGE_END", messageId: "a1" },
    { type: "TOOL_CALL_START", toolCallId: "c1", toolCallName: "read", parentMessageId: "a1" },
    { type: "TOOL_CALL_ARGS", toolCallId: "c1", delta: '{"path":' },
    { type: "TOOL_CALL_ARGS", toolCallId: "c1", delta: '"a.txt"}' },
    { type: "TOOL_CALL_END", toolCallId: "c1" },
    {
      type: "CUSTOM",
      name: "tiller.progress",
      value: { toolCallId: "c1", kind: "status", message: "reading" },
    },
    { type: "TOOL_CALL_RESULT", messageId: "m2", toolCallId: "c1", content: "text", role: "tool" },
    { type: "TOOL_CALL_START", toolCallId: "c2", toolCallName: "ls" },
    { type: "TOOL_CALL_END", toolCallId: "c2" },
    { type: "RUN_FINISHED", threadId: "t1", runId: "r1" },
  ]);
  assert.equal(thread.status, "finished");
  assert.deepEqual(
    thread.messages.map((m) => [m.role, m.id]),
    [
      ["user", "u1"],
      ["reasoning", "g1"],
      ["assistant", "a1"],
      ["tool", "m2"],
      ["assistant", "c2"],
    ],
  );
  assert.equal(thread.messages[1].content, "thinking");
  assert.equal(thread.messages[2].content, "Hello");
  assert.deepEqual(findToolCall(thread, "c1").call, {
    id: "c1",
    type: "function",
    function: { name: "read", arguments: '{"path":"a.txt"}' },
  });
  assert.equal(findToolResult(thread, "c1").content, "text");
  assert.equal(findToolCall(thread, "c2").message.id, "c2");
  assert.deepEqual(thread.progress.c1, {
    lines: [{ kind: "status", text: "reading", fraction: undefined }],
    output: "",
    status: "reading",
    fraction: null,
  });
  // What goes back to the server is plain AG-UI messages.
  const sent = messagesForInput(thread);
  assert.deepEqual(sent[2], {
    id: "a1",
    role: "assistant",
    content: "Hello",
    toolCalls: [
      { id: "c1", type: "function", function: { name: "read", arguments: '{"path":"a.txt"}' } },
    ],
  });
  assert.ok(sent.every((m) => !Object.values(m).includes(undefined)));
});

test("chunk events expand like the AG-UI client does", () => {
  const thread = run([
    START,
    { type: "TEXT_MESSAGE_CHUNK", messageId: "a1", delta: "Hi" },
    { type: "TEXT_MESSAGE_CHUNK", delta: " there" },
    {
      type: "TOOL_CALL_CHUNK",
      toolCallId: "c1",
      toolCallName: "f",
      parentMessageId: "a1",
      delta: "{",
    },
    { type: "TOOL_CALL_CHUNK", delta: "}" },
  ]);
  assert.equal(thread.messages[0].content, "Hi there");
  assert.equal(findToolCall(thread, "c1").call.function.arguments, "{}");
  assert.equal(findToolCall(thread, "c1").message.id, "a1");
});

test("state snapshots and deltas; a bad delta keeps the last good state", () => {
  const thread = run([
    START,
    { type: "STATE_SNAPSHOT", snapshot: { tiller: { tasks: [] }, n: 1 } },
    {
      type: "STATE_DELTA",
      delta: [
        {
          op: "add",
          path: "/tiller/tasks/-",
          value: { id: "t1", subject: "Do it", status: "pending" },
        },
        { op: "replace", path: "/n", value: 2 },
      ],
    },
  ]);
  assert.deepEqual(thread.state, {
    tiller: { tasks: [{ id: "t1", subject: "Do it", status: "pending" }] },
    n: 2,
  });
  applyEvent(thread, { type: "STATE_DELTA", delta: [{ op: "remove", path: "/gone" }] });
  assert.equal(thread.stateStale, true);
  assert.equal(thread.state.n, 2);
  assert.match(thread.notices.at(-1).text, /did not apply/);
  applyEvent(thread, { type: "STATE_SNAPSHOT", snapshot: { n: 3 } });
  assert.equal(thread.stateStale, false);
  assert.deepEqual(thread.state, { n: 3 });
});

test("a messages snapshot replaces the list (the shown user message included)", () => {
  const thread = newThread("t1");
  thread.messages.push({ id: "local", role: "user", content: "hi" });
  run(
    [START, { type: "MESSAGES_SNAPSHOT", messages: [{ id: "u1", role: "user", content: "hi" }] }],
    thread,
  );
  assert.deepEqual(thread.messages, [{ id: "u1", role: "user", content: "hi" }]);
});

test("interrupts, cancellation, errors, and a new run clears them", () => {
  const interrupt = {
    id: "approve-c1",
    reason: "tool_call",
    toolCallId: "c1",
    message: "write needs approval",
  };
  const thread = run([
    START,
    finished("r1", { type: "interrupt", interrupts: [interrupt] }),
  ]);
  assert.equal(thread.status, "interrupted");
  assert.deepEqual(thread.interrupts, [interrupt]);
  run([{ type: "RUN_STARTED", threadId: "t1", runId: "r2" }], thread);
  assert.equal(thread.status, "running");
  assert.deepEqual(thread.interrupts, []);
  assert.equal(thread.runId, "r2");
  run([finished("r2", { type: "cancelled" })], thread);
  assert.equal(thread.status, "cancelled");
  run([START, { type: "RUN_ERROR", message: "boom", code: "E1" }], thread);
  assert.equal(thread.status, "error");
  assert.equal(thread.error, "boom (E1)");
  run([START, finished("r1", { type: "success", pendingToolCallIds: ["x"] })], thread);
  assert.equal(thread.status, "finished");
  assert.deepEqual(thread.pendingToolCallIds, ["x"]);
});

test("notices from the runtime, and unknown events are ignored", () => {
  const thread = run([
    START,
    { type: "CUSTOM", name: "tiller.queued_input", value: { text: "go left" } },
    { type: "CUSTOM", name: "tiller.notice", value: { source: "mailbox", text: "hello" } },
    { type: "SOMETHING_NEW", x: 1 },
    { nope: true },
    { type: "STEP_STARTED", stepName: "step 1" },
  ]);
  assert.deepEqual(
    thread.notices.map((n) => n.text),
    ["Steering reached the run: go left", "hello"],
  );
  assert.equal(thread.step, "step 1");
  run([{ type: "STEP_FINISHED", stepName: "step 1" }], thread);
  assert.equal(thread.step, null);
});

test("subagent segments, compactions, and a command's live output", () => {
  const thread = run([
    START,
    {
      type: "SUBAGENT_STARTED",
      subagentRunId: "r1-sub-1",
      name: "explore",
      description: "Look around",
      parentToolCallId: "c1",
    },
    {
      type: "CUSTOM",
      name: "tiller.progress",
      value: { toolCallId: "c2", kind: "output", text: "line 1\n", stream: "stdout" },
    },
    {
      type: "CUSTOM",
      name: "tiller.progress",
      value: { toolCallId: "c2", kind: "status", message: "stage 1 of 2", fraction: 0.5 },
    },
    {
      type: "CUSTOM",
      name: "tiller.progress",
      value: { toolCallId: "c2", kind: "output", text: "line 2\n", stream: "stdout" },
    },
    {
      type: "CUSTOM",
      name: "tiller.compacted",
      value: { reason: "threshold", tokensBefore: 10, tokensAfter: 5 },
    },
  ]);
  assert.equal(thread.subagents["r1-sub-1"].status, "running");
  // The subagent's own messages, its tool result too, say whose they are: the server
  // leaves them out of the parent's conversation when the thread is sent back.
  run(
    [
      {
        type: "TOOL_CALL_START",
        toolCallId: "s1",
        toolCallName: "ls",
        subagentRunId: "r1-sub-1",
      },
      { type: "TOOL_CALL_END", toolCallId: "s1", subagentRunId: "r1-sub-1" },
      {
        type: "TOOL_CALL_RESULT",
        messageId: "sr1",
        toolCallId: "s1",
        content: "a.txt",
        role: "tool",
        subagentRunId: "r1-sub-1",
      },
    ],
    thread,
  );
  assert.deepEqual(
    messagesForInput(thread)
      .filter((m) => m.id === "s1" || m.id === "sr1")
      .map((m) => [m.id, m.subagentRunId]),
    [
      ["s1", "r1-sub-1"],
      ["sr1", "r1-sub-1"],
    ],
  );
  assert.equal(thread.subagents["r1-sub-1"].parentToolCallId, "c1");
  assert.equal(thread.progress.c2.output, "line 1\nline 2\n");
  assert.equal(thread.progress.c2.status, "stage 1 of 2");
  assert.equal(thread.progress.c2.fraction, 0.5);
  assert.deepEqual(thread.compactions, [
    { reason: "threshold", tokensBefore: 10, tokensAfter: 5 },
  ]);
  run(
    [{ type: "SUBAGENT_FINISHED", subagentRunId: "r1-sub-1", result: { text: "found it" } }],
    thread,
  );
  assert.equal(thread.subagents["r1-sub-1"].status, "finished");
  assert.equal(thread.subagents["r1-sub-1"].text, "found it");
  run(
    [
      { type: "SUBAGENT_STARTED", subagentRunId: "r1-sub-2", name: "general" },
      { type: "SUBAGENT_ERROR", subagentRunId: "r1-sub-2", message: "timed out" },
      {
        type: "SUBAGENT_STARTED",
        subagentRunId: "r1-sub-3",
        name: "general",
      },
      {
        type: "SUBAGENT_FINISHED",
        subagentRunId: "r1-sub-3",
        outcome: { type: "suspended", interruptIds: ["i1"] },
      },
    ],
    thread,
  );
  assert.equal(thread.subagents["r1-sub-2"].status, "failed");
  assert.equal(thread.subagents["r1-sub-2"].error, "timed out");
  assert.equal(thread.subagents["r1-sub-3"].status, "suspended");
});

test("a retried model call becomes a notice in plain words", () => {
  const retry = (value) => ({ type: "CUSTOM", name: "tiller.model_retry", value });
  const thread = run([
    { type: "RUN_STARTED", threadId: "t1", runId: "r1" },
    retry({ attempt: 1, maxAttempts: 4, delaySeconds: 2, error: "HTTP 500: busy" }),
    retry({ attempt: 2, maxAttempts: 4, delaySeconds: 0.537, error: "the connection dropped" }),
    retry({ attempt: 3, maxAttempts: 4, delaySeconds: 0, error: "x".repeat(500) }),
    retry({}),
  ]);
  const texts = thread.notices.filter((n) => n.kind === "model-retry").map((n) => n.text);
  assert.deepEqual(texts.slice(0, 2), [
    "The model did not answer (HTTP 500: busy); trying again in 2 s, attempt 2 of 4.",
    "The model did not answer (the connection dropped); trying again in 0.5 s, attempt 3 of 4.",
  ]);
  assert.equal(
    texts[2],
    `The model did not answer (${"x".repeat(200)}…); trying again now, attempt 4 of 4.`,
  );
  assert.equal(texts[3], "The model did not answer; trying again now.");
});
