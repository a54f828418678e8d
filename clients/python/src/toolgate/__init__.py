"""toolgate's client: hand it the model's response, get back the tool messages to append.

    from toolgate import Client
    tg = Client("127.0.0.1:50051")
    out = tg.dispatch(response, session_id="s1")
    messages += out.messages
"""

from ._client import API_VERSION, SESSION_HEADER, AsyncClient, AsyncEvents, Client, Events
from ._errors import (
    Cancelled,
    DeadlineExceeded,
    InputError,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    ToolgateError,
    Unauthenticated,
    Unavailable,
)
from ._types import (
    Answer,
    Approval,
    ApprovalRequested,
    ApprovalResolved,
    BreakerChanged,
    Call,
    CallReceived,
    CallResult,
    DispatchResult,
    ErrorClass,
    Event,
    Finished,
    Format,
    GateDecision,
    LoopDetected,
    Outcome,
    Progress,
    RetryScheduled,
    Tool,
    ToolPost,
    ToolPre,
)

__version__ = "0.1.0"

__all__ = [
    "API_VERSION", "SESSION_HEADER", "AsyncClient", "AsyncEvents", "Client", "Events", "Cancelled", "DeadlineExceeded",
    "InputError", "InvalidRequest", "NotFound", "PermissionDenied", "ResourceExhausted",
    "ToolgateError", "Unauthenticated", "Unavailable", "Answer", "Approval", "ApprovalRequested",
    "ApprovalResolved", "BreakerChanged", "Call", "CallReceived", "CallResult", "DispatchResult",
    "ErrorClass", "Event", "Finished", "Format", "GateDecision", "LoopDetected", "Outcome",
    "Progress", "RetryScheduled", "Tool", "ToolPost", "ToolPre", "__version__",
]
