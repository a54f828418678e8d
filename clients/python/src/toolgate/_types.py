"""The typed values the client returns: a batch's result, its calls' results, its events."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Literal, Union

#: The chat formats toolgate answers in (``DispatchOptions.MessageFormat``).
Format = Literal["openai", "openai_responses", "anthropic", "gemini"]

#: Why a call failed (``toolgate.v1.ErrorClass``); ``"NONE"`` for a call that succeeded. Every
#: enum-valued field holds a value newer than this client as its number in text (``"99"``).
ErrorClass = Literal[
    "NONE", "INVALID_CALL", "INVALID_ARGUMENTS", "DUPLICATE_ID", "UNKNOWN_TOOL", "BLOCKED",
    "PERMISSION_DENIED", "CIRCUIT_OPEN", "TIMEOUT", "CANCELLED", "TOOL_ERROR", "PANIC",
    "TRANSPORT", "LOOP_STOPPED", "SKIPPED", "QUARANTINED", "APPROVAL_DENIED", "APPROVAL_TIMEOUT",
    "STORE_UNAVAILABLE", "OUTCOME_UNKNOWN",
]

#: How a batch ended (``BatchResult.Outcome``).
Outcome = Literal["COMPLETED", "FAILED_FAST", "CANCELLED", "LOOP_DETECTED", "RECOVERY_EXHAUSTED"]

BreakerState = Literal["CLOSED", "OPEN", "HALF_OPEN"]


@dataclass(frozen=True)
class Call:
    """A tool call in toolgate's normalized shape, for agents that build calls themselves."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CallResult:
    """One call's result, in the model's order, under the model's call id."""

    index: int
    id: str
    #: The name the model used.
    name: str
    #: The registered tool that ran (differs from ``name`` for a binding).
    tool: str
    success: bool
    arguments: Any
    #: The tool's structured result (None when it failed or returned none).
    result: Any
    #: What the model is shown: the result as text, or the error's text.
    content: str
    #: The error's text for a failed call ("" otherwise).
    error: str
    error_class: ErrorClass
    attempts: int
    #: Seconds the call took, retries included.
    duration: float
    cached: bool
    truncated: bool
    #: The result's content parts, for a tool that returned text and images:
    #: ``{"text": ...}`` or ``{"image": {"mime_type", "data" (base64)}}``.
    parts: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class DispatchResult:
    """A batch's result: the tool messages to append to the conversation, and each call's result."""

    #: The tool messages in the requested chat format: plain dicts that are the provider SDK's
    #: message params (typed ``Any`` so ``messages += out.messages`` type-checks against the
    #: SDK's own TypedDicts).
    messages: list[Any]
    results: list[CallResult]
    all_succeeded: bool
    #: How many calls failed.
    errors: int
    #: The session the batch ran in (the one given, or the ephemeral one toolgate made).
    session_id: str
    outcome: Outcome
    outcome_reason: str
    #: Seconds the batch took.
    duration: float
    #: The format ``messages`` are in.
    format: Format

    @property
    def failed(self) -> list[CallResult]:
        """The calls that failed, in order."""
        return [r for r in self.results if not r.success]

    def by_id(self, call_id: str) -> CallResult:
        """The result of the call the model named ``call_id``; KeyError if there is none."""
        for r in self.results:
            if r.id == call_id:
                return r
        raise KeyError(call_id)


@dataclass(frozen=True)
class Approval:
    """A call waiting for a person (with ``interactive_approvals``)."""

    approval_id: str
    session_id: str
    index: int
    id: str
    tool: str
    #: The call's arguments, redacted as the audit log shows them.
    arguments: Any
    reason: str
    #: Who asked: a hook's name or ``permissions[<rule id>]``.
    source: str
    expires_at: datetime.datetime | None
    requested_by: str
    #: Whether ``requested_by`` may answer it itself: only where the operator lets the asking
    #: rule's requester answer (``requester_may_answer``); otherwise an approver's credential does.
    requester_may_answer: bool = False
    #: Whether an answer may be remembered for the session (``Answer.remember_session``).
    remember_allowed: bool = True
    #: ``arguments`` is a preview (their JSON text, cut): a watch sends previews of large
    #: arguments; listing the approval by id has them whole.
    arguments_cut: bool = False


@dataclass(frozen=True)
class Answer:
    """What an ``approve`` callback may return instead of a bool."""

    approve: bool
    reason: str = ""
    #: Run the call with these arguments instead (every pre-tool hook sees them again).
    arguments: dict[str, Any] | None = None
    #: Give the same answer to this identity's later asks in the session.
    remember_session: bool = False


@dataclass(frozen=True)
class CallReceived:
    index: int
    id: str
    name: str
    arguments: Any
    kind: Literal["call_received"] = "call_received"


@dataclass(frozen=True)
class ToolPre:
    index: int
    id: str
    tool: str
    attempt: int
    kind: Literal["tool_pre"] = "tool_pre"


@dataclass(frozen=True)
class ToolPost:
    index: int
    id: str
    tool: str
    attempt: int
    is_error: bool
    error_class: ErrorClass
    duration: float
    cached: bool
    result_preview: str
    kind: Literal["tool_post"] = "tool_post"


@dataclass(frozen=True)
class GateDecision:
    index: int
    id: str
    tool: str
    attempt: int
    verdict: Literal["ALLOW", "BLOCK", "ASK", "MODIFY"]
    source: str
    reason: str
    args_digest: str
    kind: Literal["gate_decision"] = "gate_decision"


@dataclass(frozen=True)
class RetryScheduled:
    index: int
    id: str
    tool: str
    attempt: int
    #: Seconds until the retry.
    delay: float
    reason: str
    kind: Literal["retry_scheduled"] = "retry_scheduled"


@dataclass(frozen=True)
class LoopDetected:
    index: int
    id: str
    tool: str
    attempt: int
    action: Literal["WARN", "STOP"]
    pattern: str
    repeats: int
    kind: Literal["loop_detected"] = "loop_detected"


@dataclass(frozen=True)
class BreakerChanged:
    tool: str
    from_state: BreakerState
    to_state: BreakerState
    #: The call that moved it.
    id: str
    kind: Literal["breaker_changed"] = "breaker_changed"


@dataclass(frozen=True)
class Progress:
    index: int
    id: str
    tool: str
    attempt: int
    progress: float
    total: float
    message: str
    kind: Literal["progress"] = "progress"


@dataclass(frozen=True)
class ApprovalRequested:
    approval: Approval
    kind: Literal["approval_requested"] = "approval_requested"


@dataclass(frozen=True)
class ApprovalResolved:
    approval_id: str
    session_id: str
    index: int
    id: str
    tool: str
    #: DECISION_UNSPECIFIED when nobody answered (``how`` EXPIRED or WITHDRAWN).
    decision: Literal["APPROVE", "DENY", "DECISION_UNSPECIFIED"]
    resolved_by: str
    reason: str
    how: Literal["ANSWERED", "REMEMBERED", "EXPIRED", "WITHDRAWN"]
    arguments_updated: bool
    remember: Literal["ONCE", "SESSION"]
    source: str
    kind: Literal["approval_resolved"] = "approval_resolved"


@dataclass(frozen=True)
class Finished:
    """The stream's last event: the batch's result."""

    result: DispatchResult
    kind: Literal["finished"] = "finished"


#: One event of ``stream()``; ``kind`` tells them apart, ``Finished`` comes last.
Event = Union[
    CallReceived, ToolPre, ToolPost, GateDecision, RetryScheduled, LoopDetected, BreakerChanged,
    Progress, ApprovalRequested, ApprovalResolved, Finished,
]


@dataclass(frozen=True)
class Tool:
    """A tool toolgate serves (``ListTools``)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    source: Literal["SOURCE_UNSPECIFIED", "BUILTIN", "EMBEDDED", "WORKER", "MCP", "HTTP"]
    status: Literal["LOCAL", "PINNED", "QUARANTINED"]
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool
    remote: str
