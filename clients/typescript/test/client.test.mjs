// Every input shape, every reply format, streaming, approvals and tools() against the real
// server, with the providers' SDKs making the inputs from recorded replies.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { InputError, ToolGate, toolDefinitions } from "@toolgate/client";

import * as sdk from "./sdk.mjs";
import { start } from "./server.mjs";

let server;
let tg;
before(async () => {
  server = await start();
  tg = new ToolGate({ address: server.addr });
});
after(() => {
  tg.close();
  server.stop();
});

const ECHOED = '{"text":"hello from the model"}';
const NORMALIZED = ["n1", "n2"];

const SHAPES = [
  ["ChatCompletion", sdk.chatCompletion, "openai", "openai_chat"],
  ["ChatCompletionMessage", async () => (await sdk.chatCompletion()).choices[0].message, "openai", "openai_chat"],
  ["message.tool_calls", async () => (await sdk.chatCompletion()).choices[0].message.tool_calls, "openai", "openai_chat"],
  ["Response", sdk.response, "openai_responses", "openai_responses"],
  ["Response.output", async () => (await sdk.response()).output, "openai_responses", "openai_responses"],
  ["anthropic Message", sdk.message, "anthropic", "anthropic"],
  ["anthropic tool_use blocks", async () => (await sdk.message()).content.filter((b) => b.type === "tool_use"), "anthropic", "anthropic"],
  ["GenerateContentResponse", sdk.generateContent, "gemini", "gemini"],
  ["Content", async () => (await sdk.generateContent()).candidates[0].content, "gemini", "gemini"],
  ["response.functionCalls", async () => (await sdk.generateContent()).functionCalls, "gemini", "gemini"],
  ["anthropic Message.content (text and tool_use blocks)", async () => (await sdk.message()).content, "anthropic", "anthropic"],
  ["Content.parts", async () => (await sdk.generateContent()).candidates[0].content.parts, "gemini", "gemini"],
  ["normalized calls", async () => [
    { id: "n1", name: "echo", arguments: { text: "hello from the model" } }, { id: "n2", name: "now" },
  ], "openai", "normalized"],
];

describe("every input shape runs its calls under the model's ids", () => {
  for (const [label, make, format, recorded] of SHAPES) {
    test(label, async () => {
      const out = await tg.dispatch(await make());
      assert.equal(out.format, format);
      assert.deepEqual(out.results.map((r) => r.id), sdk.IDS[recorded] ?? NORMALIZED);
      assert.deepEqual(out.results.map((r) => r.tool), ["echo", "now"]);
      assert.ok(out.allSucceeded, JSON.stringify(out.failed));
      assert.equal(out.errors, 0);
      assert.equal(out.results[0].content, ECHOED);
      assert.deepEqual(out.results[0].result, { text: "hello from the model" });
      assert.ok(out.sessionId);
      assert.equal(out.outcome, "COMPLETED");
      assert.equal(out.messages.length, format === "openai" || format === "openai_responses" ? 2 : 1);
    });
  }
});

describe("every reply format", () => {
  const ids = sdk.IDS.anthropic;
  test("openai: one tool message per call", async () => {
    const out = await tg.dispatch(await sdk.message(), { format: "openai" });
    assert.deepEqual(out.messages.map((m) => [m.role, m.tool_call_id]), ids.map((i) => ["tool", i]));
    assert.equal(out.messages[0].content, ECHOED);
  });
  test("openai_responses: function_call_output items", async () => {
    const out = await tg.dispatch(await sdk.message(), { format: "openai_responses" });
    assert.deepEqual(out.messages.map((m) => [m.type, m.call_id]), ids.map((i) => ["function_call_output", i]));
    assert.equal(out.messages[0].output, ECHOED);
  });
  test("anthropic: one user message of tool_result blocks", async () => {
    const out = await tg.dispatch(await sdk.chatCompletion(), { format: "anthropic" });
    const [m] = out.messages;
    assert.equal(m.role, "user");
    assert.deepEqual(m.content.map((b) => [b.type, b.tool_use_id, b.is_error]),
      sdk.IDS.openai_chat.map((i) => ["tool_result", i, false]));
  });
  test("gemini: one user Content of functionResponse parts", async () => {
    const out = await tg.dispatch(await sdk.chatCompletion(), { format: "gemini" });
    const [m] = out.messages;
    assert.equal(m.role, "user");
    assert.deepEqual(m.parts.map((p) => [p.functionResponse.id, p.functionResponse.name]),
      [["call_Qm1", "echo"], ["call_Qm2", "now"]]);
    assert.deepEqual(m.parts[0].functionResponse.response, { output: { text: "hello from the model" } });
  });
  test("a failed call is a result and an error message, not an exception", async () => {
    const out = await tg.dispatch([{ id: "bad1", name: "no_such_tool", arguments: {} }], { format: "anthropic" });
    assert.equal(out.errors, 1);
    assert.equal(out.allSucceeded, false);
    assert.equal(out.results[0].errorClass, "UNKNOWN_TOOL");
    assert.deepEqual(out.failed, [out.results[0]]);
    assert.equal(out.messages[0].content[0].is_error, true);
  });
});

test("the session id is kept across batches, and the session can be ended", async () => {
  const first = await tg.dispatch(await sdk.chatCompletion(), { sessionId: "ts-session-1" });
  const second = await tg.dispatch(await sdk.message(), { sessionId: "ts-session-1" });
  assert.equal(first.sessionId, "ts-session-1");
  assert.equal(second.sessionId, "ts-session-1");
  assert.equal(await tg.endSession("ts-session-1"), true);
  assert.equal(await tg.endSession("ts-session-1"), false);
});

test("what is not a model response is refused before sending", async () => {
  for (const bad of [42, "text", { unrelated: true }, { choices: [] }, { candidates: [] }]) {
    await assert.rejects(tg.dispatch(bad), (e) => e instanceof InputError && e.code === undefined);
  }
});

test("stream yields each call's events in order, then the result", async () => {
  const events = [];
  for await (const e of tg.stream(await sdk.chatCompletion(), { sessionId: "ts-stream" })) events.push(e);
  const kinds = events.map((e) => e.kind);
  assert.equal(kinds.at(-1), "finished");
  const received = events.filter((e) => e.kind === "call_received");
  assert.deepEqual(received.map((e) => [e.index, e.id, e.name]), [[0, "call_Qm1", "echo"], [1, "call_Qm2", "now"]]);
  assert.deepEqual(received[0].arguments, { text: "hello from the model" });
  const post = events.filter((e) => e.kind === "tool_post");
  assert.deepEqual(post.map((e) => [e.id, e.isError, e.errorClass]), [["call_Qm1", false, "NONE"], ["call_Qm2", false, "NONE"]]);
  assert.match(post[0].resultPreview, /hello from the model/);
  assert.equal(events.at(-1).result.sessionId, "ts-stream");
});

const RISKY = [{ id: "r1", name: "echo", arguments: { text: "risky move" } }];

test("approve answers an ask, sync or async, and can deny or edit", async () => {
  const asked = [];
  const approved = await tg.dispatch(RISKY, { approve: (a) => { asked.push(a); return true; } });
  assert.equal(asked.length, 1);
  assert.equal(asked[0].tool, "echo");
  assert.equal(asked[0].reason, "a risky echo");
  assert.equal(asked[0].source, "risky");
  assert.deepEqual(asked[0].arguments, { text: "risky move" });
  assert.ok(asked[0].expiresAt instanceof Date);
  assert.equal(approved.results[0].content, '{"text":"risky move"}');

  const denied = await tg.dispatch(RISKY, { approve: async () => ({ approve: false, reason: "not today" }) });
  assert.equal(denied.results[0].errorClass, "APPROVAL_DENIED");
  assert.match(denied.results[0].content, /not today/);

  const edited = await tg.dispatch(RISKY, { approve: async () => ({ approve: true, arguments: { text: "a safer move" } }) });
  assert.equal(edited.results[0].content, '{"text":"a safer move"}');

  const refused = await tg.dispatch(RISKY);
  assert.equal(refused.results[0].errorClass, "BLOCKED");
});

test("the stream shows the ask and its answer; remembered for the session", async () => {
  const events = [];
  const approve = () => ({ approve: true, rememberSession: true });
  for await (const e of tg.stream(RISKY, { sessionId: "ts-remember", approve })) events.push(e);
  assert.ok(events.some((e) => e.kind === "gate_decision" && e.verdict === "ASK"));
  const resolved = events.filter((e) => e.kind === "approval_resolved");
  assert.deepEqual(resolved.map((e) => [e.decision, e.how, e.remember]), [["APPROVE", "ANSWERED", "SESSION"]]);
  const again = await tg.dispatch([{ id: "r2", name: "echo", arguments: { text: "risky again" } }], {
    sessionId: "ts-remember", approve: () => { throw new Error("asked again"); },
  });
  assert.ok(again.results[0].success);
});

test("tools come in each provider's tool shape", async () => {
  const listed = await tg.listTools();
  const names = listed.map((t) => t.name).sort();
  assert.ok(["echo", "now", "sleep"].every((n) => names.includes(n)));
  assert.deepEqual((await tg.tools("openai")).map((t) => [t.type, t.function.name]).sort(), names.map((n) => ["function", n]));
  assert.deepEqual((await tg.tools("openai_responses")).map((t) => [t.type, t.name]).sort(), names.map((n) => ["function", n]));
  const anthropic = await tg.tools("anthropic");
  assert.deepEqual(anthropic.map((t) => t.name).sort(), names);
  assert.ok(anthropic.every((t) => t.input_schema.type === "object"));
  const [gemini] = await tg.tools("gemini");
  assert.deepEqual(gemini.functionDeclarations.map((d) => d.name).sort(), names);
});

test("quarantined tools are left out of every format", () => {
  const tool = (name, status) => ({ name, description: "d", inputSchema: { type: "object" }, source: "MCP", status,
    readOnly: false, destructive: false, idempotent: false, openWorld: false, remote: "r" });
  const tools = [tool("kept", "PINNED"), tool("changed", "QUARANTINED"), tool("local", "LOCAL")];
  for (const format of ["openai", "openai_responses", "anthropic", "gemini"]) {
    const text = JSON.stringify(toolDefinitions(tools, format));
    assert.ok(text.includes("kept") && text.includes("local") && !text.includes("changed"), format);
  }
});

test("calls the provider runs itself are left to it", async () => {
  const hosted = { object: "response", output: [
    { type: "mcp_call", id: "mcp_1", name: "echo", server_label: "docs", arguments: '{"text":"ran at OpenAI"}', output: "x" },
    { type: "function_call", call_id: "call_own", name: "now", arguments: "{}" },
  ] };
  const serverTools = { type: "message", role: "assistant", stop_reason: "tool_use", content: [
    { type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: { query: "x" } },
    { type: "web_search_tool_result", tool_use_id: "srvtoolu_1", content: [] },
    { type: "tool_use", id: "toolu_own", name: "now", input: {} },
  ] };
  for (const [response, id] of [[hosted, "call_own"], [serverTools, "toolu_own"]]) {
    const out = await tg.dispatch(response);
    assert.deepEqual(out.results.map((r) => r.id), [id]);
    assert.ok(out.allSucceeded);
    const text = JSON.stringify(out.messages);
    assert.ok(text.includes(id) && !text.includes("mcp_1") && !text.includes("srvtoolu_1"), text);
  }
});

test("what approve throws reaches the caller as it is, and the batch ends", async () => {
  class NoTerminal extends Error {}
  await assert.rejects(tg.dispatch(RISKY, { sessionId: "ts-throw", approve: () => { throw new NoTerminal("no tty"); } }),
    (e) => e instanceof NoTerminal && e.message === "no tty");
});

test("a session id toolgate would refuse is refused before sending", async () => {
  for (const bad of ["not a valid id!", "s\u00e9", "a\nb", "x".repeat(129)]) {
    await assert.rejects(tg.dispatch(RISKY, { sessionId: bad }), (e) => e instanceof InputError && /sessionId/.test(e.message));
  }
});

test("a message the server refuses before the stream's first event keeps its status", async () => {
  await assert.rejects(tg.dispatch({ role: "assistant", content: null }),
    (e) => e.code === "INVALID_ARGUMENT" && /no tool call and no text/.test(e.details));
});
