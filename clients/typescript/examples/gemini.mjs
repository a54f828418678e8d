// A Gemini (@google/genai) agent loop whose tools run in toolgate.
// Without GEMINI_API_KEY the model's replies come from clients/recorded/gemini.json.

import { GoogleGenAI } from "@google/genai";
import { ToolGate } from "@toolgate/client";
import { recordedFetch } from "./replay.mjs";

const tg = new ToolGate({ address: process.env.TOOLGATE_ADDR ?? "127.0.0.1:50051" });
const llm = process.env.GEMINI_API_KEY
  ? new GoogleGenAI({ apiKey: process.env.GEMINI_API_KEY })
  : new GoogleGenAI({ apiKey: "recorded", httpOptions: { fetch: recordedFetch("gemini") } });

const contents = [{ role: "user", parts: [{ text: "Echo 'hello from the model', then tell me the time." }] }];
const config = { tools: await tg.tools("gemini") };
let response;
for (;;) {
  response = await llm.models.generateContent({ model: "gemini-2.5-flash", contents, config });
  contents.push(response.candidates[0].content);
  if (!response.functionCalls?.length) break;
  const out = await tg.dispatch(response, { sessionId: "readme-gemini" });
  contents.push(...out.messages);
}
console.log(response.text);
tg.close();
