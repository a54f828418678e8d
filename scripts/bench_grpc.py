#!/usr/bin/env python3
"""Runs the matrix of `scripts/bench-grpc` against servers it already started, prints the table.

For every case: prebuilds the gRPC request body (5-byte prefix + protobuf), sends those exact
bytes once with grpcio and checks the decoded reply, then drives it with h2load over h2c on one
connection at each concurrency (`-m`): a timed warm-up that also measures the rate, then runs of
a fixed number of requests (about BENCH_SECONDS long in all). Around each measured run it reads the
server's success counter (toolgate: GetToolHealth `successes`/`failures` of the tool; the echo
server: its Count method) and the server's CPU time (/proc/PID/stat), and fails the run when
h2load saw errors or the server's count did not grow by exactly requests × calls (h2load cannot
see grpc-status, so a gRPC error or a refused call would otherwise pass as a 200).

Ratios to the echo are paired: this machine's speed drifts by ±15% over tens of seconds (the
same echo measured 44k and 62k calls/s minutes apart at concurrency 16, with nothing else
running), so a ratio to one echo cell measured half a minute earlier swung by ±0.15. Each case
is measured in BENCH_PAIRS slices (default 6), each beside a slice of the echo at the same
concurrency (echo then case, then case then echo, alternating; with an even count as many pairs
run either way, so a steady drift cancels in the median); a cell's ratio is the median of its
slices' ratios, its rates and percentiles are over all its
slices, and the echo's row is over every echo slice at that concurrency.

With --toolgate-traced and --toolgate-sampled (toolgate exporting every trace, and one in a
hundred, to an OTLP collector), the 1-call and 8-call cases also run against those and a second
table gives the cost of tracing against the same cases untraced, from the same run.

With --toolgate-redis (a toolgate like --toolgate-named whose sessions live in a Redis store) and
--redis (that redis-server, ADDR@PID), the named-session cases (and an 8-call named
`DispatchBatch`) also run against it, each cell in slices interleaved with the same case on the
memory store, and a third table gives Redis against memory: throughput ratio (median of the
slices'), p50 added (median of the slices' differences), and around every measured Redis slice
the commands Redis served (INFO commandstats) and its CPU time, per batch. Before the matrix
the store's round-trip time is measured (redis-benchmark, one connection, PING); after it, the
throughput of what a batch of a live session sends (the load's reads and the SAVE script,
read from src/store/scripts.rs) under redis-benchmark, the ceiling of one Redis shard.

With --toolgate-console-off (a toolgate like --toolgate with `TOOLGATE_CONSOLE__ENABLED=false`,
so without the console's flight recorder, which records every batch's events), the 1-call and
8-call fresh-session cases also run against it, each cell in slices interleaved with the same
case on --toolgate (console on, the default), and a table gives console on against off:
throughput and p50 as the median of the slices' on ÷ off ratios, and toolgate's CPU per call.

Needs grpcio, grpcio-tools and protobuf (the test venv). Settings come from the environment:
BENCH_SECONDS (measured seconds per cell, default 5), BENCH_WARMUP (seconds, default 1),
BENCH_PAIRS (slices a cell is measured in, each beside an echo slice; default 6, keep it even),
BENCH_CONCURRENCY (default "1,16,64"), BENCH_SLEEP_CONCURRENCY (default "1,16"), BENCH_CASES
(comma-separated case keys to run; default all).
"""

import argparse
import csv
import datetime
import json
import math
import os
import pathlib
import re
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
SESSION = "bench"
# The PARALLEL case sleeps 3..10 ms: the longest call, so the ideal batch, is 10 ms. Identical
# calls (same tool and input) never run together (the planner serializes them so a burst cannot
# slip past loop detection), so 8 × `{"ms": 10}` would take 8 × 10 ms by design.
SLEEP_MS = 10
SLEEPS_MS = list(range(SLEEP_MS - 7, SLEEP_MS + 1))
ECHO_METHOD = "/bench.Echo/Echo"
# The traced toolgates: the server key, and how its cases are labelled.
TRACED = [("traced", "traced (100% sampled)"), ("sampled", "traced (1% sampled)")]
COUNT_METHOD = "/bench.Echo/Count"


def env_int(name, default):
    return int(os.environ.get(name, default))


def env_list(name, default):
    return [int(x) for x in os.environ.get(name, default).split(",") if x.strip()]


def load_stubs():
    """The toolgate stubs, generated from proto/ by the examples' own loader."""
    sys.path.insert(0, str(ROOT / "examples" / "python"))
    import toolgate_stubs

    return toolgate_stubs.load()


class Server:
    """A running server, from `ADDR@PID`: where to send requests, whose CPU time to read."""

    def __init__(self, spec):
        addr, _, pid = spec.rpartition("@")
        self.addr, self.pid = addr, int(pid)

    def cpu_seconds(self):
        fields = pathlib.Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Redis(Server):
    """The redis-server behind the Redis-store toolgate: its counters, CPU time, and redis-cli."""

    def __init__(self, spec):
        super().__init__(spec)
        self.host, _, self.port = self.addr.rpartition(":")

    def cli(self, *args):
        out = subprocess.run(["redis-cli", "-h", self.host, "-p", self.port, *args],
                             capture_output=True, text=True, check=True).stdout
        return out.strip()

    def snapshot(self):
        """Calls and µs per command (INFO commandstats) and the server's CPU seconds."""
        commands = {}
        for line in self.cli("INFO", "commandstats").splitlines():
            name, _, stats = line.strip().partition(":")
            if not name.startswith("cmdstat_"):
                continue
            fields = dict(f.split("=", 1) for f in stats.split(","))
            commands[name[len("cmdstat_"):]] = (int(fields["calls"]), int(fields["usec"]))
        # Socket reads Redis served: one per round trip of a lone client (a pipeline's commands
        # arrive in one read); fewer under load, when several clients' writes share a read.
        reads = 0
        for line in self.cli("INFO", "stats").splitlines():
            if line.startswith("total_reads_processed:"):
                reads = int(line.split(":", 1)[1])
        return {"commands": commands, "cpu_s": self.cpu_seconds(), "reads": reads}

    def benchmark(self, *args):
        """redis-benchmark's CSV rows as {test: {column: value}}."""
        out = subprocess.run(["redis-benchmark", "-h", self.host, "-p", self.port, "--csv",
                              *args], capture_output=True, text=True, check=True).stdout
        rows = list(csv.reader(out.splitlines()))
        header = rows[0]
        return {row[0]: dict(zip(header[1:], map(float, row[1:]))) for row in rows[1:] if row}


SCRIPT_CALLS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")


def store_used(before, after):
    """What Redis did between two snapshots: script calls and their µs inside Redis, the other
    commands (INFO itself excluded; commandstats also counts the commands a script runs), CPU
    seconds."""
    delta = {}
    for name, (calls, usec) in after["commands"].items():
        was = before["commands"].get(name, (0, 0))
        if name != "info" and calls > was[0]:
            delta[name] = (calls - was[0], usec - was[1])
    scripts = [delta.get(n, (0, 0)) for n in SCRIPT_CALLS]
    return {"scripts": sum(c for c, _ in scripts), "script_usec": sum(u for _, u in scripts),
            "others": sum(c for n, (c, _) in delta.items() if n not in SCRIPT_CALLS),
            "cpu_s": after["cpu_s"] - before["cpu_s"],
            # The two INFO calls (commandstats, stats) of the snapshot after are reads too.
            "reads": after.get("reads", 0) - before.get("reads", 0) - 2,
            "by_command": {n: c for n, (c, _) in delta.items()}}


def store_monitor(case, redis, checker, workdir, requests=1000, concurrency=16):
    """Which commands toolgate sends Redis per batch, from MONITOR (which marks a script's own
    commands `[0 lua]`) around `requests` batches of `case`: commandstats cannot tell a command
    sent from one a script ran. MONITOR is read on a socket of its own, line by line, so no
    line is lost in a client's buffer when it stops."""
    lines, stop = [], threading.Event()
    with socket.create_connection((redis.host, int(redis.port)), timeout=10) as conn:
        conn.sendall(b"MONITOR\r\n")
        stream = conn.makefile("rb")
        if stream.readline().strip() != b"+OK":
            return None

        def read():
            try:
                for line in stream:
                    lines.append(line.decode(errors="replace").strip())
                    if stop.is_set():
                        return
            except OSError:  # a quiet spell past the timeout: what was read is kept
                return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        before = settled_counters(checker, case)
        h2load(case, concurrency, workdir / f"{case.key}.body", "-n", str(requests))
        after = settled_counters(checker, case)
        stop.set()
        # A PING from elsewhere ends the reader's wait for a next line.
        redis.cli("PING")
        reader.join(timeout=10)
    sent, in_scripts = {}, 0
    for line in lines:
        # +1700000000.123456 [0 127.0.0.1:54321] "evalsha" "..." ..., or [0 lua] "hset" ...
        fields = line.split(" ", 3)
        if len(fields) < 4:
            continue
        if fields[2] == "lua]":
            in_scripts += 1
            continue
        command = fields[3].split(" ", 1)[0].strip('"').lower()
        sent[command] = sent.get(command, 0) + 1
    # The PING that woke the reader is redis-cli's, not toolgate's.
    sent["ping"] = sent.get("ping", 0) - 1
    sent = {name: count for name, count in sent.items() if count > 0}
    batches = (after[0] - before[0]) // case.calls
    return {"case": case.label, "concurrency": concurrency, "batches": batches,
            "sent": sent, "in_scripts": in_scripts}


class Case:
    """One request driven by h2load: its body, where it goes, how to check it."""

    def __init__(self, key, label, server, path, message, calls, tool=None, streaming=False,
                 expect_session=None, expect_results=None, base=None, against=None, probe=None,
                 twin=None):
        self.key, self.label, self.server, self.path = key, label, server, path
        # For a traced case: the untraced case it is compared with.
        self.base = base
        # For a twin case, measured slice by slice against another case rather than the echo:
        # that case (`against`), and which comparison it belongs to (`twin`): "redis" for a case
        # on the Redis store against the memory store (`probe` reads the store's counters around
        # each measured slice), "console" for a case on the console-off toolgate against the
        # default one.
        self.against, self.probe, self.twin = against, probe, twin
        self.message, self.calls, self.tool, self.streaming = message, calls, tool, streaming
        self.expect_session, self.expect_results = expect_session, expect_results
        payload = message.SerializeToString()
        self.body = struct.pack(">BI", 0, len(payload)) + payload


def openai_call(call_id, name, arguments):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def build_cases(pb, servers):
    from google.protobuf import json_format, struct_pb2

    def value(obj):
        return json_format.ParseDict(obj, struct_pb2.Value())

    def request(calls, session="", parallel=False):
        req = pb.DispatchBatchRequest(session_id=session, calls=[value(c) for c in calls])
        if parallel:
            req.options.mode = pb.DispatchOptions.PARALLEL
        return req

    one = [openai_call("call_1", "echo", {"text": "hello from h2load"})]
    # Distinct inputs, so the 8 calls are 8 operations, not a loop warning.
    eight = [openai_call(f"call_{i}", "echo", {"text": f"hello from h2load, call {i}"})
             for i in range(8)]
    sleeps = [openai_call(f"call_{i}", "sleep", {"ms": ms}) for i, ms in enumerate(SLEEPS_MS)]

    def echo_results(calls):
        return [json.loads(c["function"]["arguments"]) for c in calls]

    tg, named = servers["toolgate"], servers["toolgate_named"]
    dispatch, batch = "/toolgate.v1.ToolGate/Dispatch", "/toolgate.v1.ToolGate/DispatchBatch"
    traced = []
    for key, label in TRACED:
        if key not in servers:
            continue
        server = servers[key]
        traced += [
            Case(f"dispatch_1_{key}", f"`Dispatch`, 1 echo call, {label}", server, dispatch,
                 request(one), 1, "echo", expect_results=echo_results(one), base="dispatch_1"),
            Case(f"batch_1_{key}", f"`DispatchBatch`, 1 echo call, {label}", server, batch,
                 request(one), 1, "echo", streaming=True, expect_results=echo_results(one),
                 base="batch_1"),
            Case(f"dispatch_8_{key}", f"`Dispatch`, 8 echo calls, {label}", server, dispatch,
                 request(eight), 8, "echo", expect_results=echo_results(eight),
                 base="dispatch_8"),
        ]
    stored = []
    if "toolgate_redis" in servers:
        on_redis, probe = servers["toolgate_redis"], servers["redis"].snapshot
        named_eight = Case("batch_8_named", "`DispatchBatch`, 8 echo calls, session `bench` \\*",
                           named, batch, request(eight, SESSION), 8, "echo", streaming=True,
                           expect_session=SESSION, expect_results=echo_results(eight))
        stored = [named_eight] + [
            Case(f"{key}_redis", label, on_redis, path, request(calls, SESSION),
                 len(calls), "echo", streaming=path == batch, expect_session=SESSION,
                 expect_results=echo_results(calls), against=key, probe=probe, twin="redis")
            for key, label, path, calls in [
                ("dispatch_1_named", "`Dispatch`, 1 echo call, named", dispatch, one),
                ("batch_1_named", "`DispatchBatch`, 1 echo call, named", batch, one),
                ("batch_8_named", "`DispatchBatch`, 8 echo calls, named", batch, eight),
            ]]
    console = []
    if "toolgate_console_off" in servers:
        quiet = servers["toolgate_console_off"]
        console = [
            Case(f"{key}_console_off", f"{label}, console off", quiet, path, request(calls),
                 len(calls), "echo", streaming=path == batch, expect_results=echo_results(calls),
                 against=key, twin="console")
            for key, label, path, calls in [
                ("dispatch_1", "`Dispatch`, 1 echo call, fresh session", dispatch, one),
                ("batch_1", "`DispatchBatch`, 1 echo call, fresh session", batch, one),
                ("dispatch_8", "`Dispatch`, 8 echo calls, fresh session", dispatch, eight),
            ]]
    return traced + stored + console + [
        Case("echo", "bare tonic echo (baseline)", servers["echo"], ECHO_METHOD,
             value(one[0]), 1),
        Case("dispatch_1", "`Dispatch`, 1 echo call, fresh session", tg, dispatch,
             request(one), 1, "echo", expect_results=echo_results(one)),
        Case("batch_1", "`DispatchBatch`, 1 echo call, fresh session", tg, batch,
             request(one), 1, "echo", streaming=True, expect_results=echo_results(one)),
        Case("dispatch_1_named", "`Dispatch`, 1 echo call, session `bench` \\*", named, dispatch,
             request(one, SESSION), 1, "echo", expect_session=SESSION,
             expect_results=echo_results(one)),
        Case("batch_1_named", "`DispatchBatch`, 1 echo call, session `bench` \\*", named, batch,
             request(one, SESSION), 1, "echo", streaming=True, expect_session=SESSION,
             expect_results=echo_results(one)),
        Case("dispatch_8", "`Dispatch`, 8 echo calls, fresh session", tg, dispatch,
             request(eight), 8, "echo", expect_results=echo_results(eight)),
        Case("parallel_sleep", "`DispatchBatch` PARALLEL, 8 sleep calls", tg, batch,
             request(sleeps, parallel=True), 8, "sleep", streaming=True,
             expect_results=[{"slept_ms": ms} for ms in SLEEPS_MS]),
    ]


class Checker:
    """Sends a case's exact body once and checks the reply; reads success counters."""

    def __init__(self, pb, pb_grpc):
        import grpc

        self.grpc, self.pb, self.pb_grpc, self.channels = grpc, pb, pb_grpc, {}

    def channel(self, server):
        if server.addr not in self.channels:
            self.channels[server.addr] = self.grpc.insecure_channel(server.addr)
        return self.channels[server.addr]

    def verify(self, case):
        """Raises AssertionError unless the server answers the case's body as expected."""
        from google.protobuf import json_format, struct_pb2

        ch, raw = self.channel(case.server), case.body[5:]
        if case.key == "echo":
            reply = struct_pb2.Value.FromString(ch.unary_unary(case.path)(raw, timeout=10))
            assert reply == case.message, f"echo answered {reply}"
            return
        if case.streaming:
            events = [self.pb.DispatchEvent.FromString(m)
                      for m in ch.unary_stream(case.path)(raw, timeout=10)]
            kinds = [e.WhichOneof("event") for e in events]
            assert kinds and kinds[-1] == "result" and kinds.count("result") == 1, (
                f"the stream does not end with exactly one result: {kinds}")
            result = events[-1].result
        else:
            result = self.pb.BatchResult.FromString(ch.unary_unary(case.path)(raw, timeout=10))
        summary = json_format.MessageToJson(result)
        assert result.outcome == self.pb.BatchResult.COMPLETED, summary
        assert result.all_succeeded and result.errors == 0, summary
        assert result.count == case.calls == len(result.results), summary
        for res in result.results:
            assert res.success and res.tool == case.tool, summary
        got = [json_format.MessageToDict(r.result) for r in result.results]
        assert got == case.expect_results, f"results {got} != {case.expect_results}"
        if case.expect_session:
            assert result.session_id == case.expect_session, summary
        else:
            assert result.session_id and result.session_id != SESSION, summary

    def counters(self, case):
        """(successes, failures) as the server counts them for this case's tool."""
        from google.protobuf import struct_pb2

        ch = self.channel(case.server)
        if case.tool is None:
            count = ch.unary_unary(COUNT_METHOD,
                                   request_serializer=struct_pb2.Value.SerializeToString,
                                   response_deserializer=struct_pb2.Value.FromString)
            return int(count(struct_pb2.Value(), timeout=10).number_value), 0
        stub = self.pb_grpc.ToolGateStub(ch)
        reply = stub.GetToolHealth(self.pb.GetToolHealthRequest(tool=case.tool), timeout=10)
        for health in reply.tools:
            if health.tool == case.tool:
                return health.successes, health.failures
        return 0, 0


def machine_busy_seconds():
    """CPU seconds the whole machine spent busy (all cores), from /proc/stat."""
    fields = [int(x) for x in pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def percentile(sorted_values, p):
    """Nearest-rank percentile."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


MIN_REQUESTS = 50
H2LOAD_SUMMARY = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                            r"(\d+) failed, (\d+) errored, (\d+) timeout")
H2LOAD_CODES = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")


def h2load(case, concurrency, body, *limits):
    """Runs h2load on one h2c connection with `concurrency` streams; returns the process."""
    return subprocess.run(
        ["h2load", "-c", "1", "-t", "1", "-m", str(concurrency), *limits,
         "-H", "content-type: application/grpc", "-H", "te: trailers",
         "-d", str(body), f"http://{case.server.addr}{case.path}"],
        capture_output=True, text=True, check=False)


def settled_counters(checker, case):
    """The counters once they stop moving (batches cut off by a timed run finish or cancel)."""
    last = checker.counters(case)
    for _ in range(50):
        time.sleep(0.1)
        now = checker.counters(case)
        if now == last:
            return now
        last = now
    return last


def warm_up(case, concurrency, workdir, warmup):
    """A timed h2load run; returns the rate it measured (requests per second) and its problems."""
    body = workdir / f"{case.key}.body"
    warm = h2load(case, concurrency, body, "-D", str(warmup))
    rate = H2LOAD_SUMMARY.search(warm.stdout)
    if warm.returncode != 0 or not rate:
        return None, [f"warm-up: h2load exited {warm.returncode}:\n{warm.stdout}{warm.stderr}"]
    return int(rate.group(4)) / warmup, []


def run_cell(case, concurrency, checker, workdir, seconds, warmup, rate=None, part=None):
    """Runs one (case, concurrency); returns the cell's figures and its problems.

    A timed warm-up run measures the rate (unless `rate` is given); the measured run then sends
    a fixed number of requests (rate × seconds), so that every request it starts also finishes
    and the server's success counter must grow by exactly requests × calls.
    """
    tag = f"{case.key}-c{concurrency}" + (f"-{part}" if part is not None else "")
    body = workdir / f"{case.key}.body"
    log = workdir / f"{tag}.tsv"
    problems = []

    if rate is None:
        rate, problems = warm_up(case, concurrency, workdir, warmup)
        if rate is None:
            return None, problems
    requests = max(MIN_REQUESTS, round(rate * seconds))

    before = settled_counters(checker, case)
    store0 = case.probe() if case.probe else None
    cpu0, children0, busy0 = case.server.cpu_seconds(), os.times(), machine_busy_seconds()
    t0 = time.monotonic()
    proc = h2load(case, concurrency, body, "-n", str(requests), "--log-file", str(log))
    wall = time.monotonic() - t0
    cpu1, children1, busy1 = case.server.cpu_seconds(), os.times(), machine_busy_seconds()
    after = checker.counters(case)
    # Every batch has saved before it is answered, so the store's counters are final here.
    store = store_used(store0, case.probe()) if case.probe else None
    (workdir / f"{tag}.h2load.txt").write_text(proc.stdout + proc.stderr)

    req, codes = H2LOAD_SUMMARY.search(proc.stdout), H2LOAD_CODES.search(proc.stdout)
    if proc.returncode != 0 or not req or not codes:
        problems.append(f"h2load exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        return None, problems
    succeeded, failed, errored, timeout = map(int, req.groups()[3:])
    ok_2xx, not_2xx = int(codes.group(1)), sum(map(int, codes.groups()[1:]))
    if (failed or errored or timeout or not_2xx or succeeded != requests
            or ok_2xx != requests):
        problems.append(f"h2load sent {requests}: {req.group(0)}; {codes.group(0)}")

    times_us, statuses, first_start, last_end = [], {}, None, None
    for line in log.read_text().splitlines():
        start, status, elapsed = (int(x) for x in line.split("\t")[:3])
        statuses[status] = statuses.get(status, 0) + 1
        times_us.append(elapsed)
        first_start = start if first_start is None else min(first_start, start)
        last_end = start + elapsed if last_end is None else max(last_end, start + elapsed)
    log.unlink()
    times_us.sort()
    if statuses != {200: requests}:
        problems.append(f"the per-request log has statuses {statuses}, not {requests} × 200")

    # h2load sees only the HTTP status; a gRPC error or a refused call is a 200 to it.
    grew, failures = after[0] - before[0], after[1] - before[1]
    want = requests * case.calls
    if grew != want or failures:
        problems.append(
            f"the server counted {grew} successes and {failures} failures of "
            f"`{case.tool or 'echo'}`, expected {requests} requests × {case.calls} calls = {want}")

    span = (last_end - first_start) / 1e6 if times_us else wall
    rps = len(times_us) / span
    if not times_us:
        problems.append("h2load logged no request")
        return None, problems
    client_cpu = (children1.children_user + children1.children_system
                  - children0.children_user - children0.children_system)
    server_cpu = cpu1 - cpu0
    # Whatever else ran on the machine meanwhile (other builds, ...): a noisy cell shows here.
    other_cpu = max(0.0, (busy1 - busy0) - server_cpu - client_cpu)
    return {
        "case": case.key, "concurrency": concurrency, "calls": case.calls,
        "requests": requests, "seconds": span,
        "rps": rps, "calls_per_s": rps * case.calls,
        "p50_us": percentile(times_us, 50), "p99_us": percentile(times_us, 99),
        "server_cpu_pct": 100 * server_cpu / wall, "client_cpu_pct": 100 * client_cpu / wall,
        "other_cpu_pct": 100 * other_cpu / wall,
        "server_successes": grew, "h2load_summary": req.group(0),
        "times_us": times_us, "server_cpu_s": server_cpu, "client_cpu_s": client_cpu,
        "other_cpu_s": other_cpu, "wall_s": wall, "store": store,
    }, problems


def merged(slices):
    """One cell from several slices of it: rates over their summed spans, percentiles over all
    their latencies, CPU over their summed wall time."""
    first = slices[0]
    times = sorted(t for s in slices for t in s["times_us"])
    span = sum(s["seconds"] for s in slices)
    wall = sum(s["wall_s"] for s in slices)
    requests = sum(s["requests"] for s in slices)
    calls = first["calls"]
    return {
        "case": first["case"], "concurrency": first["concurrency"], "calls": calls,
        "requests": requests,
        "seconds": span, "rps": requests / span, "calls_per_s": requests / span * calls,
        "p50_us": percentile(times, 50), "p99_us": percentile(times, 99),
        "server_cpu_pct": 100 * sum(s["server_cpu_s"] for s in slices) / wall,
        "client_cpu_pct": 100 * sum(s["client_cpu_s"] for s in slices) / wall,
        "other_cpu_pct": 100 * sum(s["other_cpu_s"] for s in slices) / wall,
        "server_successes": sum(s["server_successes"] for s in slices),
        "h2load_summary": "; ".join(s["h2load_summary"] for s in slices),
        "slices": len(slices),
        "server_cpu_s": sum(s["server_cpu_s"] for s in slices),
        "store": merged_store([s.get("store") for s in slices]),
    }


def merged_store(stores):
    """The store's figures summed over slices; None when the slices had none."""
    if not stores or None in stores:
        return None
    by_command = {}
    for s in stores:
        for name, calls in s["by_command"].items():
            by_command[name] = by_command.get(name, 0) + calls
    return {key: sum(s[key] for s in stores) for key in ("scripts", "script_usec", "others",
                                                         "cpu_s", "reads")} | {"by_command": by_command}


def run_paired(case, echo, concurrency, checker, workdir, seconds, warmup, pairs, inverse=False):
    """Measures `case` in `pairs` slices, each beside an echo slice (order alternating); returns
    the case's merged cell (with the median of the slices' ratios to their echo), the echo's
    slices, and the problems. With `inverse`, the cell also has the median of the slices'
    inverse ratios, echo ÷ case (not the inverse of the median when the count is even)."""
    rates, problems = {}, []
    for c in (echo, case):
        rates[c.key], found = warm_up(c, concurrency, workdir, warmup)
        problems += found
        if rates[c.key] is None:
            return None, [], problems
    case_slices, echo_slices, ratios, p50_ratios, p50_added = [], [], [], [], []
    for i in range(pairs):
        order = (echo, case) if i % 2 == 0 else (case, echo)
        got = {}
        for c in order:
            cell, found = run_cell(c, concurrency, checker, workdir, seconds / pairs, warmup,
                                   rate=rates[c.key], part=f"{case.key}-{i}")
            problems += [f"{c.key} slice {i}: {p}" for p in found]
            got[c.key] = cell
        if got[case.key] is None or got[echo.key] is None:
            continue
        case_slices.append(got[case.key])
        echo_slices.append(got[echo.key])
        ratios.append(got[case.key]["calls_per_s"] / got[echo.key]["calls_per_s"])
        p50_ratios.append(got[case.key]["p50_us"] / got[echo.key]["p50_us"])
        p50_added.append(got[case.key]["p50_us"] - got[echo.key]["p50_us"])
    if not case_slices:
        return None, echo_slices, problems
    cell = merged(case_slices)
    cell["ratio"] = statistics.median(ratios)
    cell["p50_ratio"] = statistics.median(p50_ratios)
    cell["p50_added_us"] = statistics.median(p50_added)
    cell["slice_ratios"] = [round(r, 3) for r in ratios]
    cell["slice_p50_ratios"] = [round(r, 3) for r in p50_ratios]
    if inverse:
        cell["against_ratio"] = statistics.median(1 / r for r in ratios)
        cell["against_p50_ratio"] = statistics.median(1 / r for r in p50_ratios)
    return cell, echo_slices, problems


def fmt_us(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def fmt_rate(x):
    return f"{x:,.0f}".replace(",", " ")


def render(results, cases, seconds, warmup, meta):
    by = {(r["case"], r["concurrency"]): r for r in results}
    lines = [
        f"gRPC benchmark, {meta['date']}: {meta['machine']}; toolgate `{meta['toolgate']}`; "
        f"{meta['h2load']}, h2c, one connection, `-m` = concurrency, {warmup} s warm-up + "
        f"about {seconds} s measured per cell in {meta['pairs']} slices, each beside a slice of "
        f"the echo (order alternating); a ratio is the median of the slices' ratios, the echo's "
        f"row is over all its slices at that concurrency. Server CPU is % of one core (utime+stime over the "
        f"cell's wall time); h2load runs on the same cores; \"other\" is everything else the "
        f"machine ran during the cell (more than a few % means a noisy cell). \\* The "
        f"named-session rows ran on a second toolgate with "
        f"`TOOLGATE_LOOP_DETECTION__STOP_AFTER=0`: h2load repeats one identical call, which "
        f"the default loop detection refuses every 11th time in a session; every other row "
        f"ran on the embedded default config.",
        "",
        "| Case | Conc. | req/s | calls/s | p50 | p99 | server CPU | h2load CPU | other CPU "
        "| calls/s ÷ echo | p50 ÷ echo |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for case in cases:
        if case.key == "parallel_sleep" or case.base or case.against:
            continue
        for (key, conc), r in sorted(by.items(), key=lambda kv: kv[0][1]):
            if key != case.key:
                continue
            ratio = p50_ratio = "—"
            if "ratio" in r:
                ratio = f"{r['ratio']:.2f}"
                p50_ratio = f"{r['p50_ratio']:.1f}"
            lines.append(
                f"| {case.label} | {conc} | {fmt_rate(r['rps'])} | {fmt_rate(r['calls_per_s'])} "
                f"| {fmt_us(r['p50_us'])} | {fmt_us(r['p99_us'])} | {r['server_cpu_pct']:.0f}% "
                f"| {r['client_cpu_pct']:.0f}% | {r['other_cpu_pct']:.0f}% "
                f"| {ratio} | {p50_ratio} |")
    traced = [c for c in cases if c.base]
    if traced:
        lines += [
            "",
            "The cost of tracing: the same cases on toolgates that export every trace (100%) or "
            "one in a hundred (1%, `traceidratio` 0.01) over OTLP/gRPC to a collector on this "
            "machine (`tests/otel/otlp_receiver.py --quiet`: the official Python OTLP stubs, "
            "counting), against the untraced rows above, same run.",
            "",
            "| Case | Conc. | calls/s | p50 | p99 | server CPU | calls/s ÷ untraced "
            "| p50 ÷ untraced |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for case in traced:
            for (key, conc), r in sorted(by.items(), key=lambda kv: kv[0][1]):
                if key != case.key:
                    continue
                base = by.get((case.base, conc))
                ratio = p50_ratio = "—"
                if base:
                    ratio = f"{r['calls_per_s'] / base['calls_per_s']:.2f}"
                    p50_ratio = f"{r['p50_us'] / base['p50_us']:.2f}"
                lines.append(
                    f"| {case.label} | {conc} | {fmt_rate(r['calls_per_s'])} "
                    f"| {fmt_us(r['p50_us'])} | {fmt_us(r['p99_us'])} "
                    f"| {r['server_cpu_pct']:.0f}% | {ratio} | {p50_ratio} |")
    stored = [c for c in cases if c.twin == "redis"]
    if stored and "redis" in meta:
        lines += [""] + render_store(by, stored, meta["redis"])
    console = [c for c in cases if c.twin == "console"]
    if console:
        lines += [""] + render_console(by, console, {c.key: c.label for c in cases})
    sleep = [r for r in results if r["case"] == "parallel_sleep"]
    if sleep:
        lines += [
            "",
            f"`DispatchBatch` PARALLEL of 8 `sleep` calls of {SLEEPS_MS[0]}..{SLEEPS_MS[-1]} ms "
            f"(distinct inputs: identical calls run one after another by design), fresh "
            f"session: wall time per batch against the ideal {SLEEP_MS} ms (the longest call).",
            "",
            "| Conc. | batches/s | calls/s | p50 wall | p99 wall | p50 ÷ ideal | server CPU "
            "| other CPU |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in sorted(sleep, key=lambda r: r["concurrency"]):
            lines.append(
                f"| {r['concurrency']} | {fmt_rate(r['rps'])} | {fmt_rate(r['calls_per_s'])} "
                f"| {fmt_us(r['p50_us'])} | {fmt_us(r['p99_us'])} "
                f"| {r['p50_us'] / (SLEEP_MS * 1000):.2f} | {r['server_cpu_pct']:.0f}% "
                f"| {r['other_cpu_pct']:.0f}% |")
    return "\n".join(lines) + "\n"


def render_console(by, cases, labels):
    """The console table: each case on the default toolgate (console on) against the same case
    on the console-off toolgate, slices interleaved."""
    lines = [
        "The cost of the console's flight recorder: the same cases on the default toolgate "
        "(console **on**: `[console] enabled = true`, the default, with the admin listener on, "
        "so the dispatcher records every batch's events) and on a toolgate like it with "
        "`TOOLGATE_CONSOLE__ENABLED=false` (console **off**, no recorder), each cell in slices "
        "interleaved with the other's (order alternating), same run. On ÷ off is the median of "
        "the slices' on ÷ off ratios: below 1 for calls/s, above 1 for p50, is what the "
        "recorder costs. Server CPU per call is that toolgate's utime+stime over its measured "
        "slices ÷ the calls they made.",
        "",
        "| Case | Conc. | calls/s on | calls/s off | on ÷ off calls/s | p50 on ÷ off "
        "| server CPU / call on | server CPU / call off |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for case in cases:
        for (key, conc), r in sorted(by.items(), key=lambda kv: kv[0][1]):
            if key != case.key or "against" not in r or "against_ratio" not in r:
                continue
            on, calls = r["against"], r["calls"]
            lines.append(
                f"| {labels.get(case.against, case.label)} | {conc} "
                f"| {fmt_rate(on['rps'] * calls)} | {fmt_rate(r['calls_per_s'])} "
                f"| {r['against_ratio']:.3f} | {r['against_p50_ratio']:.3f} "
                f"| {on['server_cpu_s'] * 1e6 / (on['requests'] * calls):.1f} µs "
                f"| {r['server_cpu_s'] * 1e6 / (r['requests'] * calls):.1f} µs |")
    return lines


def render_store(by, cases, redis):
    """The Redis-store table: each case against the same case on the memory store, then the
    store's round trip and one shard's ceiling."""
    rtt = redis["rtt"]
    lines = [
        f"Named sessions on a Redis store (redis-server {redis['version']} on loopback, "
        f"`--save \"\" --appendonly no`; a toolgate like the \\* one plus "
        f"`TOOLGATE_SESSIONS__STORE`) against the same case on the memory store, each cell in "
        f"slices interleaved with the memory store's: the ratio is the median of the slices' "
        f"ratios, \"p50 added\" the median of the slices' differences. Commands and Redis CPU "
        f"are counted around every measured Redis slice (INFO commandstats, /proc), per batch; "
        f"µs per script is Redis's own time in EVALSHA (commandstats usec); other commands "
        f"are those the scripts ran and the load's reads; reads are the "
        f"socket reads Redis served (INFO stats total_reads_processed), at concurrency 1 the "
        f"round trips per batch. Round trip: "
        f"redis-benchmark, one connection, PING, p50 {rtt['p50_us']:.0f} µs (mean "
        f"{rtt['mean_us']:.0f} µs).",
        "",
        "| Case | Conc. | memory batches/s | Redis batches/s | Redis ÷ memory | memory p50 "
        "| Redis p50 | p50 added | added ÷ RTT | Redis p99 | EVALSHA / batch "
        "| other commands / batch | Redis reads / batch | µs per script | Redis CPU / batch "
        "| toolgate CPU / batch, memory → Redis |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: | ---: |",
    ]
    for case in cases:
        for (key, conc), r in sorted(by.items(), key=lambda kv: kv[0][1]):
            if key != case.key or "against" not in r or not r["store"]:
                continue
            m, store, batches = r["against"], r["store"], r["requests"]
            per_script = store["script_usec"] / store["scripts"] if store["scripts"] else 0
            lines.append(
                f"| {case.label} | {conc} | {fmt_rate(m['rps'])} | {fmt_rate(r['rps'])} "
                f"| {r['ratio']:.2f} | {fmt_us(m['p50_us'])} | {fmt_us(r['p50_us'])} "
                f"| {r['p50_added_us']:+.0f} µs | {r['p50_added_us'] / rtt['p50_us']:.1f} "
                f"| {fmt_us(r['p99_us'])} | {store['scripts'] / batches:.2f} "
                f"| {store['others'] / batches:.1f} | {store['reads'] / batches:.2f} "
                f"| {per_script:.1f} µs "
                f"| {store['cpu_s'] * 1e6 / batches:.1f} µs "
                f"| {m['server_cpu_s'] * 1e6 / m['requests']:.0f} → "
                f"{r['server_cpu_s'] * 1e6 / batches:.0f} µs |")
    monitor = redis.get("monitor")
    if monitor:
        sent = ", ".join(f"{n} {c}" for n, c in sorted(monitor["sent"].items()))
        per_batch = sum(monitor["sent"].values()) / max(1, monitor["batches"])
        lines += [
            "",
            f"Commands toolgate sent Redis (MONITOR, {monitor['batches']} batches of "
            f"{monitor['case']} at concurrency {monitor['concurrency']}): {sent or 'none'}, "
            f"{per_batch:.2f} a batch; the scripts ran {monitor['in_scripts']} commands inside "
            f"Redis.",
        ]
    shard = redis.get("shard")
    if shard and shard.get("alone"):
        alone = shard["alone"]
        floor = alone["window"] + alone["save"]
        lines += [
            "",
            f"A lone client's two round trips (redis-benchmark, one connection): the window's "
            f"GETRANGE, p50 {alone['window']:.0f} µs (the load's round trip is at least that), "
            f"then the SAVE script, p50 {alone['save']:.0f} µs: {floor:.0f} µs, "
            f"{floor / rtt['p50_us']:.2f} RTT, the least any client adds at concurrency 1 "
            f"without overlapping them with work of its own.",
        ]
    if shard:
        lines += [
            "",
            f"One Redis shard's ceiling on this machine: redis-benchmark running what a batch "
            f"of a live session sends, on one session's keys, {shard['requests']} each, window "
            f"full (100 slots): the load's reads (HMGET and PTTL of the meta, GETRANGE of the "
            f"window) and the SAVE script (src/store/scripts.rs) of a 1-call batch (one slot, "
            f"one memory entry). Each runs on its own, so batches/s is a lower bound (toolgate "
            f"pipelines the three reads). And the LOAD script on a live session, which a batch "
            f"runs only to make its session or renew its data keys' expiry:",
            "",
            "| redis-benchmark | HMGET/s | PTTL/s | GETRANGE/s | SAVE scripts/s "
            "| batches/s (reads + SAVE) | p50 SAVE | LOAD scripts/s |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for run in shard["runs"]:
            save = run["save"]
            opened = [run[name] for name in ("hmget", "pttl", "window")]
            batches = 1 / (1 / save["rps"] + sum(1 / o["rps"] for o in opened))
            lines.append(
                f"| `{run['args']}` | "
                + " | ".join(fmt_rate(o["rps"]) for o in opened)
                + f" | {fmt_rate(save['rps'])} | {fmt_rate(batches)} "
                f"| {fmt_us(save['p50_latency_ms'] * 1000)} | {fmt_rate(run['load']['rps'])} |")
    return lines


SCRIPT = re.compile(r"const (LOAD|SAVE): &str = concat!\((.*?)\n\);", re.S)
RAW = re.compile(r'r"(.*?)"', re.S)
MACRO = re.compile(r"macro_rules! (\w+) \{\s*\(\) => \{\s*(r\".*?\")\s*\};", re.S)


def store_scripts():
    """LOAD and SAVE as Redis runs them: src/store/scripts.rs's `concat!` of raw strings and
    text macros, expanded."""
    text = (ROOT / "src" / "store" / "scripts.rs").read_text()
    macros = {name: RAW.search(body).group(1) for name, body in MACRO.findall(text)}
    scripts = {}
    for name, parts in SCRIPT.findall(text):
        for macro, body in macros.items():
            parts = parts.replace(f"{macro}!()", f'r"{body}"')
        scripts[name] = "".join(RAW.findall(parts))
    return scripts


def store_rtt(redis):
    """The store's round trip: PING on one connection, no pipelining."""
    ping = redis.benchmark("-c", "1", "-n", "20000", "-t", "ping")["PING_MBULK"]
    return {"p50_us": ping["p50_latency_ms"] * 1000, "mean_us": ping["avg_latency_ms"] * 1000,
            "rps": ping["rps"]}


def store_ceiling(redis, requests=100000):
    """What a batch of a live session sends (the load's reads, the SAVE script), the LOAD script,
    and a lone client's two round trips, under redis-benchmark on one session's keys."""
    scripts = store_scripts()
    if set(scripts) != {"LOAD", "SAVE"}:
        print("src/store/scripts.rs: LOAD and SAVE scripts not found; no shard ceiling",
              file=sys.stderr)
        return None
    sha = {name: redis.cli("SCRIPT", "LOAD", text) for name, text in scripts.items()}
    # The keys and arguments `store/session.rs` sends (KEYS and ARGV as scripts.rs lists them).
    keys = [f"toolgate:{{bench:redis-benchmark}}:{part}"
            for part in ("meta", "window", "memory", "files", "dirs", "answers")]
    ttl, data_ttl, now = "1800000", "3600000", str(int(time.time() * 1000))
    generation = "redis-benchmark-0"
    load = ["EVALSHA", sha["LOAD"], "6", *keys, ttl, now, "bench", "redis-benchmark",
            generation, data_ttl]
    entry = 'tool=echo; input={"text":"hello from h2load"}; result={"text":"hello from h2load"}'
    # A 1-call batch's save: one pushed 25-byte slot and one memory entry, in `keep` mode with
    # nothing to grant (the session's allowance, set below, holds its entries), as a live
    # session's save within its tenant's memory bound runs.
    save = ["EVALSHA", sha["SAVE"], "6", *keys, generation, ttl, now, data_ttl, "100", "100",
            "25", "0", "keep", "1", "p" + "s" * 25, entry]
    redis.cli("DEL", *keys)
    redis.cli(*load)
    redis.cli("HSET", keys[0], "memory_allowed", str(1 << 40))
    if redis.cli(*save) != "1":
        print("src/store/scripts.rs: the SAVE script refused the benchmark's arguments; "
              "no shard ceiling", file=sys.stderr)
        redis.cli("DEL", *keys)
        return None
    runs = []
    # A batch of a live session opens it with reads alone (store/session.rs `load`), in one
    # pipeline: the meta's generation and data expiry, the meta's time left, the newest 100 slots.
    opened = (("hmget", ["HMGET", keys[0], "generation", "data_until"]),
              ("pttl", ["PTTL", keys[0]]),
              ("window", ["GETRANGE", keys[1], str(-100 * 25), "-1"]))
    for args in (["-c", "50"], ["-c", "50", "-P", "16"]):
        # SAVE first: it fills the window, so every read takes a full one.
        got = {}
        for name, command in (("save", save), ("load", load), *opened):
            got[name] = next(iter(redis.benchmark(*args, "-n", str(requests), *command).values()))
        runs.append({"args": "redis-benchmark " + " ".join(args), **got})
    # What a lone client waits for a batch's two round trips, with nothing of its own: the
    # load's round trip is at least that of its window read, and the save's is the script's.
    alone = {name: next(iter(redis.benchmark("-c", "1", "-n", "20000", *command).values()))
             ["p50_latency_ms"] * 1000 for name, command in (("save", save), ("window", opened[2][1]))}
    redis.cli("DEL", *keys)
    return {"requests": requests, "runs": runs, "alone": alone}


def machine():
    model = "unknown CPU"
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} cores ({model})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolgate", required=True, help="ADDR@PID, embedded default config")
    parser.add_argument("--toolgate-named", required=True,
                        help="ADDR@PID, for the named-session cases")
    parser.add_argument("--echo", required=True, help="ADDR@PID of grpc_echo")
    parser.add_argument("--toolgate-traced", help="ADDR@PID, exporting every trace")
    parser.add_argument("--toolgate-sampled", help="ADDR@PID, exporting one trace in 100")
    parser.add_argument("--toolgate-redis",
                        help="ADDR@PID, like --toolgate-named with its sessions in Redis")
    parser.add_argument("--redis", help="ADDR@PID of the redis-server behind --toolgate-redis")
    parser.add_argument("--toolgate-console-off",
                        help="ADDR@PID, like --toolgate with TOOLGATE_CONSOLE__ENABLED=false")
    parser.add_argument("--toolgate-label", required=True)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()
    seconds, warmup = env_int("BENCH_SECONDS", 5), env_int("BENCH_WARMUP", 1)
    concurrency = env_list("BENCH_CONCURRENCY", "1,16,64")
    sleep_concurrency = env_list("BENCH_SLEEP_CONCURRENCY", "1,16")

    pb, pb_grpc = load_stubs()
    servers = {"toolgate": Server(args.toolgate),
               "toolgate_named": Server(args.toolgate_named),
               "echo": Server(args.echo)}
    if args.toolgate_traced:
        servers["traced"] = Server(args.toolgate_traced)
    if args.toolgate_sampled:
        servers["sampled"] = Server(args.toolgate_sampled)
    if args.toolgate_redis and args.redis:
        servers["toolgate_redis"] = Server(args.toolgate_redis)
        servers["redis"] = Redis(args.redis)
    if args.toolgate_console_off:
        servers["toolgate_console_off"] = Server(args.toolgate_console_off)
    cases = build_cases(pb, servers)
    by_key = {c.key: c for c in cases}
    wanted = {k.strip() for k in os.environ.get("BENCH_CASES", "").split(",") if k.strip()}
    if wanted:
        # A twin case (Redis store, console off) is measured against its case, which must run
        # too.
        wanted |= {c.against for c in cases if c.against and c.key in wanted}
        cases = [c for c in cases
                 if c.key in wanted or (c.base and c.base in wanted)
                 or (c.against and c.against in wanted)]
    checker = Checker(pb, pb_grpc)
    workdir = args.out / "raw"
    workdir.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    problems = []
    for case in cases:
        (workdir / f"{case.key}.body").write_bytes(case.body)
        try:
            checker.verify(case)
            print(f"checked one reply: {case.label}", flush=True)
        except Exception as e:  # an assertion, or the RPC failed
            problems.append(f"{case.key}: the reply check failed: {e}")
    if problems:
        sys.exit("\n".join(problems))

    pairs = max(1, env_int("BENCH_PAIRS", 6))
    echo = next((c for c in cases if c.key == "echo"), None)
    results = []
    redis_meta = None
    if "redis" in servers and any(c.twin == "redis" for c in cases):
        redis = servers["redis"]
        version = re.search(r"redis_version:(\S+)", redis.cli("INFO", "server"))
        redis_meta = {"version": version.group(1) if version else "?", "rtt": store_rtt(redis)}
        print(f"redis round trip: p50 {redis_meta['rtt']['p50_us']:.0f} µs, "
              f"mean {redis_meta['rtt']['mean_us']:.0f} µs", flush=True)

    def report(case, conc, cell, cell_problems):
        for p in cell_problems:
            problems.append(f"{case.key} at concurrency {conc}: {p}")
            print(f"PROBLEM {case.key} c={conc}: {p}", file=sys.stderr, flush=True)
        if cell:
            cell.pop("times_us", None)
            results.append(cell)
            ratio = (f"  ÷ {case.against or 'echo'} {cell['ratio']:.2f} {cell['slice_ratios']}"
                     if "ratio" in cell else "")
            if "against_ratio" in cell:
                ratio += f"  ({case.against} ÷ this {cell['against_ratio']:.3f})"
            print(f"{case.key:>18} c={conc:<3} {cell['rps']:>9.0f} req/s  "
                  f"p50 {fmt_us(cell['p50_us']):>9}  p99 {fmt_us(cell['p99_us']):>9}  "
                  f"server CPU {cell['server_cpu_pct']:.0f}%  other {cell['other_cpu_pct']:.0f}%"
                  f"{ratio}", flush=True)

    for conc in concurrency:
        echo_slices = []
        for case in cases:
            if case.key in ("echo", "parallel_sleep"):
                continue
            if case.against:
                # Redis against the memory store, console off against on, slice by slice: not
                # against the echo.
                cell, slices, cell_problems = run_paired(case, by_key[case.against], conc,
                                                         checker, workdir, seconds, warmup, pairs,
                                                         inverse=case.twin == "console")
                if cell and slices:
                    cell["against"] = {k: v for k, v in merged(slices).items()
                                       if k in ("rps", "p50_us", "p99_us", "requests",
                                                "server_cpu_s", "server_cpu_pct")}
                report(case, conc, cell, cell_problems)
                continue
            if case.base or echo is None:
                # The traced rows compare with their untraced case, not the echo.
                report(case, conc, *run_cell(case, conc, checker, workdir, seconds, warmup))
                continue
            cell, slices, cell_problems = run_paired(case, echo, conc, checker, workdir,
                                                     seconds, warmup, pairs)
            echo_slices += slices
            report(case, conc, cell, cell_problems)
        if echo is not None:
            if echo_slices:
                report(echo, conc, merged(echo_slices), [])
            else:
                report(echo, conc, *run_cell(echo, conc, checker, workdir, seconds, warmup))
    for conc in sleep_concurrency:
        for case in cases:
            if case.key == "parallel_sleep":
                report(case, conc, *run_cell(case, conc, checker, workdir, seconds, warmup))

    h2load_version = subprocess.run(["h2load", "--version"], capture_output=True, text=True,
                                    check=False).stdout.strip()
    meta = {"date": datetime.date.today().isoformat(), "machine": machine(),
            "toolgate": args.toolgate_label, "h2load": h2load_version, "pairs": pairs}
    if redis_meta:
        sample = next((c for c in cases if c.against == "batch_1_named"),
                      next(c for c in cases if c.twin == "redis"))
        redis_meta["monitor"] = store_monitor(sample, servers["redis"], checker, workdir)
        redis_meta["shard"] = store_ceiling(servers["redis"])
        meta["redis"] = redis_meta
    table = render(results, cases, seconds, warmup, meta)
    (args.out / "results.md").write_text(table)
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "results": results},
                                                      indent=2))
    print()
    print(table, end="")
    print(f"\n(the benchmark took {time.monotonic() - started:.0f} s; table also in "
          f"{args.out / 'results.md'})", file=sys.stderr)
    if problems:
        print(f"\n{len(problems)} problem(s):", file=sys.stderr)
        for p in problems:
            print(f"- {p}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
