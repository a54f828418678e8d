// The typed values the client returns: a batch's result, its calls' results, its events.

/** The chat formats toolgate answers in (DispatchOptions.MessageFormat). */
export type Format = "openai" | "openai_responses" | "anthropic" | "gemini";

/**
 * Why a call failed (toolgate.v1.ErrorClass); "NONE" for a call that succeeded. Every enum-valued
 * field holds a value newer than this client as its number in text ("99").
 */
export type ErrorClass =
  | "NONE" | "INVALID_CALL" | "INVALID_ARGUMENTS" | "DUPLICATE_ID" | "UNKNOWN_TOOL" | "BLOCKED"
  | "PERMISSION_DENIED" | "CIRCUIT_OPEN" | "TIMEOUT" | "CANCELLED" | "TOOL_ERROR" | "PANIC"
  | "TRANSPORT" | "LOOP_STOPPED" | "SKIPPED" | "QUARANTINED" | "APPROVAL_DENIED" | "APPROVAL_TIMEOUT"
  | "STORE_UNAVAILABLE" | "OUTCOME_UNKNOWN";

export type Outcome = "COMPLETED" | "FAILED_FAST" | "CANCELLED" | "LOOP_DETECTED" | "RECOVERY_EXHAUSTED";
export type BreakerState = "CLOSED" | "OPEN" | "HALF_OPEN";
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** A tool call in toolgate's normalized shape, for agents that build calls themselves. */
export interface Call {
  id: string;
  name: string;
  arguments?: Record<string, unknown>;
}

/** One call's result, in the model's order, under the model's call id. */
export interface CallResult {
  index: number;
  id: string;
  /** The name the model used. */
  name: string;
  /** The registered tool that ran (differs from `name` for a binding). */
  tool: string;
  success: boolean;
  arguments: JsonValue | undefined;
  /** The tool's structured result (undefined when it failed or returned none). */
  result: JsonValue | undefined;
  /** What the model is shown: the result as text, or the error's text. */
  content: string;
  error: string;
  errorClass: ErrorClass;
  attempts: number;
  /** Seconds the call took, retries included. */
  duration: number;
  cached: boolean;
  truncated: boolean;
  /** The result's content parts, for a tool that returned text and images (data in base64). */
  parts: ({ text: string } | { image: { mimeType: string; data: string } })[];
}

/** A batch's result: the tool messages to append to the conversation, and each call's result. */
export interface DispatchResult {
  /**
   * The tool messages in the requested chat format: plain objects that are the provider SDK's
   * message params (typed `any` so `messages.push(...out.messages)` type-checks against the SDK's
   * own param types).
   */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  messages: any[];
  results: CallResult[];
  allSucceeded: boolean;
  /** How many calls failed. */
  errors: number;
  /** The calls that failed, in order. */
  failed: CallResult[];
  /** The session the batch ran in (the one given, or the ephemeral one toolgate made). */
  sessionId: string;
  outcome: Outcome;
  outcomeReason: string;
  /** Seconds the batch took. */
  duration: number;
  /** The format `messages` are in. */
  format: Format;
}

/** A call waiting for a person (interactive approvals). */
export interface Approval {
  approvalId: string;
  sessionId: string;
  index: number;
  id: string;
  tool: string;
  /** The call's arguments, redacted as the audit log shows them. */
  arguments: JsonValue | undefined;
  reason: string;
  /** Who asked: a hook's name or `permissions[<rule id>]`. */
  source: string;
  expiresAt: Date | undefined;
  requestedBy: string;
  /**
   * Whether `requestedBy` may answer it itself: only where the operator lets the asking rule's
   * requester answer (`requester_may_answer`); otherwise an approver's credential does.
   */
  requesterMayAnswer: boolean;
  /** Whether an answer may be remembered for the session (`rememberSession`). */
  rememberAllowed: boolean;
  /** `arguments` is a preview (their JSON text, cut); listing the approval by id has them whole. */
  argumentsCut: boolean;
}

/** What an `approve` callback may return instead of a boolean. */
export interface Answer {
  approve: boolean;
  reason?: string;
  /** Run the call with these arguments instead (every pre-tool hook sees them again). */
  arguments?: Record<string, unknown>;
  /** Give the same answer to this identity's later asks in the session. */
  rememberSession?: boolean;
}

export type Event =
  | { kind: "call_received"; index: number; id: string; name: string; arguments: JsonValue | undefined }
  | { kind: "tool_pre"; index: number; id: string; tool: string; attempt: number }
  | {
      kind: "tool_post"; index: number; id: string; tool: string; attempt: number; isError: boolean;
      errorClass: ErrorClass; duration: number; cached: boolean; resultPreview: string;
    }
  | {
      kind: "gate_decision"; index: number; id: string; tool: string; attempt: number;
      verdict: "ALLOW" | "BLOCK" | "ASK" | "MODIFY"; source: string; reason: string; argsDigest: string;
    }
  | { kind: "retry_scheduled"; index: number; id: string; tool: string; attempt: number; delay: number; reason: string }
  | {
      kind: "loop_detected"; index: number; id: string; tool: string; attempt: number;
      action: "WARN" | "STOP"; pattern: string; repeats: number;
    }
  | { kind: "breaker_changed"; tool: string; from: BreakerState; to: BreakerState; id: string }
  | { kind: "progress"; index: number; id: string; tool: string; attempt: number; progress: number; total: number; message: string }
  | { kind: "approval_requested"; approval: Approval }
  | {
      kind: "approval_resolved"; approvalId: string; sessionId: string; index: number; id: string; tool: string;
      /** DECISION_UNSPECIFIED when nobody answered (`how` EXPIRED or WITHDRAWN). */
      decision: "APPROVE" | "DENY" | "DECISION_UNSPECIFIED"; resolvedBy: string; reason: string;
      how: "ANSWERED" | "REMEMBERED" | "EXPIRED" | "WITHDRAWN"; argumentsUpdated: boolean;
      remember: "ONCE" | "SESSION"; source: string;
    }
  | { kind: "finished"; result: DispatchResult };

/** A tool toolgate serves (ListTools). */
export interface Tool {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
  source: "SOURCE_UNSPECIFIED" | "BUILTIN" | "EMBEDDED" | "WORKER" | "MCP" | "HTTP";
  status: "LOCAL" | "PINNED" | "QUARANTINED";
  readOnly: boolean;
  destructive: boolean;
  idempotent: boolean;
  openWorld: boolean;
  remote: string;
}
