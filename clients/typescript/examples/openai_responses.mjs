// An OpenAI Responses agent loop whose tools run in toolgate.
// Without OPENAI_API_KEY the model's replies come from clients/recorded/openai_responses.json.

import OpenAI from "openai";
import { ToolGate } from "@toolgate/client";
import { recordedFetch } from "./replay.mjs";

const tg = new ToolGate({ address: process.env.TOOLGATE_ADDR ?? "127.0.0.1:50051" });
const llm = process.env.OPENAI_API_KEY
  ? new OpenAI()
  : new OpenAI({ apiKey: "recorded", fetch: recordedFetch("openai_responses") });

const input = [{ role: "user", content: "Echo 'hello from the model', then tell me the time." }];
const tools = await tg.tools("openai_responses");
let response;
for (;;) {
  response = await llm.responses.create({ model: "gpt-4.1", input, tools });
  input.push(...response.output);
  if (!response.output.some((item) => item.type === "function_call")) break;
  const out = await tg.dispatch(response, { sessionId: "readme-openai-responses" });
  input.push(...out.messages);
}
console.log(response.output_text);
tg.close();
