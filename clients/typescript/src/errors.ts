// The client's errors: one class per kind of gRPC status an agent handles differently.

import { Code, ConnectError } from "@connectrpc/connect";

/** A call to toolgate failed. `code` is the gRPC status name (undefined for a client-side error). */
export class ToolGateError extends Error {
  readonly code: string | undefined;
  /** The server's message (the status details), or the client's own. */
  readonly details: string;
  constructor(details: string, code?: string) {
    super(code === undefined ? details : `${code}: ${details}`);
    this.name = new.target.name;
    this.code = code;
    this.details = details;
  }
}

/** What was passed to `dispatch` is not a model response, message or call list the client reads; nothing was sent. */
export class InputError extends ToolGateError {}
/** INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE: fix the request, do not retry it. */
export class InvalidRequest extends ToolGateError {}
/** UNAUTHENTICATED: no credentials, or ones the server does not know. */
export class Unauthenticated extends ToolGateError {}
/** PERMISSION_DENIED: the identity may not do this. */
export class PermissionDenied extends ToolGateError {}
/** NOT_FOUND: the session, tool or approval does not exist for this identity. */
export class NotFound extends ToolGateError {}
/** RESOURCE_EXHAUSTED: a limit was reached (batches at once, calls, sessions). */
export class ResourceExhausted extends ToolGateError {}
/** UNAVAILABLE: the server, or its session store, cannot be reached now; retrying later may work. */
export class Unavailable extends ToolGateError {}
/** DEADLINE_EXCEEDED: the request's deadline passed. */
export class DeadlineExceeded extends ToolGateError {}
/** CANCELLED: the request was cancelled. */
export class Cancelled extends ToolGateError {}

const BY_CODE: Partial<Record<Code, new (details: string, code?: string) => ToolGateError>> = {
  [Code.InvalidArgument]: InvalidRequest,
  [Code.FailedPrecondition]: InvalidRequest,
  [Code.OutOfRange]: InvalidRequest,
  [Code.Unauthenticated]: Unauthenticated,
  [Code.PermissionDenied]: PermissionDenied,
  [Code.NotFound]: NotFound,
  [Code.ResourceExhausted]: ResourceExhausted,
  [Code.Unavailable]: Unavailable,
  [Code.DeadlineExceeded]: DeadlineExceeded,
  [Code.Canceled]: Cancelled,
};

const NAMES: Record<number, string> = {
  [Code.Canceled]: "CANCELLED", [Code.Unknown]: "UNKNOWN", [Code.InvalidArgument]: "INVALID_ARGUMENT",
  [Code.DeadlineExceeded]: "DEADLINE_EXCEEDED", [Code.NotFound]: "NOT_FOUND",
  [Code.AlreadyExists]: "ALREADY_EXISTS", [Code.PermissionDenied]: "PERMISSION_DENIED",
  [Code.ResourceExhausted]: "RESOURCE_EXHAUSTED", [Code.FailedPrecondition]: "FAILED_PRECONDITION",
  [Code.Aborted]: "ABORTED", [Code.OutOfRange]: "OUT_OF_RANGE", [Code.Unimplemented]: "UNIMPLEMENTED",
  [Code.Internal]: "INTERNAL", [Code.Unavailable]: "UNAVAILABLE", [Code.DataLoss]: "DATA_LOSS",
  [Code.Unauthenticated]: "UNAUTHENTICATED",
};

/** The error for a failed RPC: its status and the server's message. Other errors pass through. */
export function fromRpc(error: unknown): unknown {
  // The client's own errors, and what an `approve` callback threw, pass through as they are.
  if (!(error instanceof ConnectError)) return error;
  const connect = error;
  // A connection that failed its TLS handshake (Node reports the certificate's problem as an
  // internal error) is UNAVAILABLE, as gRPC's own clients say.
  if (connect.code === Code.Internal && isTlsFailure(connect.cause)) {
    return new Unavailable(`TLS: ${connect.rawMessage}`, "UNAVAILABLE");
  }
  const Class = BY_CODE[connect.code] ?? ToolGateError;
  return new Class(connect.rawMessage, NAMES[connect.code] ?? "UNKNOWN");
}

const TLS_CODES = /^(ERR_TLS_|ERR_SSL_|UNABLE_TO_|CERT_|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|HOSTNAME_MISMATCH)/;

function isTlsFailure(cause: unknown): boolean {
  for (let c = cause, depth = 0; c instanceof Error && depth < 5; c = c.cause, depth++) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === "string" && TLS_CODES.test(code)) return true;
  }
  return false;
}
