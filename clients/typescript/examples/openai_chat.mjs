// An OpenAI Chat Completions agent loop whose tools run in toolgate.
// Without OPENAI_API_KEY the model's replies come from clients/recorded/openai_chat.json.

import OpenAI from "openai";
import { ToolGate } from "@toolgate/client";
import { recordedFetch } from "./replay.mjs";

const tg = new ToolGate({ address: process.env.TOOLGATE_ADDR ?? "127.0.0.1:50051" });
const llm = process.env.OPENAI_API_KEY
  ? new OpenAI()
  : new OpenAI({ apiKey: "recorded", fetch: recordedFetch("openai_chat") });

const messages = [{ role: "user", content: "Echo 'hello from the model', then tell me the time." }];
const tools = await tg.tools("openai");
let message;
for (;;) {
  const completion = await llm.chat.completions.create({ model: "gpt-4.1", messages, tools });
  message = completion.choices[0].message;
  messages.push(message);
  if (!message.tool_calls?.length) break;
  const out = await tg.dispatch(completion, { sessionId: "readme-openai-chat" });
  messages.push(...out.messages);
}
console.log(message.content);
tg.close();
