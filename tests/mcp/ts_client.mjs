// Drives toolgate's MCP front door with the official TypeScript SDK's client (Client +
// StreamableHTTPClientTransport, protocol 2025-11-25) and prints what it saw as one JSON object
// (tests/it/mcp_clients.rs asserts on it).
//
// usage: MCP_SDK=DIR node ts_client.mjs URL SCENARIO
//   MCP_SDK: the installed @modelcontextprotocol/sdk package folder (.testenv/node/node_modules/...)
//   SCENARIO: calls | loop | progress | cancel

import { join } from "node:path";
import { pathToFileURL } from "node:url";

const sdk = process.env.MCP_SDK;
if (!sdk) {
  throw new Error("set MCP_SDK to the @modelcontextprotocol/sdk package folder");
}
const load = (file) => import(pathToFileURL(join(sdk, "dist/esm", file)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");

const [url, scenario] = process.argv.slice(2);

/** What the tests read of a CallToolResult. */
function resultJson(result) {
  return {
    is_error: result.isError === true,
    text: (result.content ?? []).map((c) => c.text ?? "").join(""),
    structured: result.structuredContent ?? null,
    meta: result._meta ?? null,
  };
}

async function run(client, transport) {
  const out = { protocol: transport.protocolVersion ?? null, session: transport.sessionId ?? null };
  const call = (name, args, options) => client.callTool({ name, arguments: args }, undefined, options);
  if (scenario === "calls") {
    const listed = await client.listTools();
    out.tools = Object.fromEntries(
      listed.tools.map((t) => [t.name, { schema: t.inputSchema, annotations: t.annotations ?? null }]),
    );
    out.echo = resultJson(await call("echo", { text: "hi" }));
    out.unknown = resultJson(await call("ecoh", { text: "hi" }));
    out.invalid = resultJson(await call("scratch_write", { path: 7, extra: true }));
  } else if (scenario === "loop") {
    out.results = [];
    for (let i = 0; i < 12; i++) {
      out.results.push(resultJson(await call("echo", { same: 1 })));
    }
  } else if (scenario === "progress") {
    const seen = [];
    const result = await call(
      "ev.trigger-long-running-operation",
      { duration: 1, steps: 3 },
      { onprogress: (p) => seen.push(p) },
    );
    out.result = resultJson(result);
    out.progress = seen;
  } else if (scenario === "cancel") {
    // The SDK sends notifications/cancelled for the request when its signal aborts.
    const abort = new AbortController();
    const started = Date.now();
    const sleeping = call("sleep", { ms: 30000 }, { signal: abort.signal });
    setTimeout(() => abort.abort("the test gave up"), 500);
    try {
      out.sleep = resultJson(await sleeping);
      out.cancelled = false;
    } catch (error) {
      out.cancelled = true;
      out.error = String(error);
    }
    out.elapsed_ms = Date.now() - started;
    // The session goes on after a cancel.
    out.after = resultJson(await call("echo", { after: true }));
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
  return out;
}

const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: "toolgate-ts-client-test", version: "1.0.0" });
// What the SDK reports beside the results (a progress notification it could not place, say).
const errors = [];
client.onerror = (error) => errors.push(String(error));
try {
  await client.connect(transport);
  const out = await run(client, transport);
  out.errors = errors;
  // Ends the session with a DELETE, as a client that is done does.
  await transport.terminateSession();
  await client.close();
  console.log(JSON.stringify(out));
} catch (error) {
  console.log(JSON.stringify({ error: String(error?.stack ?? error) }));
  await client.close().catch(() => {});
  process.exitCode = 1;
}
