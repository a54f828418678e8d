// toolgate's client: hand it the model's response, get back the tool messages to append.
//
//   import { ToolGate } from "@toolgate/client";
//   const tg = new ToolGate({ address: "127.0.0.1:50051" });
//   const out = await tg.dispatch(completion, { sessionId: "s1" });
//   messages.push(...out.messages);

export { API_VERSION, SESSION_HEADER, ToolGate } from "./client.js";
export type { Approve, DispatchOptions, TlsOptions, ToolGateOptions } from "./client.js";
export {
  Cancelled, DeadlineExceeded, InputError, InvalidRequest, NotFound, PermissionDenied, ResourceExhausted,
  ToolGateError, Unauthenticated, Unavailable,
} from "./errors.js";
export type {
  Answer, Approval, BreakerState, Call, CallResult, DispatchResult, ErrorClass, Event, Format, JsonValue,
  Outcome, Tool,
} from "./types.js";
export { toolDefinitions } from "./convert.js";
