"""Hosted-MCP test stack: an OAuth 2.1 authorization server plus an MCP resource server.

Used by the Rust integration tests in tests/it/hosted.rs to prove that toolgate reaches a
hosted MCP server over HTTPS with the OAuth client-credentials grant. The test spawns

    python oauth_stack.py --cert CERT.pem --key KEY.pem [--host localhost] [--token-ttl 3600]
        [--token-delay 0] [--client-id toolgate] [--client-secret-file PATH] [--client-key PEM]

reads the single JSON line printed on stdout once both servers listen,
``{"as": "https://localhost:P1", "mcp": "https://localhost:P2/mcp"}``, points toolgate at
the ``mcp`` URL and drives/inspects the AS through its loopback-only admin endpoints
(``/admin/revoke-tokens``, ``/admin/revoke-client``, ``/admin/restore-client``,
``/admin/ttl?seconds=N``, ``/admin/stats``). It runs until killed.

The resource server is the official MCP Python SDK (``MCPServer`` with ``AuthSettings`` and a
``TokenVerifier``): the SDK itself answers 401 with ``WWW-Authenticate: Bearer ...
resource_metadata="..."`` and serves the RFC 9728 document at
``/.well-known/oauth-protected-resource/mcp``. The verifier "introspects" opaque tokens by
looking them up in the AS's in-memory table (same process). With ``--client-key`` the client
may also prove itself with ``private_key_jwt`` (RFC 7523): an assertion signed by that key,
checked with PyJWT against its public half (signature, iss = sub = client, aud = the issuer or
the token endpoint, exp, a jti never seen before). Logs go to stderr only.
"""

import argparse
import asyncio
import base64
import json
import os
import secrets
import signal
import socket
import sys
import time
from urllib.parse import unquote_plus

import jwt
import uvicorn
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


class AuthState:
    """The AS's in-memory client, token and statistics tables (shared with the RS verifier)."""

    def __init__(self, client_id: str, client_secret: str, ttl: float, delay: float, mcp_url: str,
                 client_key=None):
        self.clients = {client_id: client_secret}
        # The client's public key for private_key_jwt, and the assertion ids already used.
        self.client_key, self.seen_jti = client_key, set()
        self.revoked_clients: set[str] = set()
        self.tokens: dict[str, dict] = {}
        self.ttl, self.delay, self.mcp_url = ttl, delay, mcp_url
        self.in_flight = 0
        self.stats = {"tokens_issued": 0, "token_requests": 0, "max_concurrent": 0, "resources": [],
                      "scopes": [], "auth_methods": [], "rejected_by_rs": 0, "assertions": [],
                      "issued_at": []}

    def lookup(self, token: str) -> dict | None:
        info = self.tokens.get(token)
        if (info is None or not info["active"] or info["expires_at"] <= time.time()
                or info["resource"] != self.mcp_url):
            return None
        return info


def oauth_error(status: int, error: str, description: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "error_description": description}, status,
                        headers={**NO_STORE, **(headers or {})})


def client_credentials(request: Request, form) -> tuple[str, str | None, str | None]:
    """(method, client_id, client_secret) from HTTP Basic (RFC 6749 §2.3.1 form-urlencoded) or the body."""
    header = request.headers.get("authorization", "")
    if header[:6].lower() == "basic ":
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
            cid, _, secret = decoded.partition(":")
            return "basic", unquote_plus(cid), unquote_plus(secret)
        except (ValueError, UnicodeDecodeError):
            return "basic", None, None
    if "client_id" in form:
        return "post", form.get("client_id"), form.get("client_secret")
    return "none", None, None


def check_assertion(state: AuthState, form, as_url: str) -> str | None:
    """The client id a private_key_jwt assertion proves, or None. Records its header and claims."""
    if state.client_key is None:
        return None
    token = form.get("client_assertion", "")
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, state.client_key, algorithms=["RS256", "ES256", "ES384", "EdDSA"],
                            audience=[as_url, f"{as_url}/token"],
                            options={"require": ["iss", "sub", "aud", "exp", "iat", "jti"]})
    except jwt.PyJWTError as e:
        print(f"oauth_stack: assertion refused: {e}", file=sys.stderr, flush=True)
        return None
    state.stats["assertions"].append({"alg": header.get("alg"), "kid": header.get("kid"),
                                      "aud": claims["aud"], "lifetime": claims["exp"] - claims["iat"]})
    cid = claims["sub"]
    if claims["iss"] != cid or claims["jti"] in state.seen_jti or form.get("client_id", cid) != cid:
        return None
    state.seen_jti.add(claims["jti"])
    return cid


def build_as_app(state: AuthState, as_url: str) -> Starlette:
    async def metadata(_: Request) -> JSONResponse:
        return JSONResponse({
            "issuer": as_url,
            "authorization_endpoint": f"{as_url}/authorize",
            "token_endpoint": f"{as_url}/token",
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "private_key_jwt"],
            "scopes_supported": ["tools"],
            "response_types_supported": ["code"],
        })

    async def authorize(_: Request) -> JSONResponse:
        return oauth_error(400, "unsupported_response_type", "only client_credentials is supported")

    async def token(request: Request) -> JSONResponse:
        form = await request.form()
        stats = state.stats
        stats["token_requests"] += 1
        state.in_flight += 1
        stats["max_concurrent"] = max(stats["max_concurrent"], state.in_flight)
        try:
            if form.get("client_assertion_type") == JWT_BEARER:
                method, cid = "private_key_jwt", check_assertion(state, form, as_url)
                proven = cid is not None
            else:
                method, cid, secret = client_credentials(request, form)
                proven = cid in state.clients and secrets.compare_digest(state.clients[cid], secret or "")
            resource, scope = form.get("resource"), form.get("scope")
            stats["auth_methods"].append(method)
            stats["resources"].append(resource)
            stats["scopes"].append(scope)
            if state.delay > 0:
                await asyncio.sleep(state.delay)
            if not proven or cid not in state.clients or cid in state.revoked_clients:
                challenge = {"WWW-Authenticate": 'Basic realm="oauth_stack"'} if method == "basic" else None
                return oauth_error(401, "invalid_client", "client authentication failed", challenge)
            if form.get("grant_type") != "client_credentials":
                return oauth_error(400, "unsupported_grant_type", "only client_credentials is supported")
            if resource != state.mcp_url:
                return oauth_error(400, "invalid_target", f"resource must be {state.mcp_url}")
            value = secrets.token_urlsafe(32)
            state.tokens[value] = {"client_id": cid, "resource": resource, "scopes": ["tools"],
                                   "expires_at": time.time() + state.ttl, "active": True}
            stats["tokens_issued"] += 1
            stats["issued_at"].append(time.time())
            return JSONResponse({"access_token": value, "token_type": "Bearer",
                                 "expires_in": int(state.ttl), "scope": "tools"}, headers=NO_STORE)
        finally:
            state.in_flight -= 1

    async def revoke_tokens(_: Request) -> JSONResponse:
        for info in state.tokens.values():
            info["active"] = False
        return JSONResponse({"revoked": len(state.tokens)})

    async def revoke_client(_: Request) -> JSONResponse:
        state.revoked_clients.update(state.clients)
        for info in state.tokens.values():
            info["active"] = False
        return JSONResponse({"revoked_clients": sorted(state.revoked_clients)})

    async def restore_client(_: Request) -> JSONResponse:
        state.revoked_clients.clear()
        return JSONResponse({"revoked_clients": []})

    async def set_ttl(request: Request) -> JSONResponse:
        try:
            state.ttl = float(request.query_params["seconds"])
        except (KeyError, ValueError):
            return JSONResponse({"error": "seconds query parameter required"}, 400)
        return JSONResponse({"ttl": state.ttl})

    async def stats(_: Request) -> JSONResponse:
        return JSONResponse(state.stats)

    return Starlette(routes=[
        Route("/.well-known/oauth-authorization-server", metadata, methods=["GET"]),
        Route("/authorize", authorize, methods=["GET", "POST"]),
        Route("/token", token, methods=["POST"]),
        Route("/admin/revoke-tokens", revoke_tokens, methods=["POST"]),
        Route("/admin/revoke-client", revoke_client, methods=["POST"]),
        Route("/admin/restore-client", restore_client, methods=["POST"]),
        Route("/admin/ttl", set_ttl, methods=["POST"]),
        Route("/admin/stats", stats, methods=["GET"]),
    ])


class TableTokenVerifier:
    """SDK TokenVerifier: active, unexpired and issued for this MCP URL, else None (SDK answers 401)."""

    def __init__(self, state: AuthState):
        self.state = state

    async def verify_token(self, token: str) -> AccessToken | None:
        info = self.state.lookup(token)
        if info is None:
            self.state.stats["rejected_by_rs"] += 1
            return None
        return AccessToken(token=token, client_id=info["client_id"], scopes=info["scopes"],
                           expires_at=int(info["expires_at"]), resource=info["resource"])


def build_mcp_app(state: AuthState, as_url: str, mcp_url: str) -> Starlette:
    server = MCPServer(
        "oauth-stack",
        token_verifier=TableTokenVerifier(state),
        auth=AuthSettings(issuer_url=as_url, resource_server_url=mcp_url, required_scopes=["tools"],
                          validate_token_resource=True),
        log_level="WARNING",
    )

    @server.tool()
    def whoami(ctx: Context) -> str:
        """Report the OAuth client and resource of the bearer token used for this call."""
        user = ctx.request_context.request.scope.get("user")
        access = getattr(user, "access_token", None)
        if access is None:
            return "client=<none> resource=<none>"
        return f"client={access.client_id} resource={access.resource}"

    @server.tool()
    def echo(message: str) -> str:
        """Echo the message back."""
        return f"Echo: {message}"

    # The SDK turns on Host-header (DNS-rebinding) checks for 127.0.0.1 by default; not wanted here.
    return server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))


def listen() -> tuple[socket.socket, int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--token-ttl", type=float, default=3600)
    parser.add_argument("--token-delay", type=float, default=0)
    parser.add_argument("--client-id", default="toolgate")
    parser.add_argument("--client-secret-file")
    parser.add_argument("--client-key", help="the client's PEM private key: accept private_key_jwt signed by it")
    args = parser.parse_args()
    secret = "toolgate-secret"
    if args.client_secret_file:
        with open(args.client_secret_file) as f:
            secret = f.read().strip()

    as_sock, as_port = listen()
    mcp_sock, mcp_port = listen()
    as_url, mcp_url = f"https://{args.host}:{as_port}", f"https://{args.host}:{mcp_port}/mcp"
    client_key = None
    if args.client_key:
        with open(args.client_key, "rb") as f:
            client_key = load_pem_private_key(f.read(), password=None).public_key()
    state = AuthState(args.client_id, secret, args.token_ttl, args.token_delay, mcp_url, client_key)

    servers = []
    for app, sock in ((build_as_app(state, as_url), as_sock), (build_mcp_app(state, as_url, mcp_url), mcp_sock)):
        config = uvicorn.Config(app, ssl_certfile=args.cert, ssl_keyfile=args.key, log_level="warning")
        servers.append((uvicorn.Server(config), sock))
    tasks = [asyncio.create_task(srv.serve(sockets=[sock])) for srv, sock in servers]
    while not all(srv.started for srv, _ in servers):
        if any(t.done() for t in tasks):
            sys.exit("oauth_stack: a server exited during startup")
        await asyncio.sleep(0.05)
    # uvicorn's graceful shutdown can wait on open SSE streams; the test just wants us gone.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: os._exit(0))
    print(json.dumps({"as": as_url, "mcp": mcp_url}), flush=True)
    print(f"oauth_stack: AS {as_url}, MCP {mcp_url}, client {args.client_id}", file=sys.stderr, flush=True)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main())
