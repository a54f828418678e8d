"""The client's exceptions: one per kind of gRPC status an agent handles differently."""

from __future__ import annotations

import grpc


class ToolgateError(Exception):
    """A call to toolgate failed. ``code`` is the gRPC status (None for a client-side error)."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message if code is None else f"{code.name}: {message}")
        self.code = code
        #: The server's message (the status details), or the client's own.
        self.details = message


class InputError(ToolgateError, ValueError):
    """What was passed to ``dispatch`` is not a model response, message or call list the client
    reads; nothing was sent."""


class InvalidRequest(ToolgateError):
    """The server refused the request as malformed (INVALID_ARGUMENT, FAILED_PRECONDITION,
    OUT_OF_RANGE): fix the request, do not retry it."""


class Unauthenticated(ToolgateError):
    """No credentials, or ones the server does not know (UNAUTHENTICATED)."""


class PermissionDenied(ToolgateError):
    """The identity may not do this (PERMISSION_DENIED)."""


class NotFound(ToolgateError):
    """The session, tool or approval does not exist for this identity (NOT_FOUND)."""


class ResourceExhausted(ToolgateError):
    """A limit was reached: too many calls, a batch too large, too many sessions or streams
    (RESOURCE_EXHAUSTED)."""


class Unavailable(ToolgateError):
    """The server, or the session store it needs, cannot be reached now (UNAVAILABLE): retrying
    later may work."""


class DeadlineExceeded(ToolgateError):
    """The request's deadline passed (DEADLINE_EXCEEDED)."""


class Cancelled(ToolgateError):
    """The request was cancelled (CANCELLED)."""


_BY_CODE: dict[grpc.StatusCode, type[ToolgateError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.FAILED_PRECONDITION: InvalidRequest,
    grpc.StatusCode.OUT_OF_RANGE: InvalidRequest,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
}


def from_rpc(error: grpc.RpcError) -> ToolgateError:
    """The exception for a failed RPC (sync or aio): its status and the server's message."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return _BY_CODE.get(code, ToolgateError)(details or "", code)
