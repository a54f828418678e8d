// The one translator between the client's values and toolgate.v1 messages: what the model
// returned → a request, and the server's replies → the typed values of types.ts.

import { fromJson, toJson, type JsonValue as PbJson } from "@bufbuild/protobuf";
import { type Duration, timestampDate, type Value, ValueSchema } from "@bufbuild/protobuf/wkt";

import { InputError } from "./errors.js";
import * as pb from "./gen/toolgate/v1/toolgate_pb.js";
import type {
  Approval, CallResult, DispatchResult, ErrorClass, Event, Format, JsonValue, Tool,
} from "./types.js";

export const FORMATS: Record<Format, pb.DispatchOptions_MessageFormat> = {
  openai: pb.DispatchOptions_MessageFormat.OPENAI_CHAT,
  openai_responses: pb.DispatchOptions_MessageFormat.OPENAI_RESPONSES,
  anthropic: pb.DispatchOptions_MessageFormat.ANTHROPIC,
  gemini: pb.DispatchOptions_MessageFormat.GEMINI,
};

// Responses output items that are not calls but may sit beside them in `output`.
const RESPONSES_ITEMS = new Set([
  "function_call", "message", "reasoning", "web_search_call", "file_search_call", "computer_call",
  "code_interpreter_call", "image_generation_call", "local_shell_call", "mcp_call", "mcp_list_tools",
  "mcp_approval_request", "custom_tool_call",
]);

// The `type`s of calls in `calls` (OpenAI chat tool calls, LangChain's tool calls): a list of
// them is calls, not a message's items.
const CALL_TYPES = new Set(["function", "tool_call"]);
// The keys a Gemini part is made of (text, a call, a response, data, ...).
const GEMINI_PART_KEYS = new Set([
  "text", "thought", "thoughtSignature", "thought_signature", "functionCall", "function_call", "functionResponse",
  "function_response", "inlineData", "inline_data", "fileData", "file_data", "executableCode", "executable_code",
  "codeExecutionResult", "code_execution_result",
]);

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

/** An SDK object (openai, @anthropic-ai/sdk, @google/genai classes) as the JSON its API sends. */
export function plain(value: unknown): unknown {
  if (value === undefined) return undefined;
  try {
    return JSON.parse(JSON.stringify(value)) as unknown;
  } catch (error) {
    throw new InputError(`cannot read the response as JSON: ${String(error)}`);
  }
}

/** Which request field the model's reply goes in, its JSON, and the chat format it implies. */
export function readResponse(response: unknown): { field: "assistantMessage" | "calls"; value: unknown; format: Format } {
  const value = plain(response);
  if (Array.isArray(value)) {
    const items = value.filter(isObj);
    if (items.length === value.length && items.length > 0) {
      // A Responses output, Anthropic content blocks or Gemini parts, given bare: the server
      // sorts the calls from the rest (text, thinking, hosted tools) as for the whole message.
      if (items.every((i) => typeof i.type === "string") && !items.some((i) => CALL_TYPES.has(String(i.type)))) {
        const format = items.some((i) => RESPONSES_ITEMS.has(String(i.type))) ? "openai_responses" : "anthropic";
        return { field: "assistantMessage", value, format };
      }
      if (items.every((i) => Object.keys(i).some((k) => GEMINI_PART_KEYS.has(k)))) {
        return { field: "assistantMessage", value, format: "gemini" };
      }
    }
    return { field: "calls", value, format: callsFormat(value) };
  }
  if (isObj(value)) return readObject(value);
  throw new InputError(`cannot read a ${typeof response} as a model response`);
}

function readObject(value: Obj): { field: "assistantMessage"; value: unknown; format: Format } {
  const message = (format: Format, v: unknown) => ({ field: "assistantMessage" as const, value: v, format });
  if ("choices" in value) {
    const choices = value.choices;
    if (!Array.isArray(choices) || choices.length === 0) throw new InputError("the ChatCompletion has no choices");
    const first: unknown = choices[0];
    if (!isObj(first) || !isObj(first.message)) throw new InputError("the ChatCompletion's first choice has no message");
    return message("openai", first.message);
  }
  if (value.object === "response" || Array.isArray(value.output)) {
    return message("openai_responses", value.output ?? []);
  }
  if ("candidates" in value) {
    const candidates = value.candidates;
    if (!Array.isArray(candidates) || candidates.length === 0) throw new InputError("the GenerateContentResponse has no candidates");
    const first: unknown = candidates[0];
    if (!isObj(first) || !isObj(first.content)) throw new InputError("the GenerateContentResponse's first candidate has no content");
    return message("gemini", first.content);
  }
  if ("parts" in value) return message("gemini", value);
  if ("tool_calls" in value) return message("openai", value);
  const content = value.content;
  if (value.type === "message" || "stop_reason" in value
      || (Array.isArray(content) && content.some((b) => isObj(b) && b.type === "tool_use"))) {
    return message("anthropic", value);
  }
  if (value.role === "assistant") return message("openai", value);
  throw new InputError(
    "cannot tell which provider this object comes from: expected a ChatCompletion (choices), a chat " +
    "message (tool_calls), a Responses Response (output), an Anthropic Message (content blocks), a " +
    "Gemini response (candidates) or Content (parts)");
}

/** The reply format a list of calls implies: the provider whose call shape they have, else OpenAI chat. */
function callsFormat(calls: unknown[]): Format {
  for (const call of calls) {
    if (!isObj(call)) continue;
    if (call.type === "tool_use") return "anthropic";
    if (call.type === "function_call") return "openai_responses";
    // A Gemini part, or a FunctionCall itself (response.functionCalls): name and args.
    if ("functionCall" in call || "function_call" in call || ("args" in call && "name" in call && !("arguments" in call))) {
      return "gemini";
    }
  }
  return "openai";
}

export function toValue(value: unknown): Value {
  try {
    return fromJson(ValueSchema, value as PbJson);
  } catch (error) {
    throw new InputError(`not JSON-shaped: ${String(error)}`);
  }
}

export function jsonValue(value: Value | undefined): JsonValue | undefined {
  return value === undefined ? undefined : (toJson(ValueSchema, value) as JsonValue);
}

const seconds = (d: Duration | undefined): number => (d ? Number(d.seconds) + d.nanos / 1e9 : 0);
/**
 * An enum value's name; one newer than this client (the API only adds) as its number, in text,
 * rather than undefined.
 */
const name = <T extends string>(names: Record<number, string>, n: number): T => (names[n] ?? String(n)) as T;
const errorClass = (n: pb.ErrorClass): ErrorClass => name(pb.ErrorClass, n);

export function callResult(r: pb.CallResult): CallResult {
  return {
    index: r.index, id: r.id, name: r.name, tool: r.tool, success: r.success,
    arguments: jsonValue(r.arguments), result: jsonValue(r.result), content: r.content, error: r.error,
    errorClass: errorClass(r.errorClass), attempts: r.attempts, duration: seconds(r.duration),
    cached: r.cached, truncated: r.truncated,
    parts: r.parts.flatMap((p): CallResult["parts"] => p.part.case === "text" ? [{ text: p.part.value }]
      : p.part.case === "image" ? [{ image: { mimeType: p.part.value.mimeType, data: p.part.value.data } }] : []),
  };
}

export function batchResult(r: pb.BatchResult, format: Format): DispatchResult {
  const results = r.results.map(callResult);
  return {
    messages: r.messages, results, allSucceeded: r.allSucceeded, errors: r.errors,
    failed: results.filter((c) => !c.success), sessionId: r.sessionId,
    outcome: name(pb.BatchResult_Outcome, r.outcome), outcomeReason: r.outcomeReason,
    duration: seconds(r.duration), format,
  };
}

export function approval(a: pb.Approval): Approval {
  return {
    approvalId: a.approvalId, sessionId: a.sessionId, index: a.index, id: a.id, tool: a.tool,
    arguments: jsonValue(a.arguments), reason: a.reason, source: a.source,
    expiresAt: a.expiresAt ? timestampDate(a.expiresAt) : undefined, requestedBy: a.requestedBy,
    requesterMayAnswer: a.requesterMayAnswer, rememberAllowed: a.rememberAllowed,
    argumentsCut: a.argumentsCut,
  };
}

/** A stream event as its typed value; undefined for one this client does not know (a newer server's). */
export function event(e: pb.DispatchEvent, format: Format): Event | undefined {
  const v = e.event;
  switch (v.case) {
    case "callReceived":
      return { kind: "call_received", index: v.value.index, id: v.value.id, name: v.value.name, arguments: jsonValue(v.value.arguments) };
    case "toolPre":
      return { kind: "tool_pre", index: v.value.index, id: v.value.id, tool: v.value.tool, attempt: v.value.attempt };
    case "toolPost":
      return {
        kind: "tool_post", index: v.value.index, id: v.value.id, tool: v.value.tool, attempt: v.value.attempt,
        isError: v.value.isError, errorClass: errorClass(v.value.errorClass), duration: seconds(v.value.duration),
        cached: v.value.cached, resultPreview: v.value.resultPreview,
      };
    case "gateDecision":
      return {
        kind: "gate_decision", index: v.value.index, id: v.value.id, tool: v.value.tool, attempt: v.value.attempt,
        verdict: name(pb.GateDecision_Verdict, v.value.verdict), source: v.value.source,
        reason: v.value.reason, argsDigest: v.value.argsDigest,
      };
    case "retryScheduled":
      return {
        kind: "retry_scheduled", index: v.value.index, id: v.value.id, tool: v.value.tool, attempt: v.value.attempt,
        delay: seconds(v.value.delay), reason: v.value.reason,
      };
    case "loopDetected":
      return {
        kind: "loop_detected", index: v.value.index, id: v.value.id, tool: v.value.tool, attempt: v.value.attempt,
        action: name(pb.LoopDetected_Action, v.value.action), pattern: v.value.pattern, repeats: v.value.repeats,
      };
    case "breakerChanged":
      return {
        kind: "breaker_changed", tool: v.value.tool, from: name(pb.BreakerState, v.value.from),
        to: name(pb.BreakerState, v.value.to), id: v.value.id,
      };
    case "progress":
      return {
        kind: "progress", index: v.value.index, id: v.value.id, tool: v.value.tool, attempt: v.value.attempt,
        progress: v.value.progress, total: v.value.total, message: v.value.message,
      };
    case "approvalRequested":
      return { kind: "approval_requested", approval: approval(v.value) };
    case "approvalResolved":
      return {
        kind: "approval_resolved", approvalId: v.value.approvalId, sessionId: v.value.sessionId, index: v.value.index,
        id: v.value.id, tool: v.value.tool, decision: name(pb.ResolveApprovalRequest_Decision, v.value.decision),
        resolvedBy: v.value.resolvedBy, reason: v.value.reason, how: name(pb.ApprovalResolved_How, v.value.how),
        argumentsUpdated: v.value.argumentsUpdated, remember: name(pb.ResolveApprovalRequest_Remember, v.value.remember),
        source: v.value.source,
      };
    case "result":
      return { kind: "finished", result: batchResult(v.value, format) };
    default:
      return undefined;
  }
}

export function tool(t: pb.ToolDefinition): Tool {
  return {
    name: t.name, description: t.description, inputSchema: t.inputSchema ?? {},
    source: name(pb.ToolDefinition_Source, t.source),
    status: name(pb.ToolDefinition_Status, t.status),
    readOnly: t.annotations?.readOnly ?? false, destructive: t.annotations?.destructive ?? false,
    idempotent: t.annotations?.idempotent ?? false, openWorld: t.annotations?.openWorld ?? false,
    remote: t.remote,
  };
}

// A tool name every provider takes (OpenAI and Anthropic: letters, digits, '_' and '-', at most
// 64; Gemini: starting with a letter or '_').
const PORTABLE_NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,63}$/;

/**
 * Each tool's name as the model is given it: its own when every provider takes it, else a
 * portable alias (`py.get_weather` → `py_get_weather`), unique among the tools. A call to an alias
 * is sent with a binding to the tool (`DispatchBatchRequest.bindings`).
 */
export function modelNames(tools: Tool[]): Map<string, string> {
  const taken = new Set(tools.map((t) => t.name).filter((n) => PORTABLE_NAME.test(n)));
  const names = new Map<string, string>();
  for (const t of tools) {
    if (taken.has(t.name)) {
      names.set(t.name, t.name);
      continue;
    }
    let base = t.name.replace(/[^A-Za-z0-9_-]/g, "_");
    if (!/^[A-Za-z_]/.test(base)) base = `t_${base}`;
    base = base.slice(0, 64);
    let alias = base;
    for (let n = 2; taken.has(alias); n++) alias = `${base.slice(0, 64 - String(n).length - 1)}_${n}`;
    taken.add(alias);
    names.set(t.name, alias);
  }
  return names;
}

/**
 * Tools as the provider's tool list (`tools` of its request), leaving out quarantined ones (their
 * calls would be refused until an operator accepts the change).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function toolDefinitions(tools: Tool[], format: Format): any[] {
  const names = modelNames(tools);
  const usable = tools.filter((t) => t.status !== "QUARANTINED").map((t) => ({ ...t, name: names.get(t.name) ?? t.name }));
  const schema = (t: Tool) => ({ type: "object", ...(Object.keys(t.inputSchema).length ? t.inputSchema : { properties: {} }) });
  switch (format) {
    case "openai":
      return usable.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: schema(t) } }));
    case "openai_responses":
      return usable.map((t) => ({ type: "function", name: t.name, description: t.description, parameters: schema(t), strict: false }));
    case "anthropic":
      return usable.map((t) => ({ name: t.name, description: t.description, input_schema: schema(t) }));
    case "gemini":
      return usable.length === 0 ? [] : [{
        functionDeclarations: usable.map((t) => ({ name: t.name, description: t.description, parametersJsonSchema: schema(t) })),
      }];
    default:
      throw new InputError(`unknown format ${JSON.stringify(format)}: one of ${Object.keys(FORMATS).join(", ")}`);
  }
}
