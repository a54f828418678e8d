// `ToolGate`: one batch of the model's tool calls in, the tool messages to append out, on
// Connect's gRPC transport for Node (HTTP/2).

import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { type CallOptions, type Client, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import type * as http2 from "node:http2";

import * as convert from "./convert.js";
import { fromRpc, InputError, NotFound, InvalidRequest, ToolGateError } from "./errors.js";
import * as pb from "./gen/toolgate/v1/toolgate_pb.js";
import type { Answer, Approval, DispatchResult, Event, Format, Tool } from "./types.js";

/** The API the client speaks: the `toolgate.v1` package of proto/toolgate/v1/toolgate.proto. */
export const API_VERSION = "toolgate.v1";
/** The metadata key balancers route a session on (nginx `hash $http_x_toolgate_session`). */
export const SESSION_HEADER = "x-toolgate-session";
/** What toolgate accepts as a session id (proto/toolgate/v1/toolgate.proto). */
const SESSION_ID = /^[A-Za-z0-9._-]{1,128}$/;

export interface TlsOptions {
  /** PEM of a private CA to trust instead of the system roots. */
  ca?: string | Buffer;
  /** PEM client certificate chain and key (mTLS), set together. */
  cert?: string | Buffer;
  key?: string | Buffer;
  /** The name the server's certificate must carry, when it is not the address's host. */
  serverName?: string;
}

export interface ToolGateOptions {
  /** `host:port`; default `127.0.0.1:50051`. */
  address?: string;
  /** Sent as `authorization: Bearer <token>`. */
  token?: string;
  /** `true` for TLS against the system roots, or the CA and client certificate to use. */
  tls?: boolean | TlsOptions;
  /** The default deadline of each call, in milliseconds (none by default). */
  timeoutMs?: number;
}

export type Approve = (approval: Approval) => boolean | Answer | Promise<boolean | Answer>;

export interface DispatchOptions {
  /** The session the calls run in; sent in the request and as `x-toolgate-session` metadata. */
  sessionId?: string;
  /** The reply format; by default the one the input implies. */
  format?: Format;
  /** The request context tool input mappings read (`ctx.user.id`, ...). */
  context?: Record<string, unknown>;
  parallel?: boolean;
  failFast?: boolean;
  maxConcurrency?: number;
  /** Each call's timeout, in milliseconds. */
  callTimeoutMs?: number;
  maxCalls?: number;
  turn?: number;
  /** Answers the calls a hook or permission rule wants a person for (interactive approvals). */
  approve?: Approve;
  /** Without `approve`: `true` lets the caller answer `approval_requested` events itself. */
  interactiveApprovals?: boolean;
  /** This request's deadline, in milliseconds (default: the client's). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export class ToolGate {
  readonly #client: Client<typeof pb.ToolGate>;
  readonly #sessions: Http2SessionManager;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number | undefined;
  /**
   * The aliases of tools whose names a provider refuses, to the tools: sent as bindings. Made
   * anew from each ListTools answer: an alias kept from an older one could name a tool that has
   * appeared since (`x_y`), and would send the model's calls to it elsewhere (`x.y`).
   */
  #aliases = new Map<string, string>();

  constructor(options: ToolGateOptions = {}) {
    const address = options.address ?? "127.0.0.1:50051";
    const tls = options.tls === true ? {} : options.tls || undefined;
    if (tls && (tls.cert === undefined) !== (tls.key === undefined)) {
      throw new InputError("a client certificate needs both cert and key");
    }
    const baseUrl = `${tls ? "https" : "http"}://${address}`;
    const nodeOptions: http2.SecureClientSessionOptions = {};
    if (tls?.ca !== undefined) nodeOptions.ca = tls.ca;
    if (tls?.cert !== undefined) nodeOptions.cert = tls.cert;
    if (tls?.key !== undefined) nodeOptions.key = tls.key;
    if (tls?.serverName !== undefined) nodeOptions.servername = tls.serverName;
    this.#sessions = new Http2SessionManager(baseUrl, {}, nodeOptions);
    this.#client = createClient(pb.ToolGate, createGrpcTransport({ baseUrl, sessionManager: this.#sessions }));
    this.#headers = options.token ? { authorization: `Bearer ${options.token}` } : {};
    this.#timeoutMs = options.timeoutMs;
  }

  /**
   * Runs the tool calls in `response` (what the model returned; see README) and returns their
   * results, with `messages` in the same provider's format unless `format` says otherwise.
   */
  async dispatch(response: unknown, options: DispatchOptions = {}): Promise<DispatchResult> {
    let last: Event | undefined;
    for await (const event of this.stream(response, options)) last = event;
    if (last?.kind === "finished") return last.result;
    throw new ToolGateError("the stream ended without the batch's result");
  }

  /** Like `dispatch`, yielding the batch's events as they happen; the last is `finished`. */
  async *stream(response: unknown, options: DispatchOptions = {}): AsyncGenerator<Event, void, undefined> {
    if (options.sessionId && !SESSION_ID.test(options.sessionId)) {
      throw new InputError(`sessionId ${JSON.stringify(options.sessionId)} is invalid: use 1 to 128 ASCII letters, digits, '-', '_' or '.'`);
    }
    const { field, value, format: implied } = convert.readResponse(response);
    const format = options.format ?? implied;
    if (!(format in convert.FORMATS)) {
      throw new InputError(`unknown format ${JSON.stringify(format)}: one of ${Object.keys(convert.FORMATS).join(", ")}`);
    }
    const request = create(pb.DispatchBatchRequestSchema, {
      sessionId: options.sessionId ?? "",
      turn: options.turn ?? 0,
      options: {
        mode: options.parallel ? pb.DispatchOptions_Mode.PARALLEL : pb.DispatchOptions_Mode.SEQUENTIAL,
        onError: options.failFast ? pb.DispatchOptions_OnError.FAIL_FAST : pb.DispatchOptions_OnError.CONTINUE,
        messageFormat: convert.FORMATS[format],
        maxConcurrency: options.maxConcurrency ?? 0,
        maxCalls: options.maxCalls ?? 0,
        interactiveApprovals: options.interactiveApprovals ?? options.approve !== undefined,
        callTimeout: options.callTimeoutMs === undefined ? undefined : create(DurationSchema, {
          seconds: BigInt(Math.floor(options.callTimeoutMs / 1000)),
          nanos: Math.round((options.callTimeoutMs % 1000) * 1e6),
        }),
      },
    });
    if (field === "calls") request.calls = (value as unknown[]).map(convert.toValue);
    else request.assistantMessage = convert.toValue(value);
    for (const [alias, tool] of this.#aliases) request.bindings[alias] = create(pb.BindingSchema, { tool });
    if (options.context) request.context = convert.plain(options.context) as pb.DispatchBatchRequest["context"];
    const headers = { ...this.#headers };
    if (options.sessionId) headers[SESSION_HEADER] = options.sessionId;
    const abort = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, abort.signal]) : abort.signal;
    try {
      for await (const raw of this.#client.dispatchBatch(request, this.#call(options.timeoutMs, headers, signal))) {
        const event = convert.event(raw, format);
        if (event === undefined) continue;
        yield event;
        if (event.kind === "approval_requested" && options.approve) {
          await this.#answer(event.approval.approvalId, await options.approve(event.approval));
        }
      }
    } catch (error) {
      throw fromRpc(error);
    } finally {
      // A consumer that stops early (break, an exception) ends the batch on the server too.
      abort.abort();
    }
  }

  async #answer(approvalId: string, answer: boolean | Answer): Promise<void> {
    try {
      await this.resolveApproval(approvalId, answer);
    } catch (error) {
      // Answered meanwhile (by a person elsewhere, or expired): the stream says how.
      if (error instanceof NotFound || (error instanceof InvalidRequest && error.code === "FAILED_PRECONDITION")) return;
      throw error;
    }
  }

  /** Answers a pending approval (as the agent that asked, or an approver of its tenant). */
  async resolveApproval(approvalId: string, answer: boolean | Answer, options: { timeoutMs?: number } = {}): Promise<Approval> {
    const a: Answer = typeof answer === "boolean" ? { approve: answer } : answer;
    if (typeof a !== "object" || a === null || typeof a.approve !== "boolean") {
      throw new InputError("approve returned neither a boolean nor an Answer");
    }
    const request = create(pb.ResolveApprovalRequestSchema, {
      approvalId,
      decision: a.approve ? pb.ResolveApprovalRequest_Decision.APPROVE : pb.ResolveApprovalRequest_Decision.DENY,
      reason: a.reason ?? "",
      remember: a.rememberSession ? pb.ResolveApprovalRequest_Remember.SESSION : pb.ResolveApprovalRequest_Remember.ONCE,
    });
    if (a.arguments) request.updatedArguments = convert.plain(a.arguments) as pb.ResolveApprovalRequest["updatedArguments"];
    const reply = await this.#unary(() => this.#client.resolveApproval(request, this.#call(options.timeoutMs)));
    if (!reply.approval) throw new ToolGateError("ResolveApproval answered without the approval");
    return convert.approval(reply.approval);
  }

  /** Every tool toolgate serves, quarantined ones included (see `status`). */
  async listTools(options: { timeoutMs?: number } = {}): Promise<Tool[]> {
    const reply = await this.#unary(() => this.#client.listTools({}, this.#call(options.timeoutMs)));
    const tools = reply.tools.map(convert.tool);
    const aliases = new Map<string, string>();
    for (const [name, alias] of convert.modelNames(tools)) if (alias !== name) aliases.set(alias, name);
    this.#aliases = aliases;
    return tools;
  }

  /**
   * The tools as the provider's `tools` list (plain objects of its tool params), without
   * quarantined ones. A name a provider refuses (`py.get_weather`) is given as a portable alias
   * (`py_get_weather`); this client's batches bind the alias to the tool.
   */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  async tools(format: Format = "openai", options: { timeoutMs?: number } = {}): Promise<any[]> {
    return convert.toolDefinitions(await this.listTools(options), format);
  }

  /** The session's memory entries, oldest first. */
  async sessionMemory(sessionId: string, options: { timeoutMs?: number } = {}): Promise<string[]> {
    const reply = await this.#unary(() => this.#client.getSessionMemory(
      { sessionId }, this.#call(options.timeoutMs, { ...this.#headers, [SESSION_HEADER]: sessionId })));
    return reply.entries;
  }

  /** Ends a session (its loop window, memory, scratch files); false if there was none. */
  async endSession(sessionId: string, options: { timeoutMs?: number } = {}): Promise<boolean> {
    const reply = await this.#unary(() => this.#client.endSession(
      { sessionId }, this.#call(options.timeoutMs, { ...this.#headers, [SESSION_HEADER]: sessionId })));
    return reply.ended;
  }

  /** Closes the HTTP/2 connection (calls in flight fail). */
  close(): void {
    this.#sessions.abort();
  }

  [Symbol.dispose](): void {
    this.close();
  }

  #call(timeoutMs: number | undefined, headers: Record<string, string> = this.#headers, signal?: AbortSignal): CallOptions {
    const options: CallOptions = { headers };
    const timeout = timeoutMs ?? this.#timeoutMs;
    if (timeout !== undefined) options.timeoutMs = timeout;
    if (signal) options.signal = signal;
    return options;
  }

  async #unary<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      throw fromRpc(error);
    }
  }
}
