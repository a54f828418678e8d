"""``Client`` (blocking, grpcio) and ``AsyncClient`` (grpc.aio): one batch of the model's tool
calls in, the tool messages to append out."""

from __future__ import annotations

import inspect
import re
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Union

import grpc
import grpc.aio
from google.protobuf import duration_pb2

from . import _convert as convert
from ._errors import InputError, ToolgateError, from_rpc
from ._proto import toolgate_pb2 as pb
from ._types import (
    Answer,
    Approval,
    ApprovalRequested,
    DispatchResult,
    Event,
    Finished,
    Format,
    Tool,
)

#: The API the client speaks: the ``toolgate.v1`` package of proto/toolgate/v1/toolgate.proto.
API_VERSION = "toolgate.v1"

_SERVICE = "/toolgate.v1.ToolGate/"
#: The metadata key balancers route a session on (nginx ``hash $http_x_toolgate_session``).
SESSION_HEADER = "x-toolgate-session"

#: What toolgate accepts as a session id (proto/toolgate/v1/toolgate.proto).
_SESSION_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")

Approve = Callable[[Approval], Union[bool, Answer]]
AsyncApprove = Callable[[Approval], Union[bool, Answer, Awaitable[Union[bool, Answer]]]]
Metadata = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Prepared:
    request: pb.DispatchBatchRequest
    format: Format
    metadata: Metadata


def _options(
    fmt: Format, parallel: bool, fail_fast: bool, max_concurrency: int,
    call_timeout: float | None, max_calls: int, interactive: bool,
) -> pb.DispatchOptions:
    options = pb.DispatchOptions(
        mode=pb.DispatchOptions.PARALLEL if parallel else pb.DispatchOptions.SEQUENTIAL,
        on_error=pb.DispatchOptions.FAIL_FAST if fail_fast else pb.DispatchOptions.CONTINUE,
        message_format=convert.FORMATS[fmt],  # type: ignore[arg-type]
        max_concurrency=max_concurrency, max_calls=max_calls,
        interactive_approvals=interactive,
    )
    if call_timeout is not None:
        d = duration_pb2.Duration()
        d.FromNanoseconds(int(call_timeout * 1e9))
        options.call_timeout.CopyFrom(d)
    return options


class _Base:
    """What both clients share: the channel's credentials, the request, the answers."""

    def __init__(self, token: str | None, timeout: float | None) -> None:
        self._metadata: Metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        # The aliases of tools whose names a provider refuses, to the tools: sent as bindings
        # with each batch, so a call to an alias runs its tool. Made anew from each ListTools
        # answer: an alias kept from an older one could name a tool that has appeared since
        # (`x_y`), and would send the model's calls to it elsewhere (`x.y`).
        self._aliases: dict[str, str] = {}

    def _learn(self, reply: Any) -> list[Tool]:
        tools = [convert.tool(t) for t in reply.tools]
        names = convert.model_names(tools)
        self._aliases = {alias: name for name, alias in names.items() if alias != name}
        return tools

    def _prepare(
        self, response: Any, session_id: str | None, format: Format | None,
        context: Mapping[str, Any] | None, parallel: bool, fail_fast: bool,
        max_concurrency: int, call_timeout: float | None, max_calls: int, turn: int,
        interactive: bool,
    ) -> _Prepared:
        if session_id is not None and session_id != "" and not _SESSION_ID.fullmatch(session_id):
            raise InputError(
                f"session_id {session_id!r} is invalid: use 1 to 128 ASCII letters, digits, "
                "'-', '_' or '.'")
        field, value, implied = convert.read_response(response)
        fmt = format or implied
        if fmt not in convert.FORMATS:
            raise InputError(f"unknown format {fmt!r}: one of {', '.join(convert.FORMATS)}")
        request = pb.DispatchBatchRequest(
            session_id=session_id or "", turn=turn,
            options=_options(fmt, parallel, fail_fast, max_concurrency, call_timeout,
                             max_calls, interactive),
        )
        if field == "calls":
            request.calls.extend(convert.to_value(c) for c in value)
        else:
            request.assistant_message.CopyFrom(convert.to_value(value))
        if context:
            request.context.CopyFrom(convert.to_struct(context))
        for alias, tool in self._aliases.items():
            request.bindings[alias].tool = tool
        metadata = self._metadata
        if session_id:
            metadata = (*metadata, (SESSION_HEADER, session_id))
        return _Prepared(request, fmt, metadata)

    @staticmethod
    def _resolution(approval: Approval, answer: bool | Answer) -> pb.ResolveApprovalRequest:
        if isinstance(answer, bool):
            answer = Answer(approve=answer)
        if not isinstance(answer, Answer):
            raise InputError(f"approve= returned {type(answer).__name__}: return a bool or Answer")
        request = pb.ResolveApprovalRequest(
            approval_id=approval.approval_id,
            decision=(pb.ResolveApprovalRequest.APPROVE if answer.approve
                      else pb.ResolveApprovalRequest.DENY),
            reason=answer.reason,
            remember=(pb.ResolveApprovalRequest.SESSION if answer.remember_session
                      else pb.ResolveApprovalRequest.ONCE),
        )
        if answer.arguments is not None:
            request.updated_arguments.CopyFrom(convert.to_struct(answer.arguments))
        return request

    @staticmethod
    def _finish(last: Event | None) -> DispatchResult:
        if isinstance(last, Finished):
            return last.result
        raise ToolgateError("the stream ended without the batch's result")


def _credentials(
    tls: bool | None, root_certificates: bytes | None, private_key: bytes | None,
    certificate_chain: bytes | None,
) -> grpc.ChannelCredentials | None:
    wants_tls = tls if tls is not None else any(
        v is not None for v in (root_certificates, private_key, certificate_chain))
    if not wants_tls:
        if tls is False and any(
            v is not None for v in (root_certificates, private_key, certificate_chain)
        ):
            raise InputError("certificates were given with tls=False")
        return None
    if (private_key is None) != (certificate_chain is None):
        raise InputError("a client certificate needs both private_key and certificate_chain")
    return grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)


def _channel_options(
    server_name: str | None, options: Sequence[tuple[str, Any]],
) -> list[tuple[str, Any]]:
    out = list(options)
    if server_name:
        out.append(("grpc.ssl_target_name_override", server_name))
    return out


class Events:
    """The events of one batch (``Client.stream``): an iterator, and a context manager whose
    exit, like ``close()``, cancels the batch if it is still running."""

    def __init__(self, events: Generator[Event, None, None]) -> None:
        self._events = events

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        return next(self._events)

    def close(self) -> None:
        self._events.close()

    def __enter__(self) -> Events:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncEvents:
    """The events of one batch (``AsyncClient.stream``): an async iterator, and an async
    context manager whose exit, like ``aclose()``, cancels the batch if it is still running."""

    def __init__(self, events: AsyncGenerator[Event, None]) -> None:
        self._events = events

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()

    async def __aenter__(self) -> AsyncEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class Client(_Base):
    """A blocking client on one gRPC channel (thread-safe; reuse it).

    ``token``: sent as ``authorization: Bearer <token>``. TLS: ``tls=True`` for the system roots,
    or ``root_certificates`` (PEM bytes) for a private CA; ``private_key`` and
    ``certificate_chain`` (PEM bytes) for a client certificate (mTLS); ``server_name`` when the
    certificate names another host than ``address``. ``timeout``: the default deadline of each
    call, in seconds (None: none).
    """

    def __init__(
        self, address: str = "127.0.0.1:50051", *, token: str | None = None,
        tls: bool | None = None, root_certificates: bytes | None = None,
        private_key: bytes | None = None, certificate_chain: bytes | None = None,
        server_name: str | None = None, timeout: float | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        super().__init__(token, timeout)
        creds = _credentials(tls, root_certificates, private_key, certificate_chain)
        opts = _channel_options(server_name, options)
        self._channel = (grpc.secure_channel(address, creds, opts) if creds
                         else grpc.insecure_channel(address, opts))
        c = self._channel
        self._batch = c.unary_stream(
            _SERVICE + "DispatchBatch",
            request_serializer=pb.DispatchBatchRequest.SerializeToString,
            response_deserializer=pb.DispatchEvent.FromString)
        self._list_tools = c.unary_unary(
            _SERVICE + "ListTools", request_serializer=pb.ListToolsRequest.SerializeToString,
            response_deserializer=pb.ListToolsResponse.FromString)
        self._resolve = c.unary_unary(
            _SERVICE + "ResolveApproval",
            request_serializer=pb.ResolveApprovalRequest.SerializeToString,
            response_deserializer=pb.ResolveApprovalResponse.FromString)
        self._memory = c.unary_unary(
            _SERVICE + "GetSessionMemory",
            request_serializer=pb.GetSessionMemoryRequest.SerializeToString,
            response_deserializer=pb.GetSessionMemoryResponse.FromString)
        self._end = c.unary_unary(
            _SERVICE + "EndSession", request_serializer=pb.EndSessionRequest.SerializeToString,
            response_deserializer=pb.EndSessionResponse.FromString)

    def dispatch(
        self, response: Any, *, session_id: str | None = None, format: Format | None = None,
        context: Mapping[str, Any] | None = None, parallel: bool = False,
        fail_fast: bool = False, max_concurrency: int = 0, call_timeout: float | None = None,
        max_calls: int = 0, turn: int = 0, approve: Approve | None = None,
        timeout: float | None = None,
    ) -> DispatchResult:
        """Runs the tool calls in ``response`` (what the model returned, see README) and returns
        their results, with ``messages`` in the same provider's format unless ``format`` says
        otherwise. ``approve``: called with each call a hook or permission rule wants a person
        for (interactive approvals); return True, False or an ``Answer``."""
        last: Event | None = None
        with self.stream(
            response, session_id=session_id, format=format, context=context,
            parallel=parallel, fail_fast=fail_fast, max_concurrency=max_concurrency,
            call_timeout=call_timeout, max_calls=max_calls, turn=turn, approve=approve,
            timeout=timeout,
        ) as events:
            for last in events:
                pass
        return self._finish(last)

    def stream(
        self, response: Any, *, session_id: str | None = None, format: Format | None = None,
        context: Mapping[str, Any] | None = None, parallel: bool = False,
        fail_fast: bool = False, max_concurrency: int = 0, call_timeout: float | None = None,
        max_calls: int = 0, turn: int = 0, approve: Approve | None = None,
        interactive_approvals: bool | None = None, timeout: float | None = None,
    ) -> Events:
        """Like ``dispatch``, yielding the batch's events as they happen; the last is
        ``Finished`` with the result. Without ``approve``, ``interactive_approvals=True`` lets
        the caller answer ``ApprovalRequested`` events itself (``resolve_approval``).

        Use it in a ``with`` block (or call ``close()``) when you may stop early: leaving the
        block cancels the batch on the server at once, not when the iterator is collected."""
        return Events(self._events(
            response, session_id=session_id, format=format, context=context,
            parallel=parallel, fail_fast=fail_fast, max_concurrency=max_concurrency,
            call_timeout=call_timeout, max_calls=max_calls, turn=turn, approve=approve,
            interactive_approvals=interactive_approvals, timeout=timeout))

    def _events(
        self, response: Any, *, session_id: str | None, format: Format | None,
        context: Mapping[str, Any] | None, parallel: bool, fail_fast: bool,
        max_concurrency: int, call_timeout: float | None, max_calls: int, turn: int,
        approve: Approve | None, interactive_approvals: bool | None, timeout: float | None,
    ) -> Generator[Event, None, None]:
        interactive = approve is not None if interactive_approvals is None else interactive_approvals
        prepared = self._prepare(response, session_id, format, context, parallel, fail_fast,
                                 max_concurrency, call_timeout, max_calls, turn, interactive)
        call = self._batch(prepared.request, metadata=prepared.metadata,
                           timeout=timeout if timeout is not None else self._timeout)
        try:
            for raw in call:
                event = convert.event(raw, prepared.format)
                if event is None:
                    continue
                yield event
                if isinstance(event, ApprovalRequested) and approve is not None:
                    self._answer(self._resolution(event.approval, approve(event.approval)))
        except grpc.RpcError as error:
            raise from_rpc(error) from None
        finally:
            call.cancel()

    def _answer(self, request: pb.ResolveApprovalRequest) -> None:
        try:
            self._resolve(request, metadata=self._metadata, timeout=self._timeout)
        except grpc.RpcError as error:
            # Answered meanwhile (by a person elsewhere, or expired): the stream says how.
            if error.code() not in (grpc.StatusCode.FAILED_PRECONDITION,
                                    grpc.StatusCode.NOT_FOUND):
                raise

    def resolve_approval(
        self, approval_id: str, approve: bool | Answer, *, timeout: float | None = None,
    ) -> Approval:
        """Answers a pending approval: as an approver (or admin) of its tenant, or as the identity
        that sent its batch where the asking rule lets it (``Approval.requester_may_answer``)."""
        request = self._resolution(
            Approval(approval_id, "", 0, "", "", None, "", "", None, ""), approve)
        try:
            reply = self._resolve(request, metadata=self._metadata,
                                  timeout=timeout if timeout is not None else self._timeout)
        except grpc.RpcError as error:
            raise from_rpc(error) from None
        return convert.approval(reply.approval)

    def list_tools(self, *, timeout: float | None = None) -> list[Tool]:
        """Every tool toolgate serves, quarantined ones included (see ``status``)."""
        try:
            reply = self._list_tools(pb.ListToolsRequest(), metadata=self._metadata,
                                     timeout=timeout if timeout is not None else self._timeout)
        except grpc.RpcError as error:
            raise from_rpc(error) from None
        return self._learn(reply)

    def tools(self, format: Format = "openai", *, timeout: float | None = None,
              ) -> list[Any]:
        """The tools as the provider's ``tools=`` list (plain dicts of its tool params), without
        quarantined ones. A name a provider refuses (``py.get_weather``) is given as a portable
        alias (``py_get_weather``); this client's batches bind the alias to the tool."""
        return convert.tool_definitions(self.list_tools(timeout=timeout), format)

    def session_memory(self, session_id: str, *, timeout: float | None = None) -> list[str]:
        """The session's memory entries, oldest first."""
        try:
            reply = self._memory(pb.GetSessionMemoryRequest(session_id=session_id),
                                 metadata=(*self._metadata, (SESSION_HEADER, session_id)),
                                 timeout=timeout if timeout is not None else self._timeout)
        except grpc.RpcError as error:
            raise from_rpc(error) from None
        return list(reply.entries)

    def end_session(self, session_id: str, *, timeout: float | None = None) -> bool:
        """Ends a session (its loop window, memory, scratch files); False if there was none."""
        try:
            reply = self._end(pb.EndSessionRequest(session_id=session_id),
                              metadata=(*self._metadata, (SESSION_HEADER, session_id)),
                              timeout=timeout if timeout is not None else self._timeout)
        except grpc.RpcError as error:
            raise from_rpc(error) from None
        return reply.ended

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Base):
    """The asyncio client (grpc.aio), with the same methods as ``Client``, awaited. ``approve``
    may be a coroutine function. Make it inside the event loop it is used on."""

    def __init__(
        self, address: str = "127.0.0.1:50051", *, token: str | None = None,
        tls: bool | None = None, root_certificates: bytes | None = None,
        private_key: bytes | None = None, certificate_chain: bytes | None = None,
        server_name: str | None = None, timeout: float | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        super().__init__(token, timeout)
        creds = _credentials(tls, root_certificates, private_key, certificate_chain)
        opts = _channel_options(server_name, options)
        self._channel = (grpc.aio.secure_channel(address, creds, opts) if creds
                         else grpc.aio.insecure_channel(address, opts))
        c = self._channel
        self._batch = c.unary_stream(
            _SERVICE + "DispatchBatch",
            request_serializer=pb.DispatchBatchRequest.SerializeToString,
            response_deserializer=pb.DispatchEvent.FromString)
        self._list_tools = c.unary_unary(
            _SERVICE + "ListTools", request_serializer=pb.ListToolsRequest.SerializeToString,
            response_deserializer=pb.ListToolsResponse.FromString)
        self._resolve = c.unary_unary(
            _SERVICE + "ResolveApproval",
            request_serializer=pb.ResolveApprovalRequest.SerializeToString,
            response_deserializer=pb.ResolveApprovalResponse.FromString)
        self._memory = c.unary_unary(
            _SERVICE + "GetSessionMemory",
            request_serializer=pb.GetSessionMemoryRequest.SerializeToString,
            response_deserializer=pb.GetSessionMemoryResponse.FromString)
        self._end = c.unary_unary(
            _SERVICE + "EndSession", request_serializer=pb.EndSessionRequest.SerializeToString,
            response_deserializer=pb.EndSessionResponse.FromString)

    async def dispatch(
        self, response: Any, *, session_id: str | None = None, format: Format | None = None,
        context: Mapping[str, Any] | None = None, parallel: bool = False,
        fail_fast: bool = False, max_concurrency: int = 0, call_timeout: float | None = None,
        max_calls: int = 0, turn: int = 0, approve: AsyncApprove | None = None,
        timeout: float | None = None,
    ) -> DispatchResult:
        """See ``Client.dispatch``."""
        last: Event | None = None
        async with self.stream(
            response, session_id=session_id, format=format, context=context,
            parallel=parallel, fail_fast=fail_fast, max_concurrency=max_concurrency,
            call_timeout=call_timeout, max_calls=max_calls, turn=turn, approve=approve,
            timeout=timeout,
        ) as events:
            async for last in events:
                pass
        return self._finish(last)

    def stream(
        self, response: Any, *, session_id: str | None = None, format: Format | None = None,
        context: Mapping[str, Any] | None = None, parallel: bool = False,
        fail_fast: bool = False, max_concurrency: int = 0, call_timeout: float | None = None,
        max_calls: int = 0, turn: int = 0, approve: AsyncApprove | None = None,
        interactive_approvals: bool | None = None, timeout: float | None = None,
    ) -> AsyncEvents:
        """See ``Client.stream``; ``async with`` (or ``await aclose()``) cancels the batch when
        you stop early."""
        return AsyncEvents(self._events(
            response, session_id=session_id, format=format, context=context,
            parallel=parallel, fail_fast=fail_fast, max_concurrency=max_concurrency,
            call_timeout=call_timeout, max_calls=max_calls, turn=turn, approve=approve,
            interactive_approvals=interactive_approvals, timeout=timeout))

    async def _events(
        self, response: Any, *, session_id: str | None, format: Format | None,
        context: Mapping[str, Any] | None, parallel: bool, fail_fast: bool,
        max_concurrency: int, call_timeout: float | None, max_calls: int, turn: int,
        approve: AsyncApprove | None, interactive_approvals: bool | None,
        timeout: float | None,
    ) -> AsyncGenerator[Event, None]:
        interactive = approve is not None if interactive_approvals is None else interactive_approvals
        prepared = self._prepare(response, session_id, format, context, parallel, fail_fast,
                                 max_concurrency, call_timeout, max_calls, turn, interactive)
        call = self._batch(prepared.request, metadata=prepared.metadata,
                           timeout=timeout if timeout is not None else self._timeout)
        try:
            async for raw in call:
                event = convert.event(raw, prepared.format)
                if event is None:
                    continue
                yield event
                if isinstance(event, ApprovalRequested) and approve is not None:
                    answer = approve(event.approval)
                    if inspect.isawaitable(answer):
                        answer = await answer
                    await self._answer(self._resolution(event.approval, answer))
        except grpc.RpcError as error:
            raise from_rpc(error) from None
        finally:
            call.cancel()

    async def _answer(self, request: pb.ResolveApprovalRequest) -> None:
        try:
            await self._resolve(request, metadata=self._metadata, timeout=self._timeout)
        except grpc.RpcError as error:
            if error.code() not in (grpc.StatusCode.FAILED_PRECONDITION,
                                    grpc.StatusCode.NOT_FOUND):
                raise

    async def resolve_approval(
        self, approval_id: str, approve: bool | Answer, *, timeout: float | None = None,
    ) -> Approval:
        """See ``Client.resolve_approval``."""
        request = self._resolution(
            Approval(approval_id, "", 0, "", "", None, "", "", None, ""), approve)
        try:
            reply = await self._resolve(
                request, metadata=self._metadata,
                timeout=timeout if timeout is not None else self._timeout)
        except grpc.RpcError as error:
            raise from_rpc(error) from None
        return convert.approval(reply.approval)

    async def list_tools(self, *, timeout: float | None = None) -> list[Tool]:
        """See ``Client.list_tools``."""
        try:
            reply = await self._list_tools(
                pb.ListToolsRequest(), metadata=self._metadata,
                timeout=timeout if timeout is not None else self._timeout)
        except grpc.RpcError as error:
            raise from_rpc(error) from None
        return self._learn(reply)

    async def tools(self, format: Format = "openai", *, timeout: float | None = None,
                    ) -> list[Any]:
        """See ``Client.tools``."""
        return convert.tool_definitions(await self.list_tools(timeout=timeout), format)

    async def session_memory(self, session_id: str, *, timeout: float | None = None,
                             ) -> list[str]:
        """See ``Client.session_memory``."""
        try:
            reply = await self._memory(
                pb.GetSessionMemoryRequest(session_id=session_id),
                metadata=(*self._metadata, (SESSION_HEADER, session_id)),
                timeout=timeout if timeout is not None else self._timeout)
        except grpc.RpcError as error:
            raise from_rpc(error) from None
        return list(reply.entries)

    async def end_session(self, session_id: str, *, timeout: float | None = None) -> bool:
        """See ``Client.end_session``."""
        try:
            reply = await self._end(
                pb.EndSessionRequest(session_id=session_id),
                metadata=(*self._metadata, (SESSION_HEADER, session_id)),
                timeout=timeout if timeout is not None else self._timeout)
        except grpc.RpcError as error:
            raise from_rpc(error) from None
        return reply.ended

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
