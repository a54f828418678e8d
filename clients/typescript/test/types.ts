// Compiled, not run (`tsc -p test/tsconfig.json`): the package's declarations as a TypeScript
// agent meets them, beside each SDK's own request types. What each loop appends must be what
// the SDK's next request takes.

import Anthropic from "@anthropic-ai/sdk";
import { type Content, GoogleGenAI } from "@google/genai";
import OpenAI from "openai";

import { type DispatchResult, type Event, ToolGate, ToolGateError } from "@toolgate/client";

export async function loops(tg: ToolGate, openai: OpenAI, anthropic: Anthropic, google: GoogleGenAI): Promise<void> {
  const chat: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "user", content: "hi" }];
  const completion = await openai.chat.completions.create({ model: "m", messages: chat, tools: await tg.tools("openai") });
  chat.push(completion.choices[0].message);
  const fromChat: DispatchResult = await tg.dispatch(completion, { sessionId: "s" });
  chat.push(...fromChat.messages);

  const input: OpenAI.Responses.ResponseInputItem[] = [{ role: "user", content: "hi" }];
  const response = await openai.responses.create({ model: "m", input, tools: await tg.tools("openai_responses") });
  input.push(...(await tg.dispatch(response.output)).messages);

  const messages: Anthropic.MessageParam[] = [{ role: "user", content: "hi" }];
  const reply = await anthropic.messages.create({ model: "m", max_tokens: 1, messages, tools: await tg.tools("anthropic") });
  messages.push({ role: "assistant", content: reply.content });
  messages.push(...(await tg.dispatch(reply, { format: "anthropic" })).messages);

  const contents: Content[] = [{ role: "user", parts: [{ text: "hi" }] }];
  const generated = await google.models.generateContent({ model: "m", contents, config: { tools: await tg.tools("gemini") } });
  contents.push(...(await tg.dispatch(generated)).messages);

  for await (const event of tg.stream(reply, { approve: async (a) => ({ approve: a.tool !== "rm", reason: "policy" }) })) {
    const e: Event = event;
    if (e.kind === "finished") console.log(e.result.allSucceeded, e.result.results[0]?.errorClass);
  }
  try {
    await tg.endSession("s");
  } catch (error) {
    if (error instanceof ToolGateError) console.log(error.code, error.details);
  }
}
