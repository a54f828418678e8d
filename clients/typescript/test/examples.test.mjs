// The README's agent loops, run as a user runs them (without an API key, against the recorded
// replies) through the real server: the provider SDK sends toolgate's tool messages and tool
// list as its next request. The README shows the example files as they are; the generated code
// matches proto/; the package installs from `npm pack`.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { start } from "./server.mjs";

const HERE = new URL("../", import.meta.url).pathname;
const FINAL = 'The echo said "hello from the model", and I have the time.';
const EXAMPLES = ["openai_chat.mjs", "openai_responses.mjs", "anthropic_messages.mjs", "gemini.mjs"];

let server;
before(async () => { server = await start(); });
after(() => server.stop());

function run(example) {
  const dir = mkdtempSync(join(tmpdir(), "toolgate-ts-example-"));
  const log = join(dir, "sent.json");
  const env = { ...process.env, TOOLGATE_ADDR: server.addr, REPLAY_LOG: log };
  for (const key of ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"]) delete env[key];
  const out = execFileSync(process.execPath, [join(HERE, "examples", example)], { env, encoding: "utf8", timeout: 120_000 });
  assert.equal(out.trim(), FINAL);
  const sent = JSON.parse(readFileSync(log, "utf8"));
  rmSync(dir, { recursive: true, force: true });
  assert.equal(sent.length, 2);
  return sent;
}

test("the OpenAI chat loop", () => {
  const [first, second] = run("openai_chat.mjs");
  assert.ok(first.tools.some((t) => t.function.name === "echo"));
  const tool = second.messages.filter((m) => m.role === "tool");
  assert.deepEqual(tool.map((m) => m.tool_call_id), ["call_Qm1", "call_Qm2"]);
  assert.equal(tool[0].content, '{"text":"hello from the model"}');
  assert.equal(second.messages[1].tool_calls[0].id, "call_Qm1");
});

test("the OpenAI Responses loop", () => {
  const [first, second] = run("openai_responses.mjs");
  assert.ok(first.tools.some((t) => t.name === "echo"));
  const outputs = second.input.filter((i) => i.type === "function_call_output");
  assert.deepEqual(outputs.map((o) => o.call_id), ["call_Rs1", "call_Rs2"]);
  assert.equal(outputs[0].output, '{"text":"hello from the model"}');
});

test("the Anthropic loop", () => {
  const [first, second] = run("anthropic_messages.mjs");
  assert.ok(first.tools.some((t) => t.name === "echo"));
  const [, assistant, results] = second.messages;
  assert.deepEqual(assistant.content.map((b) => b.type), ["text", "tool_use", "tool_use"]);
  assert.deepEqual(results.content.map((b) => [b.type, b.tool_use_id]), [["tool_result", "toolu_01A"], ["tool_result", "toolu_01B"]]);
});

test("the Gemini loop", () => {
  const [first, second] = run("gemini.mjs");
  assert.ok(first.tools[0].functionDeclarations.some((d) => d.name === "echo"));
  const responses = second.contents.at(-1).parts.map((p) => p.functionResponse);
  assert.deepEqual(responses.map((r) => [r.id, r.name]), [["gc-1", "echo"], ["gc-2", "now"]]);
  assert.deepEqual(responses[0].response, { output: { text: "hello from the model" } });
});

test("the README shows each example as it is", () => {
  const readme = readFileSync(join(HERE, "README.md"), "utf8");
  for (const name of EXAMPLES) {
    const marker = `<!-- example: examples/${name} -->\n\`\`\`js\n`;
    const at = readme.indexOf(marker);
    assert.ok(at >= 0, `README.md does not show examples/${name}`);
    const body = readme.slice(at + marker.length, readme.indexOf("```", at + marker.length));
    assert.equal(body, readFileSync(join(HERE, "examples", name), "utf8"), name);
  }
});

test("the committed generated code matches proto/", () => {
  const out = mkdtempSync(join(tmpdir(), "toolgate-ts-gen-"));
  const template = join(out, "buf.gen.yaml");
  writeFileSync(template, readFileSync(join(HERE, "buf.gen.yaml"), "utf8").replace("out: src/gen", `out: ${out}/gen`));
  execFileSync(join(HERE, "node_modules", ".bin", "buf"), ["generate", "../../proto", "--path",
    "../../proto/toolgate/v1/toolgate.proto", "--template", template], {
    cwd: HERE, stdio: "pipe",
    // buf finds protoc-gen-es on PATH, as npm run puts it there.
    env: { ...process.env, PATH: `${join(HERE, "node_modules", ".bin")}:${process.env.PATH}` },
  });
  const path = "toolgate/v1/toolgate_pb.ts";
  assert.equal(readFileSync(join(out, "gen", path), "utf8"), readFileSync(join(HERE, "src", "gen", path), "utf8"),
    "src/gen is stale: run npm run generate");
  rmSync(out, { recursive: true, force: true });
});

/** Installs `what` into a new project and runs an agent there that imports the package. */
function installAndRun(what) {
  const dir = mkdtempSync(join(tmpdir(), "toolgate-ts-install-"));
  try {
    const spec = what === "pack"
      ? join(dir, execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: HERE, encoding: "utf8" }).trim().split("\n").pop())
      : HERE;
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "an-agent", private: true, type: "module" }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", spec], { cwd: dir, stdio: "pipe" });
    writeFileSync(join(dir, "agent.mjs"), `
      import { ToolGate, API_VERSION } from "@toolgate/client";
      const tg = new ToolGate({ address: process.argv[2] });
      const out = await tg.dispatch({ role: "assistant", content: null, tool_calls: [
        { id: "call_1", type: "function", function: { name: "echo", arguments: '{"text":"installed"}' } }] });
      console.log(API_VERSION, out.messages[0].tool_call_id, out.messages[0].content);
      tg.close();`);
    const printed = execFileSync(process.execPath, [join(dir, "agent.mjs"), server.addr], { cwd: dir, encoding: "utf8" });
    assert.equal(printed.trim(), 'toolgate.v1 call_1 {"text":"installed"}');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("the package installs from npm pack and works", () => installAndRun("pack"));

// The built checkout: npm links the folder, whose node_modules has the runtime dependencies.
test("the package installs with npm install ./clients/typescript and works", () => installAndRun("folder"));
