// An Anthropic Messages agent loop whose tools run in toolgate.
// Without ANTHROPIC_API_KEY the model's replies come from clients/recorded/anthropic.json.

import Anthropic from "@anthropic-ai/sdk";
import { ToolGate } from "@toolgate/client";
import { recordedFetch } from "./replay.mjs";

const tg = new ToolGate({ address: process.env.TOOLGATE_ADDR ?? "127.0.0.1:50051" });
const llm = process.env.ANTHROPIC_API_KEY
  ? new Anthropic()
  : new Anthropic({ apiKey: "recorded", fetch: recordedFetch("anthropic") });

const messages = [{ role: "user", content: "Echo 'hello from the model', then tell me the time." }];
const tools = await tg.tools("anthropic");
let reply;
for (;;) {
  reply = await llm.messages.create({ model: "claude-sonnet-4-6", max_tokens: 1024, messages, tools });
  messages.push({ role: "assistant", content: reply.content });
  if (reply.stop_reason !== "tool_use") break;
  const out = await tg.dispatch(reply, { sessionId: "readme-anthropic" });
  messages.push(...out.messages);
}
console.log(reply.content[0].text);
tg.close();
