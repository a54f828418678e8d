"""gRPC failures become the client's exceptions with the status and the server's message; TLS
with a token or a client certificate; the session id travels as metadata too."""

from __future__ import annotations

import socket
from concurrent import futures
from typing import Any

import grpc
import pytest
import sdk
from conftest import AGENT_TOKEN, Certs, Server

from toolgate import (
    SESSION_HEADER,
    Client,
    DeadlineExceeded,
    InputError,
    InvalidRequest,
    NotFound,
    ToolgateError,
    Unauthenticated,
    Unavailable,
)

ECHO = [{"id": "e1", "name": "echo", "arguments": {"text": "over tls"}}]


def test_a_message_the_server_refuses_is_invalid_request(addr: str) -> None:
    # Refused before the stream's first message: the status must survive (grpc's C core once
    # read it as "Stream removed").
    with Client(addr) as tg, pytest.raises(InvalidRequest) as raised:
        tg.dispatch({"role": "assistant", "content": None})
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "no tool call and no text" in raised.value.details, raised.value.details


@pytest.mark.parametrize("bad", ["not a valid id!", "sé", "a\nb", "x" * 129])
def test_a_session_id_toolgate_would_refuse_is_refused_before_sending(addr: str, bad: str) -> None:
    with Client(addr) as tg, pytest.raises(InputError) as raised:
        tg.dispatch(ECHO, session_id=bad)
    assert "session_id" in str(raised.value)


def test_unknown_and_malformed_approval_ids(addr: str) -> None:
    with Client(addr) as tg:
        with pytest.raises(NotFound) as missing:
            tg.resolve_approval("0123456789abcdef0123456789abcdef", True)
        assert missing.value.code == grpc.StatusCode.NOT_FOUND
        with pytest.raises(InvalidRequest):
            tg.resolve_approval("nope", True)


def test_a_deadline_that_passes_is_deadline_exceeded(addr: str) -> None:
    slow = [{"id": "s1", "name": "sleep", "arguments": {"ms": 3000}}]
    with Client(addr) as tg, pytest.raises(DeadlineExceeded):
        tg.dispatch(slow, timeout=0.3)


def test_no_server_is_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client(f"127.0.0.1:{port}", timeout=5) as tg, pytest.raises(Unavailable) as raised:
        tg.dispatch(ECHO)
    assert isinstance(raised.value, ToolgateError)


def test_tls_with_a_token(tls_server: Server, certs: Certs) -> None:
    with Client(tls_server.addr, token=AGENT_TOKEN, root_certificates=certs.read("ca.pem")) as tg:
        out = tg.dispatch(ECHO, session_id="py-tls")
        assert out.all_succeeded and out.results[0].content == '{"text":"over tls"}'
        assert any(t["function"]["name"] == "echo" for t in tg.tools())
    # The certificate names toolgate.test too: server_name picks it.
    with Client(tls_server.addr, token=AGENT_TOKEN, root_certificates=certs.read("ca.pem"),
                server_name="toolgate.test") as tg:
        assert tg.dispatch(ECHO).all_succeeded


def test_tls_with_a_client_certificate(tls_server: Server, certs: Certs) -> None:
    with Client(tls_server.addr, root_certificates=certs.read("ca.pem"),
                private_key=certs.read("client.key"),
                certificate_chain=certs.read("client.pem")) as tg:
        assert tg.dispatch(ECHO).all_succeeded


def test_tls_without_or_with_a_wrong_token_is_unauthenticated(
    tls_server: Server, certs: Certs,
) -> None:
    for token in (None, "not-the-token"):
        with Client(tls_server.addr, token=token, root_certificates=certs.read("ca.pem")) as tg:
            with pytest.raises(Unauthenticated) as raised:
                tg.dispatch(ECHO)
            assert raised.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_tls_against_the_wrong_ca_is_unavailable(tls_server: Server, certs: Certs) -> None:
    with Client(tls_server.addr, token=AGENT_TOKEN, root_certificates=certs.read("other-ca.pem"),
                timeout=10) as tg, pytest.raises(Unavailable):
        tg.dispatch(ECHO)


def test_plaintext_against_a_tls_port_is_unavailable(tls_server: Server) -> None:
    with Client(tls_server.addr, token=AGENT_TOKEN, timeout=10) as tg, pytest.raises(Unavailable):
        tg.dispatch(ECHO)


def test_half_a_client_certificate_is_refused_at_once() -> None:
    with pytest.raises(InputError):
        Client("127.0.0.1:1", private_key=b"key")
    with pytest.raises(InputError):
        Client("127.0.0.1:1", tls=False, root_certificates=b"ca")


class Recorder(grpc.GenericRpcHandler):
    """Any method: records the call's metadata, answers UNIMPLEMENTED."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    def service(self, details: Any) -> Any:
        self.seen.append(dict(details.invocation_metadata))

        def refuse(request: bytes, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "recorder")

        return grpc.unary_stream_rpc_method_handler(refuse)


def test_the_session_id_goes_as_metadata_too_for_balancers() -> None:
    recorder = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[recorder])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with Client(f"127.0.0.1:{port}", token="t0k") as tg:
            for session in ("s-balanced", None):
                with pytest.raises(ToolgateError) as raised:
                    tg.dispatch(sdk.message(), session_id=session)
                assert raised.value.code == grpc.StatusCode.UNIMPLEMENTED
    finally:
        server.stop(0)
    named, unnamed = recorder.seen
    assert named[SESSION_HEADER] == "s-balanced" and named["authorization"] == "Bearer t0k"
    assert SESSION_HEADER not in unnamed
