#!/usr/bin/env python3
"""Interactive approvals end to end: a Python grpcio agent streams DispatchBatch against the real
toolgate binary while a second client (another grpcio channel, or the `toolgate approvals` CLI)
answers. Hooks of all three kinds ask (a rules hook, a command hook, a gRPC hook served from
this script) and so does a permission rule.

With --redis-server, also two replicas sharing a real Redis: an approval waiting on one is
listed and answered through the other with the CLI.

usage: e2e.py --toolgate BIN [--redis-server BIN] [SCENARIO ...]
       (prints "ok <scenario>" for each; exits 1 on failure)
"""

import argparse
import json
import os
import pathlib
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples" / "python"))

import toolgate_stubs  # noqa: E402

pb, pb_grpc = toolgate_stubs.load()
from toolgate.v1 import hooks_pb2, hooks_pb2_grpc  # noqa: E402

import grpc  # noqa: E402
from google.protobuf import json_format, struct_pb2  # noqa: E402

TOKENS = {
    "TG_BOT": "bot-secret-token-0001",  # acme, agent: sends the batches
    "TG_PEER": "peer-secret-token-0002",  # acme, agent: another agent of the tenant
    "TG_ALICE": "alice-secret-token-0003",  # acme, approver
    "TG_EVE": "eve-secret-token-0004",  # globex, agent and approver
}
Decision = pb.ResolveApprovalRequest.Decision
Remember = pb.ResolveApprovalRequest.Remember


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PolicyHook(hooks_pb2_grpc.ToolHooksServicer):
    """A gRPC hook that asks about `sleep` calls of 7 ms, and allows everything else."""

    def PreToolUse(self, request, context):
        ms = json_format.MessageToDict(request.input).get("ms")
        if request.tool == "sleep" and ms == 7:
            return hooks_pb2.PreToolUseResponse(
                decision=hooks_pb2.PreToolUseResponse.ASK,
                reason="the policy service wants a person for 7 ms naps",
            )
        return hooks_pb2.PreToolUseResponse(decision=hooks_pb2.PreToolUseResponse.ALLOW)

    def PostToolUse(self, request, context):
        return hooks_pb2.PostToolUseResponse()


CONFIG = """
[server]
listen = "127.0.0.1:{port}"
[admin]
listen = ""
[auth]
anonymous = "none"
[[auth.tokens]]
id = "bot"
tenant = "acme"
roles = ["agent"]
env = "TG_BOT"
[[auth.tokens]]
id = "peer"
tenant = "acme"
roles = ["agent"]
env = "TG_PEER"
[[auth.tokens]]
id = "alice"
tenant = "acme"
roles = ["approver"]
env = "TG_ALICE"
[[auth.tokens]]
id = "eve"
tenant = "globex"
roles = ["agent", "approver"]
env = "TG_EVE"
[approvals]
timeout = "2s"
[[hooks.rules]]
id = "risky"
tools = "echo"
action = "ask"
reason = "risky echo"
[[hooks.rules.when]]
pointer = "/q"
regex = "^risky"
[[hooks.rules]]
id = "terminal"
tools = "echo"
action = "ask"
reason = "asked at the agent's terminal"
requester_may_answer = true
[[hooks.rules.when]]
pointer = "/q"
regex = "^terminal"
[[hooks.command]]
name = "guard"
command = ["{python}", "{guard}"]
tools = "now"
timeout = "10s"
[[hooks.grpc]]
name = "policy"
endpoint = "http://127.0.0.1:{hook_port}"
tools = "sleep"
timeout = "5s"
[[permissions.rules]]
id = "files"
tools = "scratch_write"
decision = "ask"
reason = "writing files needs a person"
remember = false
[tools.builtin]
scratch_quota_bytes = 100000
"""


class Toolgate:
    """The binary on a free port, with the policy hook served from this process."""

    def __init__(self, binary, extra=""):
        self.binary = binary
        self.hooks = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        hooks_pb2_grpc.add_ToolHooksServicer_to_server(PolicyHook(), self.hooks)
        hook_port = self.hooks.add_insecure_port("127.0.0.1:0")
        self.hooks.start()
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.dir = tempfile.TemporaryDirectory()
        config = pathlib.Path(self.dir.name) / "toolgate.toml"
        config.write_text(
            CONFIG.format(
                port=self.port,
                hook_port=hook_port,
                python=sys.executable,
                guard=REPO / "examples" / "hooks" / "guard.py",
            )
            + extra
        )
        self.env = dict(os.environ, **TOKENS)
        self.log = open(pathlib.Path(self.dir.name) / "toolgate.log", "w+")
        self.process = subprocess.Popen(
            [binary, "--config", str(config)], env=self.env, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"toolgate exited:\n{self.logs()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise SystemExit(f"toolgate did not listen:\n{self.logs()}")

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def client(self, token_var):
        channel = grpc.insecure_channel(self.addr)
        return pb_grpc.ToolGateStub(channel), [("authorization", f"Bearer {TOKENS[token_var]}")]

    def cli(self, *args, token_var="TG_ALICE", check=True):
        command = [self.binary, "approvals", *args, "--addr", self.addr, "--token-env", token_var]
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise AssertionError(f"{command}: exit {done.returncode}\n{done.stdout}{done.stderr}")
        return done

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.hooks.stop(0)


class Batch:
    """A DispatchBatch streamed on its own thread: events arrive on a queue, then the result."""

    def __init__(self, tg, calls, session="s1", parallel=False, interactive=True, token="TG_BOT"):
        stub, self.metadata = tg.client(token)
        options = {"interactive_approvals": interactive}
        if parallel:
            options["mode"] = "PARALLEL"
        request = json_format.ParseDict(
            {"session_id": session, "calls": calls, "options": options}, pb.DispatchBatchRequest()
        )
        self.events = queue.Queue()
        self.result = None
        self.error = None
        self.call = stub.DispatchBatch(request, metadata=self.metadata)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for event in self.call:
                kind = event.WhichOneof("event")
                if kind == "result":
                    self.result = event.result
                else:
                    self.events.put((kind, getattr(event, kind)))
        except grpc.RpcError as e:
            self.error = e
        self.events.put(("end", None))

    def next(self, kind, timeout=15):
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError(f"no {kind} event")
            seen, body = self.events.get(timeout=left)
            if seen == kind:
                return body
            if seen == "end":
                raise AssertionError(f"the stream ended before a {kind} event ({self.error})")

    def finish(self, timeout=15):
        self.thread.join(timeout)
        assert self.result is not None, f"no result ({self.error})"
        return self.result


def results(result):
    return [json_format.MessageToDict(r, preserving_proto_field_name=True) for r in result.results]


def resolve(tg, approval_id, decision, token="TG_ALICE", **fields):
    stub, metadata = tg.client(token)
    request = pb.ResolveApprovalRequest(approval_id=approval_id, decision=decision, **fields)
    return stub.ResolveApproval(request, metadata=metadata)


def code_of(call):
    try:
        call()
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


ECHO_RISKY = {"id": "c1", "name": "echo", "arguments": {"q": "risky move"}}


def approve_by_cli(tg):
    batch = Batch(tg, [ECHO_RISKY], session="approve")
    approval = batch.next("approval_requested")
    assert approval.tool == "echo" and approval.source == "risky", approval
    assert approval.requested_by == "bot" and len(approval.approval_id) == 32
    listed = tg.cli("list").stdout
    assert approval.approval_id in listed and "risky echo" in listed, listed
    tg.cli("approve", approval.approval_id, "--reason", "looks fine")
    resolved = batch.next("approval_resolved")
    assert resolved.decision == Decision.APPROVE and resolved.resolved_by == "alice", resolved
    r = results(batch.finish())[0]
    assert r["success"] and r["content"] == '{"q":"risky move"}', r
    # Answered once.
    again = tg.cli("deny", approval.approval_id, check=False)
    assert again.returncode == 1 and "FailedPrecondition" in again.stderr, again.stderr


def edited_arguments(tg):
    batch = Batch(tg, [ECHO_RISKY], session="edit")
    approval = batch.next("approval_requested")
    edited = struct_pb2.Struct()
    edited.update({"q": "a safer move"})
    resolve(tg, approval.approval_id, Decision.APPROVE, updated_arguments=edited)
    resolved = batch.next("approval_resolved")
    assert resolved.arguments_updated, resolved
    r = results(batch.finish())[0]
    assert r["content"] == '{"q":"a safer move"}', r


def the_agent_cannot_answer_its_own(tg):
    """The agent (role agent) answering its own ask, as anything it read could steer it to: refused,
    with remember = SESSION or without, and the call still waits for the approver."""
    batch = Batch(tg, [{"id": "c1", "name": "echo", "arguments": {"q": "risky: rm -rf /"}}], session="own")
    approval = batch.next("approval_requested")
    assert not approval.requester_may_answer and approval.remember_allowed, approval
    for remember in (Remember.SESSION, Remember.ONCE):
        refused = code_of(lambda: resolve(tg, approval.approval_id, Decision.APPROVE, token="TG_BOT", remember=remember))
        assert refused == grpc.StatusCode.PERMISSION_DENIED, refused
    # The CLI with the agent's token is refused the same way.
    own = tg.cli("approve", approval.approval_id, token_var="TG_BOT", check=False)
    assert own.returncode == 1 and "PermissionDenied" in own.stderr, own.stderr
    # It still sees what waits (it is in its own stream anyway).
    stub, metadata = tg.client("TG_BOT")
    listed = stub.ListApprovals(pb.ListApprovalsRequest(session_id="own"), metadata=metadata)
    assert [a.approval_id for a in listed.approvals] == [approval.approval_id], listed
    resolve(tg, approval.approval_id, Decision.DENY, reason="not that")
    r = results(batch.finish())[0]
    assert r["error_class"] == "APPROVAL_DENIED", r


def the_agent_answers_where_its_rule_lets_it(tg):
    """A rule with requester_may_answer = true (a person at the agent's terminal): the batch's own
    identity answers; another agent of the tenant still may not."""
    batch = Batch(tg, [{"id": "c1", "name": "echo", "arguments": {"q": "terminal: ok?"}}], session="terminal")
    approval = batch.next("approval_requested")
    assert approval.source == "terminal" and approval.requester_may_answer, approval
    peer = code_of(lambda: resolve(tg, approval.approval_id, Decision.APPROVE, token="TG_PEER"))
    assert peer == grpc.StatusCode.PERMISSION_DENIED, peer
    resolve(tg, approval.approval_id, Decision.APPROVE, token="TG_BOT")
    assert batch.finish().all_succeeded


def a_rule_can_forbid_remembering(tg):
    """permissions[files] sets remember = false: an approver's SESSION answer is refused, and every
    write is asked about."""
    for n in range(2):
        call = {"id": f"w{n}", "name": "scratch_write", "arguments": {"path": f"r{n}.txt", "content": "x"}}
        batch = Batch(tg, [call], session="no-remember")
        approval = batch.next("approval_requested")
        assert approval.source == "permissions[files]" and not approval.remember_allowed, approval
        refused = code_of(lambda: resolve(tg, approval.approval_id, Decision.APPROVE, remember=Remember.SESSION))
        assert refused == grpc.StatusCode.FAILED_PRECONDITION, refused
        resolve(tg, approval.approval_id, Decision.APPROVE)
        assert batch.finish().all_succeeded


def edited_arguments_are_validated(tg):
    batch = Batch(tg, [{"id": "w", "name": "scratch_write", "arguments": {"path": "a.txt", "content": "x"}}], session="validate")
    approval = batch.next("approval_requested")
    assert approval.source == "permissions[files]", approval
    edited = struct_pb2.Struct()
    edited.update({"path": 42})
    resolve(tg, approval.approval_id, Decision.APPROVE, updated_arguments=edited)
    r = results(batch.finish())[0]
    assert r["error_class"] == "INVALID_ARGUMENTS", r


def deny_by_cli(tg):
    batch = Batch(tg, [ECHO_RISKY], session="deny")
    approval = batch.next("approval_requested")
    tg.cli("deny", approval.approval_id, "--reason", "not on a Friday")
    r = results(batch.finish())[0]
    assert r["error_class"] == "APPROVAL_DENIED", r
    assert r["content"] == "A person denied the call to tool 'echo': not on a Friday", r
    assert r.get("tool", "") == "" and r.get("attempts", 0) == 0, r


def timeout(tg):
    started = time.time()
    batch = Batch(tg, [ECHO_RISKY], session="timeout")
    approval = batch.next("approval_requested")
    resolved = batch.next("approval_resolved", timeout=10)
    assert resolved.how == pb.ApprovalResolved.EXPIRED, resolved
    r = results(batch.finish())[0]
    assert r["error_class"] == "APPROVAL_TIMEOUT", r
    assert r["content"] == "Nobody approved the call to tool 'echo' within 2s; it did not run", r
    assert 1.5 < time.time() - started < 10
    assert code_of(lambda: resolve(tg, approval.approval_id, Decision.APPROVE)) == grpc.StatusCode.NOT_FOUND


def remember_session(tg):
    batch = Batch(tg, [ECHO_RISKY], session="remember")
    approval = batch.next("approval_requested")
    resolve(tg, approval.approval_id, Decision.APPROVE, token="TG_ALICE", remember=Remember.SESSION)
    assert batch.finish().all_succeeded
    second = Batch(tg, [{"id": "c2", "name": "echo", "arguments": {"q": "risky again"}}], session="remember")
    resolved = second.next("approval_resolved")
    assert resolved.how == pb.ApprovalResolved.REMEMBERED and resolved.decision == Decision.APPROVE, resolved
    assert second.finish().all_succeeded
    # Another session is asked again.
    third = Batch(tg, [ECHO_RISKY], session="remember-not")
    approval = third.next("approval_requested")
    resolve(tg, approval.approval_id, Decision.DENY)
    assert not third.finish().all_succeeded


def other_tenant(tg):
    batch = Batch(tg, [ECHO_RISKY], session="tenancy")
    approval = batch.next("approval_requested")
    stub, metadata = tg.client("TG_EVE")
    listed = stub.ListApprovals(pb.ListApprovalsRequest(), metadata=metadata)
    assert list(listed.approvals) == [], listed
    assert code_of(lambda: resolve(tg, approval.approval_id, Decision.APPROVE, token="TG_EVE")) == grpc.StatusCode.NOT_FOUND
    eve = tg.cli("list", token_var="TG_EVE").stdout
    assert "no pending approvals" in eve, eve
    # Another agent of the same tenant is neither the sender nor an approver.
    stub, metadata = tg.client("TG_PEER")
    listed = stub.ListApprovals(pb.ListApprovalsRequest(), metadata=metadata)
    assert list(listed.approvals) == [], listed
    assert code_of(lambda: resolve(tg, approval.approval_id, Decision.APPROVE, token="TG_PEER")) == grpc.StatusCode.PERMISSION_DENIED
    resolve(tg, approval.approval_id, Decision.DENY, token="TG_ALICE")
    batch.finish()


def client_leaves(tg):
    stub, metadata = tg.client("TG_ALICE")
    updates = queue.Queue()
    watch = stub.WatchApprovals(pb.WatchApprovalsRequest(session_id="leaver"), metadata=metadata)

    def read_watch():
        try:
            for update in watch:
                updates.put(update)
        except grpc.RpcError:
            pass

    threading.Thread(target=read_watch, daemon=True).start()
    batch = Batch(tg, [ECHO_RISKY], session="leaver")
    approval = batch.next("approval_requested")
    assert updates.get(timeout=10).requested.approval_id == approval.approval_id
    listed = stub.ListApprovals(pb.ListApprovalsRequest(session_id="leaver"), metadata=metadata)
    assert [a.approval_id for a in listed.approvals] == [approval.approval_id]
    batch.call.cancel()
    deadline = time.time() + 10
    while time.time() < deadline:
        listed = stub.ListApprovals(pb.ListApprovalsRequest(session_id="leaver"), metadata=metadata)
        if not listed.approvals:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the approval outlived its client")
    assert code_of(lambda: resolve(tg, approval.approval_id, Decision.APPROVE)) == grpc.StatusCode.NOT_FOUND
    # The watcher is told it was withdrawn.
    ended = updates.get(timeout=10).resolved
    assert ended.approval_id == approval.approval_id and ended.how == pb.ApprovalResolved.WITHDRAWN, ended
    watch.cancel()


def parallel_is_not_held_up(tg):
    calls = [ECHO_RISKY, {"id": "c2", "name": "echo", "arguments": {"q": "plain"}}]
    batch = Batch(tg, calls, session="parallel", parallel=True)
    approval = batch.next("approval_requested")
    # The plain call finishes while the risky one waits.
    while True:
        post = batch.next("tool_post")
        if post.id == "c2":
            break
    resolve(tg, approval.approval_id, Decision.APPROVE)
    assert batch.finish().all_succeeded


def sequential_waits(tg):
    calls = [ECHO_RISKY, {"id": "c2", "name": "echo", "arguments": {"q": "plain"}}]
    batch = Batch(tg, calls, session="sequential")
    approval = batch.next("approval_requested")
    time.sleep(0.3)
    pending = []
    while not batch.events.empty():
        pending.append(batch.events.get()[0])
    assert "tool_post" not in pending, pending
    resolve(tg, approval.approval_id, Decision.APPROVE)
    result = batch.finish()
    assert result.all_succeeded, result


def every_kind_of_asker(tg):
    calls = [
        {"id": "r", "name": "echo", "arguments": {"q": "risky"}},
        {"id": "c", "name": "now"},
        {"id": "g", "name": "sleep", "arguments": {"ms": 7}},
        {"id": "p", "name": "scratch_write", "arguments": {"path": "notes.txt", "content": "hi"}},
    ]
    batch = Batch(tg, calls, session="kinds", parallel=True)
    seen = {}
    # Answered as they come: the scratch write does not run beside the others (it is not
    # concurrency-safe), so its rule asks once they are done.
    for _ in range(4):
        approval = batch.next("approval_requested")
        seen[approval.source] = approval
        resolve(tg, approval.approval_id, Decision.APPROVE, token="TG_ALICE")
    assert set(seen) == {"risky", "guard", "policy", "permissions[files]"}, seen.keys()
    assert seen["guard"].reason == "reading the clock needs a human"
    assert seen["policy"].reason == "the policy service wants a person for 7 ms naps"
    rs = results(batch.finish())
    assert all(r["success"] for r in rs), rs
    assert [r["tool"] for r in rs] == ["echo", "now", "sleep", "scratch_write"], rs


def watch_and_unary(tg):
    watcher = subprocess.Popen(
        [tg.binary, "approvals", "watch", "--addr", tg.addr, "--token-env", "TG_ALICE"],
        env=tg.env, stdout=subprocess.PIPE, text=True,
    )
    try:
        time.sleep(0.5)
        stub, metadata = tg.client("TG_BOT")
        request = json_format.ParseDict(
            {"session_id": "unary", "calls": [ECHO_RISKY], "options": {"interactive_approvals": True}},
            pb.DispatchBatchRequest(),
        )
        unary = stub.Dispatch.future(request, metadata=metadata)
        line = watcher.stdout.readline()
        approval_id = line.split()[0]
        assert "tool=echo" in line and len(approval_id) == 32, line
        tg.cli("approve", approval_id)
        # The request's reason and arguments lines, then its end.
        ended = watcher.stdout.readline()
        while ended.startswith("    "):
            ended = watcher.stdout.readline()
        assert ended.startswith(approval_id) and "approved by alice" in ended, ended
        assert unary.result(timeout=15).all_succeeded
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def not_interactive(tg):
    batch = Batch(tg, [ECHO_RISKY], session="plain", interactive=False)
    r = results(batch.finish())[0]
    assert r["error_class"] == "BLOCKED", r
    assert r["content"] == "Hook requested confirmation (risky echo) but the session is not interactive", r


class RedisServer:
    """A real redis-server on a free port, without persistence; stopped by stop()."""

    def __init__(self, binary):
        self.port = free_port()
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("redis-server did not listen")

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


def cross_replica(binary, redis_server):
    """An agent on replica A; an approver's CLI on replica B lists and approves; A's call runs."""
    redis = RedisServer(redis_server)
    store = f'\n[sessions]\nstore = "redis://127.0.0.1:{redis.port}/0"\n'
    a, b = Toolgate(binary, store), Toolgate(binary, store)
    try:
        batch = Batch(a, [ECHO_RISKY], session="fleet")
        approval = batch.next("approval_requested")
        listed = b.cli("list").stdout
        assert approval.approval_id in listed, listed
        b.cli("approve", approval.approval_id, "--remember-session")
        r = results(batch.finish())[0]
        assert r["success"], r
        # The remembered answer holds on B for the same session.
        second = Batch(b, [{"id": "c2", "name": "echo", "arguments": {"q": "risky again"}}], session="fleet")
        assert second.next("approval_resolved").how == pb.ApprovalResolved.REMEMBERED
        assert second.finish().all_succeeded
        assert "no pending approvals" in a.cli("list").stdout
    finally:
        a.stop()
        b.stop()
        redis.stop()


SCENARIOS = [
    approve_by_cli,
    the_agent_cannot_answer_its_own,
    the_agent_answers_where_its_rule_lets_it,
    a_rule_can_forbid_remembering,
    edited_arguments,
    edited_arguments_are_validated,
    deny_by_cli,
    timeout,
    remember_session,
    other_tenant,
    client_leaves,
    parallel_is_not_held_up,
    sequential_waits,
    every_kind_of_asker,
    watch_and_unary,
    not_interactive,
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolgate", required=True)
    parser.add_argument("--redis-server", help="run the cross-replica scenario with this redis-server")
    parser.add_argument("scenarios", nargs="*")
    args = parser.parse_args()
    chosen = [s for s in SCENARIOS if not args.scenarios or s.__name__ in args.scenarios]
    tg = Toolgate(args.toolgate)
    failed = False
    try:
        for scenario in chosen:
            try:
                scenario(tg)
                print(f"ok {scenario.__name__}", flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is reported, then the rest run
                failed = True
                print(f"FAILED {scenario.__name__}: {type(e).__name__}: {e}", flush=True)
    finally:
        tg.stop()
    if args.redis_server and (not args.scenarios or "cross_replica" in args.scenarios):
        try:
            cross_replica(args.toolgate, args.redis_server)
            print("ok cross_replica", flush=True)
        except Exception as e:  # noqa: BLE001
            failed = True
            print(f"FAILED cross_replica: {type(e).__name__}: {e}", flush=True)
    if failed:
        print(tg.logs()[-6000:])
        sys.exit(1)


if __name__ == "__main__":
    main()
