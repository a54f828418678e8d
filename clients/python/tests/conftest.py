"""Fixtures: the real toolgate binary on a free port (plaintext, and TLS with tokens), with a
test CA made by openssl at test time."""

from __future__ import annotations

import os
import pathlib
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
AGENT_TOKEN = "tg-agent-3a91f0c2"


def binary() -> str:
    """TOOLGATE_BIN, else the repository's release build, else its debug build."""
    if env := os.environ.get("TOOLGATE_BIN"):
        return env
    for profile in ("release", "debug"):
        path = REPO / "target" / profile / "toolgate"
        if path.exists():
            return str(path)
    raise RuntimeError("no toolgate binary: build it (cargo build --release) or set TOOLGATE_BIN")


BASE = """
[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[approvals]
timeout = "20s"
# The opt-in setup the approve callbacks serve: the agent asks the person at its terminal.
requester_may_answer = true
[[hooks.rules]]
id = "risky"
tools = "echo"
action = "ask"
reason = "a risky echo"
[[hooks.rules.when]]
pointer = "/text"
regex = "^risky"
"""


class Server:
    """toolgate started from a config file; ``addr`` is where it listens."""

    def __init__(self, config: str, env: dict[str, str] | None = None) -> None:
        self.dir = tempfile.TemporaryDirectory()
        path = pathlib.Path(self.dir.name) / "toolgate.toml"
        path.write_text(config)
        clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
        self.log = open(pathlib.Path(self.dir.name) / "toolgate.log", "w")
        self.proc = subprocess.Popen(
            [binary(), "--config", str(path)], stdout=subprocess.PIPE, stderr=self.log,
            env={**clean, **(env or {})}, text=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        self.addr = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("listening on "):
                self.addr = line.split()[-1]
                break
        if not self.addr:
            log = (pathlib.Path(self.dir.name) / "toolgate.log").read_text()
            self.stop()
            raise RuntimeError(f"toolgate did not start: {log}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        self.dir.cleanup()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """Plaintext, anonymous callers from loopback are agents (the default)."""
    s = Server(BASE)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def addr(server: Server) -> str:
    return server.addr


class Certs:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def path(self, name: str) -> str:
        return str(self.root / name)


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(root: pathlib.Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-days", "2", "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out",
             f"{name}.pem", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=root)


def make_leaf(root: pathlib.Path, ca: str, name: str, san: str, usage: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=root)
    ext = root / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\nextendedKeyUsage={usage}\n"
                   "basicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", str(ext),
             cwd=root)


@pytest.fixture(scope="session")
def certs() -> Iterator[Certs]:
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        make_ca(root, "ca")
        make_ca(root, "other-ca")
        make_leaf(root, "ca", "server", "IP:127.0.0.1,DNS:toolgate.test", "serverAuth")
        make_leaf(root, "ca", "client", "DNS:agent-7.clients.test", "clientAuth")
        yield Certs(root)


@pytest.fixture(scope="session")
def tls_server(certs: Certs) -> Iterator[Server]:
    """TLS only; callers need a token or a client certificate the config names."""
    config = BASE + f"""
[tls]
cert_file = "{certs.path('server.pem')}"
key_file = "{certs.path('server.key')}"
client_ca_file = "{certs.path('ca.pem')}"
require_client_cert = false
[auth]
anonymous = "none"
[[auth.tokens]]
id = "bot"
tenant = "acme"
roles = ["agent"]
env = "TG_AGENT"
[[auth.certificates]]
name = "agent-7.clients.test"
tenant = "acme"
roles = ["agent"]
"""
    s = Server(config, env={"TG_AGENT": AGENT_TOKEN})
    yield s
    s.stop()


@pytest.fixture(scope="session")
def remote_server() -> Iterator[Server]:
    """With an HTTP tool named `py.get_weather` (a prefix, as the configuration docs show it),
    served by this process: a name OpenAI, Anthropic and Gemini refuse."""
    import http.server
    import json
    import threading

    class Weather(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            # toolgate POSTs {call_id, session_id, name, input, metadata}.
            reply = json.dumps({"city": body["input"].get("city"), "sky": "clear"}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Weather)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    config = BASE + f"""
[[remotes]]
name = "py"
kind = "http"
prefix = "py."
url = "http://127.0.0.1:{http_server.server_address[1]}/weather"
required = true
[remotes.definition]
name = "get_weather"
description = "Current weather for a city."
input_schema = {{ type = "object", properties = {{ city = {{ type = "string" }} }} }}
"""
    s = Server(config)
    yield s
    s.stop()
    http_server.shutdown()
