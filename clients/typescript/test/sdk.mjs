// The providers' own objects, made by their SDKs from the recorded replies (no network).

import Anthropic from "@anthropic-ai/sdk";
import { GoogleGenAI } from "@google/genai";
import OpenAI from "openai";

import { recordedFetch } from "../examples/replay.mjs";

const PROMPT = "Echo 'hello from the model', then tell me the time.";
/** The call ids of the recorded first replies, in order. */
export const IDS = {
  openai_chat: ["call_Qm1", "call_Qm2"],
  openai_responses: ["call_Rs1", "call_Rs2"],
  anthropic: ["toolu_01A", "toolu_01B"],
  gemini: ["gc-1", "gc-2"],
};

export const chatCompletion = () => new OpenAI({ apiKey: "recorded", fetch: recordedFetch("openai_chat") })
  .chat.completions.create({ model: "gpt-4.1", messages: [{ role: "user", content: PROMPT }] });

export const response = () => new OpenAI({ apiKey: "recorded", fetch: recordedFetch("openai_responses") })
  .responses.create({ model: "gpt-4.1", input: PROMPT });

export const message = () => new Anthropic({ apiKey: "recorded", fetch: recordedFetch("anthropic") })
  .messages.create({ model: "claude-sonnet-4-6", max_tokens: 256, messages: [{ role: "user", content: PROMPT }] });

export const generateContent = () => new GoogleGenAI({ apiKey: "recorded", httpOptions: { fetch: recordedFetch("gemini") } })
  .models.generateContent({ model: "gemini-2.5-flash", contents: PROMPT });
