import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[ErrorClass]
    INVALID_CALL: _ClassVar[ErrorClass]
    INVALID_ARGUMENTS: _ClassVar[ErrorClass]
    DUPLICATE_ID: _ClassVar[ErrorClass]
    UNKNOWN_TOOL: _ClassVar[ErrorClass]
    BLOCKED: _ClassVar[ErrorClass]
    PERMISSION_DENIED: _ClassVar[ErrorClass]
    CIRCUIT_OPEN: _ClassVar[ErrorClass]
    TIMEOUT: _ClassVar[ErrorClass]
    CANCELLED: _ClassVar[ErrorClass]
    TOOL_ERROR: _ClassVar[ErrorClass]
    PANIC: _ClassVar[ErrorClass]
    TRANSPORT: _ClassVar[ErrorClass]
    LOOP_STOPPED: _ClassVar[ErrorClass]
    SKIPPED: _ClassVar[ErrorClass]
    QUARANTINED: _ClassVar[ErrorClass]
    APPROVAL_DENIED: _ClassVar[ErrorClass]
    APPROVAL_TIMEOUT: _ClassVar[ErrorClass]
    STORE_UNAVAILABLE: _ClassVar[ErrorClass]
    OUTCOME_UNKNOWN: _ClassVar[ErrorClass]

class BreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLOSED: _ClassVar[BreakerState]
    OPEN: _ClassVar[BreakerState]
    HALF_OPEN: _ClassVar[BreakerState]
NONE: ErrorClass
INVALID_CALL: ErrorClass
INVALID_ARGUMENTS: ErrorClass
DUPLICATE_ID: ErrorClass
UNKNOWN_TOOL: ErrorClass
BLOCKED: ErrorClass
PERMISSION_DENIED: ErrorClass
CIRCUIT_OPEN: ErrorClass
TIMEOUT: ErrorClass
CANCELLED: ErrorClass
TOOL_ERROR: ErrorClass
PANIC: ErrorClass
TRANSPORT: ErrorClass
LOOP_STOPPED: ErrorClass
SKIPPED: ErrorClass
QUARANTINED: ErrorClass
APPROVAL_DENIED: ErrorClass
APPROVAL_TIMEOUT: ErrorClass
STORE_UNAVAILABLE: ErrorClass
OUTCOME_UNKNOWN: ErrorClass
CLOSED: BreakerState
OPEN: BreakerState
HALF_OPEN: BreakerState

class DispatchBatchRequest(_message.Message):
    __slots__ = ("session_id", "calls", "assistant_message", "context", "options", "turn", "bindings")
    class BindingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Binding
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Binding, _Mapping]] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    calls: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    assistant_message: _struct_pb2.Value
    context: _struct_pb2.Struct
    options: DispatchOptions
    turn: int
    bindings: _containers.MessageMap[str, Binding]
    def __init__(self, session_id: _Optional[str] = ..., calls: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., assistant_message: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., context: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., options: _Optional[_Union[DispatchOptions, _Mapping]] = ..., turn: _Optional[int] = ..., bindings: _Optional[_Mapping[str, Binding]] = ...) -> None: ...

class Binding(_message.Message):
    __slots__ = ("tool", "input")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    tool: str
    input: _struct_pb2.Struct
    def __init__(self, tool: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class DispatchOptions(_message.Message):
    __slots__ = ("mode", "max_concurrency", "on_error", "message_format", "max_calls", "call_timeout", "interactive_approvals")
    class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SEQUENTIAL: _ClassVar[DispatchOptions.Mode]
        PARALLEL: _ClassVar[DispatchOptions.Mode]
    SEQUENTIAL: DispatchOptions.Mode
    PARALLEL: DispatchOptions.Mode
    class OnError(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CONTINUE: _ClassVar[DispatchOptions.OnError]
        FAIL_FAST: _ClassVar[DispatchOptions.OnError]
    CONTINUE: DispatchOptions.OnError
    FAIL_FAST: DispatchOptions.OnError
    class MessageFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OPENAI_CHAT: _ClassVar[DispatchOptions.MessageFormat]
        ANTHROPIC: _ClassVar[DispatchOptions.MessageFormat]
        OPENAI_RESPONSES: _ClassVar[DispatchOptions.MessageFormat]
        GEMINI: _ClassVar[DispatchOptions.MessageFormat]
    OPENAI_CHAT: DispatchOptions.MessageFormat
    ANTHROPIC: DispatchOptions.MessageFormat
    OPENAI_RESPONSES: DispatchOptions.MessageFormat
    GEMINI: DispatchOptions.MessageFormat
    MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    ON_ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    MAX_CALLS_FIELD_NUMBER: _ClassVar[int]
    CALL_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_APPROVALS_FIELD_NUMBER: _ClassVar[int]
    mode: DispatchOptions.Mode
    max_concurrency: int
    on_error: DispatchOptions.OnError
    message_format: DispatchOptions.MessageFormat
    max_calls: int
    call_timeout: _duration_pb2.Duration
    interactive_approvals: bool
    def __init__(self, mode: _Optional[_Union[DispatchOptions.Mode, str]] = ..., max_concurrency: _Optional[int] = ..., on_error: _Optional[_Union[DispatchOptions.OnError, str]] = ..., message_format: _Optional[_Union[DispatchOptions.MessageFormat, str]] = ..., max_calls: _Optional[int] = ..., call_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., interactive_approvals: _Optional[bool] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("text", "image")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: Image
    def __init__(self, text: _Optional[str] = ..., image: _Optional[_Union[Image, _Mapping]] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("mime_type", "data")
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    mime_type: str
    data: str
    def __init__(self, mime_type: _Optional[str] = ..., data: _Optional[str] = ...) -> None: ...

class CallResult(_message.Message):
    __slots__ = ("index", "id", "name", "tool", "success", "arguments", "result", "content", "error", "error_class", "attempts", "duration", "cached", "truncated", "parts")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    tool: str
    success: bool
    arguments: _struct_pb2.Value
    result: _struct_pb2.Value
    content: str
    error: str
    error_class: ErrorClass
    attempts: int
    duration: _duration_pb2.Duration
    cached: bool
    truncated: bool
    parts: _containers.RepeatedCompositeFieldContainer[ContentPart]
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., tool: _Optional[str] = ..., success: _Optional[bool] = ..., arguments: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., result: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., content: _Optional[str] = ..., error: _Optional[str] = ..., error_class: _Optional[_Union[ErrorClass, str]] = ..., attempts: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cached: _Optional[bool] = ..., truncated: _Optional[bool] = ..., parts: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ...) -> None: ...

class BatchResult(_message.Message):
    __slots__ = ("results", "count", "errors", "all_succeeded", "messages", "by_id", "outcome", "outcome_reason", "duration", "session_id")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        COMPLETED: _ClassVar[BatchResult.Outcome]
        FAILED_FAST: _ClassVar[BatchResult.Outcome]
        CANCELLED: _ClassVar[BatchResult.Outcome]
        LOOP_DETECTED: _ClassVar[BatchResult.Outcome]
        RECOVERY_EXHAUSTED: _ClassVar[BatchResult.Outcome]
    COMPLETED: BatchResult.Outcome
    FAILED_FAST: BatchResult.Outcome
    CANCELLED: BatchResult.Outcome
    LOOP_DETECTED: BatchResult.Outcome
    RECOVERY_EXHAUSTED: BatchResult.Outcome
    class ByIdEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: CallResult
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[CallResult, _Mapping]] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    ALL_SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BY_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_REASON_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CallResult]
    count: int
    errors: int
    all_succeeded: bool
    messages: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Struct]
    by_id: _containers.MessageMap[str, CallResult]
    outcome: BatchResult.Outcome
    outcome_reason: str
    duration: _duration_pb2.Duration
    session_id: str
    def __init__(self, results: _Optional[_Iterable[_Union[CallResult, _Mapping]]] = ..., count: _Optional[int] = ..., errors: _Optional[int] = ..., all_succeeded: _Optional[bool] = ..., messages: _Optional[_Iterable[_Union[_struct_pb2.Struct, _Mapping]]] = ..., by_id: _Optional[_Mapping[str, CallResult]] = ..., outcome: _Optional[_Union[BatchResult.Outcome, str]] = ..., outcome_reason: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., session_id: _Optional[str] = ...) -> None: ...

class DispatchEvent(_message.Message):
    __slots__ = ("call_received", "tool_pre", "tool_post", "gate_decision", "retry_scheduled", "loop_detected", "breaker_changed", "progress", "approval_requested", "approval_resolved", "result")
    CALL_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    TOOL_PRE_FIELD_NUMBER: _ClassVar[int]
    TOOL_POST_FIELD_NUMBER: _ClassVar[int]
    GATE_DECISION_FIELD_NUMBER: _ClassVar[int]
    RETRY_SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    LOOP_DETECTED_FIELD_NUMBER: _ClassVar[int]
    BREAKER_CHANGED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_RESOLVED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    call_received: CallReceived
    tool_pre: ToolPre
    tool_post: ToolPost
    gate_decision: GateDecision
    retry_scheduled: RetryScheduled
    loop_detected: LoopDetected
    breaker_changed: BreakerChanged
    progress: Progress
    approval_requested: Approval
    approval_resolved: ApprovalResolved
    result: BatchResult
    def __init__(self, call_received: _Optional[_Union[CallReceived, _Mapping]] = ..., tool_pre: _Optional[_Union[ToolPre, _Mapping]] = ..., tool_post: _Optional[_Union[ToolPost, _Mapping]] = ..., gate_decision: _Optional[_Union[GateDecision, _Mapping]] = ..., retry_scheduled: _Optional[_Union[RetryScheduled, _Mapping]] = ..., loop_detected: _Optional[_Union[LoopDetected, _Mapping]] = ..., breaker_changed: _Optional[_Union[BreakerChanged, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., approval_requested: _Optional[_Union[Approval, _Mapping]] = ..., approval_resolved: _Optional[_Union[ApprovalResolved, _Mapping]] = ..., result: _Optional[_Union[BatchResult, _Mapping]] = ...) -> None: ...

class CallReceived(_message.Message):
    __slots__ = ("index", "id", "name", "arguments")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    arguments: _struct_pb2.Value
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ToolPre(_message.Message):
    __slots__ = ("id", "attempt", "tool", "index")
    ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    attempt: int
    tool: str
    index: int
    def __init__(self, id: _Optional[str] = ..., attempt: _Optional[int] = ..., tool: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class ToolPost(_message.Message):
    __slots__ = ("id", "attempt", "tool", "is_error", "error_class", "duration", "cached", "index", "result_preview")
    ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RESULT_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    id: str
    attempt: int
    tool: str
    is_error: bool
    error_class: ErrorClass
    duration: _duration_pb2.Duration
    cached: bool
    index: int
    result_preview: str
    def __init__(self, id: _Optional[str] = ..., attempt: _Optional[int] = ..., tool: _Optional[str] = ..., is_error: _Optional[bool] = ..., error_class: _Optional[_Union[ErrorClass, str]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cached: _Optional[bool] = ..., index: _Optional[int] = ..., result_preview: _Optional[str] = ...) -> None: ...

class GateDecision(_message.Message):
    __slots__ = ("id", "attempt", "tool", "verdict", "source", "reason", "args_digest", "index")
    class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ALLOW: _ClassVar[GateDecision.Verdict]
        BLOCK: _ClassVar[GateDecision.Verdict]
        ASK: _ClassVar[GateDecision.Verdict]
        MODIFY: _ClassVar[GateDecision.Verdict]
    ALLOW: GateDecision.Verdict
    BLOCK: GateDecision.Verdict
    ASK: GateDecision.Verdict
    MODIFY: GateDecision.Verdict
    ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ARGS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    attempt: int
    tool: str
    verdict: GateDecision.Verdict
    source: str
    reason: str
    args_digest: str
    index: int
    def __init__(self, id: _Optional[str] = ..., attempt: _Optional[int] = ..., tool: _Optional[str] = ..., verdict: _Optional[_Union[GateDecision.Verdict, str]] = ..., source: _Optional[str] = ..., reason: _Optional[str] = ..., args_digest: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class RetryScheduled(_message.Message):
    __slots__ = ("id", "attempt", "delay", "reason", "tool", "index")
    ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    attempt: int
    delay: _duration_pb2.Duration
    reason: str
    tool: str
    index: int
    def __init__(self, id: _Optional[str] = ..., attempt: _Optional[int] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ..., tool: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class LoopDetected(_message.Message):
    __slots__ = ("id", "attempt", "tool", "action", "pattern", "repeats", "index")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        WARN: _ClassVar[LoopDetected.Action]
        STOP: _ClassVar[LoopDetected.Action]
    WARN: LoopDetected.Action
    STOP: LoopDetected.Action
    ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    REPEATS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    attempt: int
    tool: str
    action: LoopDetected.Action
    pattern: str
    repeats: int
    index: int
    def __init__(self, id: _Optional[str] = ..., attempt: _Optional[int] = ..., tool: _Optional[str] = ..., action: _Optional[_Union[LoopDetected.Action, str]] = ..., pattern: _Optional[str] = ..., repeats: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("id", "attempt", "tool", "progress", "total", "message", "index")
    ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    attempt: int
    tool: str
    progress: float
    total: float
    message: str
    index: int
    def __init__(self, id: _Optional[str] = ..., attempt: _Optional[int] = ..., tool: _Optional[str] = ..., progress: _Optional[float] = ..., total: _Optional[float] = ..., message: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class BreakerChanged(_message.Message):
    __slots__ = ("tool", "to", "id")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    tool: str
    to: BreakerState
    id: str
    def __init__(self, tool: _Optional[str] = ..., to: _Optional[_Union[BreakerState, str]] = ..., id: _Optional[str] = ..., **kwargs) -> None: ...

class GetToolHealthRequest(_message.Message):
    __slots__ = ("tool",)
    TOOL_FIELD_NUMBER: _ClassVar[int]
    tool: str
    def __init__(self, tool: _Optional[str] = ...) -> None: ...

class ToolHealth(_message.Message):
    __slots__ = ("tool", "calls", "successes", "failures", "mean_duration", "max_duration", "ewma_success", "score", "status", "breaker", "consecutive_failures")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        HEALTHY: _ClassVar[ToolHealth.Status]
        DEGRADED: _ClassVar[ToolHealth.Status]
        UNHEALTHY: _ClassVar[ToolHealth.Status]
    HEALTHY: ToolHealth.Status
    DEGRADED: ToolHealth.Status
    UNHEALTHY: ToolHealth.Status
    TOOL_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    SUCCESSES_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    MEAN_DURATION_FIELD_NUMBER: _ClassVar[int]
    MAX_DURATION_FIELD_NUMBER: _ClassVar[int]
    EWMA_SUCCESS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    tool: str
    calls: int
    successes: int
    failures: int
    mean_duration: _duration_pb2.Duration
    max_duration: _duration_pb2.Duration
    ewma_success: float
    score: float
    status: ToolHealth.Status
    breaker: BreakerState
    consecutive_failures: int
    def __init__(self, tool: _Optional[str] = ..., calls: _Optional[int] = ..., successes: _Optional[int] = ..., failures: _Optional[int] = ..., mean_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., ewma_success: _Optional[float] = ..., score: _Optional[float] = ..., status: _Optional[_Union[ToolHealth.Status, str]] = ..., breaker: _Optional[_Union[BreakerState, str]] = ..., consecutive_failures: _Optional[int] = ...) -> None: ...

class GetToolHealthResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolHealth]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolHealth, _Mapping]]] = ...) -> None: ...

class GetSessionMemoryRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionMemoryResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, entries: _Optional[_Iterable[str]] = ...) -> None: ...

class EndSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class EndSessionResponse(_message.Message):
    __slots__ = ("ended",)
    ENDED_FIELD_NUMBER: _ClassVar[int]
    ended: bool
    def __init__(self, ended: _Optional[bool] = ...) -> None: ...

class RegisterRemoteRequest(_message.Message):
    __slots__ = ("definition",)
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    definition: _struct_pb2.Struct
    def __init__(self, definition: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RegisterRemoteResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ...) -> None: ...

class RefreshRemoteRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class AcceptToolChangeRequest(_message.Message):
    __slots__ = ("tool", "digest")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    tool: str
    digest: str
    def __init__(self, tool: _Optional[str] = ..., digest: _Optional[str] = ...) -> None: ...

class UnregisterRemoteRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UnregisterRemoteResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tools: _Optional[_Iterable[str]] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ...) -> None: ...

class ToolAnnotations(_message.Message):
    __slots__ = ("read_only", "destructive", "idempotent", "open_world")
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    DESTRUCTIVE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    OPEN_WORLD_FIELD_NUMBER: _ClassVar[int]
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool
    def __init__(self, read_only: _Optional[bool] = ..., destructive: _Optional[bool] = ..., idempotent: _Optional[bool] = ..., open_world: _Optional[bool] = ...) -> None: ...

class ToolDefinition(_message.Message):
    __slots__ = ("name", "description", "input_schema", "annotations", "concurrency_safe", "source", "status", "digest", "changed_digest", "remote", "change")
    class Source(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SOURCE_UNSPECIFIED: _ClassVar[ToolDefinition.Source]
        BUILTIN: _ClassVar[ToolDefinition.Source]
        EMBEDDED: _ClassVar[ToolDefinition.Source]
        WORKER: _ClassVar[ToolDefinition.Source]
        MCP: _ClassVar[ToolDefinition.Source]
        HTTP: _ClassVar[ToolDefinition.Source]
    SOURCE_UNSPECIFIED: ToolDefinition.Source
    BUILTIN: ToolDefinition.Source
    EMBEDDED: ToolDefinition.Source
    WORKER: ToolDefinition.Source
    MCP: ToolDefinition.Source
    HTTP: ToolDefinition.Source
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        LOCAL: _ClassVar[ToolDefinition.Status]
        PINNED: _ClassVar[ToolDefinition.Status]
        QUARANTINED: _ClassVar[ToolDefinition.Status]
    LOCAL: ToolDefinition.Status
    PINNED: ToolDefinition.Status
    QUARANTINED: ToolDefinition.Status
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_SAFE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    CHANGED_DIGEST_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    input_schema: _struct_pb2.Struct
    annotations: ToolAnnotations
    concurrency_safe: bool
    source: ToolDefinition.Source
    status: ToolDefinition.Status
    digest: str
    changed_digest: str
    remote: str
    change: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., annotations: _Optional[_Union[ToolAnnotations, _Mapping]] = ..., concurrency_safe: _Optional[bool] = ..., source: _Optional[_Union[ToolDefinition.Source, str]] = ..., status: _Optional[_Union[ToolDefinition.Status, str]] = ..., digest: _Optional[str] = ..., changed_digest: _Optional[str] = ..., remote: _Optional[str] = ..., change: _Optional[str] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ("approval_id", "session_id", "index", "id", "tool", "arguments", "reason", "source", "expires_at", "requested_by", "requester_may_answer", "remember_allowed", "arguments_cut")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    REQUESTER_MAY_ANSWER_FIELD_NUMBER: _ClassVar[int]
    REMEMBER_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_CUT_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    session_id: str
    index: int
    id: str
    tool: str
    arguments: _struct_pb2.Value
    reason: str
    source: str
    expires_at: _timestamp_pb2.Timestamp
    requested_by: str
    requester_may_answer: bool
    remember_allowed: bool
    arguments_cut: bool
    def __init__(self, approval_id: _Optional[str] = ..., session_id: _Optional[str] = ..., index: _Optional[int] = ..., id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., reason: _Optional[str] = ..., source: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., requested_by: _Optional[str] = ..., requester_may_answer: _Optional[bool] = ..., remember_allowed: _Optional[bool] = ..., arguments_cut: _Optional[bool] = ...) -> None: ...

class ApprovalResolved(_message.Message):
    __slots__ = ("approval_id", "index", "id", "tool", "decision", "resolved_by", "reason", "how", "arguments_updated", "remember", "source", "session_id")
    class How(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ANSWERED: _ClassVar[ApprovalResolved.How]
        REMEMBERED: _ClassVar[ApprovalResolved.How]
        EXPIRED: _ClassVar[ApprovalResolved.How]
        WITHDRAWN: _ClassVar[ApprovalResolved.How]
    ANSWERED: ApprovalResolved.How
    REMEMBERED: ApprovalResolved.How
    EXPIRED: ApprovalResolved.How
    WITHDRAWN: ApprovalResolved.How
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    HOW_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_UPDATED_FIELD_NUMBER: _ClassVar[int]
    REMEMBER_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    index: int
    id: str
    tool: str
    decision: ResolveApprovalRequest.Decision
    resolved_by: str
    reason: str
    how: ApprovalResolved.How
    arguments_updated: bool
    remember: ResolveApprovalRequest.Remember
    source: str
    session_id: str
    def __init__(self, approval_id: _Optional[str] = ..., index: _Optional[int] = ..., id: _Optional[str] = ..., tool: _Optional[str] = ..., decision: _Optional[_Union[ResolveApprovalRequest.Decision, str]] = ..., resolved_by: _Optional[str] = ..., reason: _Optional[str] = ..., how: _Optional[_Union[ApprovalResolved.How, str]] = ..., arguments_updated: _Optional[bool] = ..., remember: _Optional[_Union[ResolveApprovalRequest.Remember, str]] = ..., source: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class ResolveApprovalRequest(_message.Message):
    __slots__ = ("approval_id", "decision", "reason", "updated_arguments", "remember")
    class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DECISION_UNSPECIFIED: _ClassVar[ResolveApprovalRequest.Decision]
        APPROVE: _ClassVar[ResolveApprovalRequest.Decision]
        DENY: _ClassVar[ResolveApprovalRequest.Decision]
    DECISION_UNSPECIFIED: ResolveApprovalRequest.Decision
    APPROVE: ResolveApprovalRequest.Decision
    DENY: ResolveApprovalRequest.Decision
    class Remember(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ONCE: _ClassVar[ResolveApprovalRequest.Remember]
        SESSION: _ClassVar[ResolveApprovalRequest.Remember]
    ONCE: ResolveApprovalRequest.Remember
    SESSION: ResolveApprovalRequest.Remember
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    UPDATED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    REMEMBER_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    decision: ResolveApprovalRequest.Decision
    reason: str
    updated_arguments: _struct_pb2.Struct
    remember: ResolveApprovalRequest.Remember
    def __init__(self, approval_id: _Optional[str] = ..., decision: _Optional[_Union[ResolveApprovalRequest.Decision, str]] = ..., reason: _Optional[str] = ..., updated_arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., remember: _Optional[_Union[ResolveApprovalRequest.Remember, str]] = ...) -> None: ...

class ResolveApprovalResponse(_message.Message):
    __slots__ = ("approval",)
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    approval: Approval
    def __init__(self, approval: _Optional[_Union[Approval, _Mapping]] = ...) -> None: ...

class ListApprovalsRequest(_message.Message):
    __slots__ = ("session_id", "approval_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    approval_id: str
    def __init__(self, session_id: _Optional[str] = ..., approval_id: _Optional[str] = ...) -> None: ...

class ListApprovalsResponse(_message.Message):
    __slots__ = ("approvals",)
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    approvals: _containers.RepeatedCompositeFieldContainer[Approval]
    def __init__(self, approvals: _Optional[_Iterable[_Union[Approval, _Mapping]]] = ...) -> None: ...

class WatchApprovalsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class WatchApprovalsResponse(_message.Message):
    __slots__ = ("requested", "resolved")
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_FIELD_NUMBER: _ClassVar[int]
    requested: Approval
    resolved: ApprovalResolved
    def __init__(self, requested: _Optional[_Union[Approval, _Mapping]] = ..., resolved: _Optional[_Union[ApprovalResolved, _Mapping]] = ...) -> None: ...
