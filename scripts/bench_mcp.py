#!/usr/bin/env python3
"""Runs the matrix of `scripts/bench-mcp` against servers it already started, prints the tables.

Writes a plan for the load driver (benches/mcp_driver.rs), runs it, and reads its JSON lines:
for every target and concurrency, `slices` slices interleaved with the other targets' (the
order reversed every other round), each a fixed time of closed-loop calls, one call at a time
per worker, one keep-alive connection per worker.

Targets: toolgate's `/mcp` (2026-07-28 stateless POSTs; 2025-11-25 sessions, one per
connection), toolgate's gRPC `Dispatch` of one `echo` call (one HTTP/2 connection per worker,
as the MCP load has, and one shared connection, as a gRPC client usually has and as
scripts/bench-grpc measures), and an MCP server on the official MCP Python SDK
(tests/mcp/py_echo_server.py, 2026-07-28 stateless POSTs, the same request bytes but the URL).

A cell's calls/s is the median of its slices' rates; its percentiles and mean latency are over
all its slices' calls (a mean far above the p50 means a few calls stalled: at concurrency 1, a
40 ms delayed ACK in 1% of calls quadruples the mean and quarters the rate). A ratio is paired:
the two targets' rates in the same round, divided, then the median over rounds (this machine's
speed drifts by ±15% over tens of seconds, see scripts/bench_grpc.py). CPU per call is the
server's (or the driver's) user + system time over the slices, divided by their calls. "conns.
to port" is how many established connections to the target's port the driver held after each
slice (/proc/net/tcp): every target of a level stays connected for the whole level, so targets
on one port add up; a figure other than the expected one (shown) means a worker's client opened
a connection beside its own (reqwest's pool may, when a reply's connection is not back in the
pool yet) or reconnected. Any failed call (a refused request, an HTTP or JSON-RPC error,
`isError`, a reply that is not the echo of the input) is counted in the table and makes the exit
status non-zero, after the tables are printed.

Settings from the environment: BENCH_CONCURRENCY (default "1,16,64"), BENCH_SESSION_CONCURRENCY
(levels of the 2025-11-25 session form, default the same), BENCH_SLICES (default 6, keep it
even), BENCH_SLICE_SECONDS (default 1.5), BENCH_WARMUP (seconds per target and level, default 1).
"""

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys

# (key, label, kind); the server each uses is given on the command line.
TOOLGATE_MCP = "toolgate_mcp"
TOOLGATE_MCP_SESSION = "toolgate_mcp_session"
TOOLGATE_GRPC = "toolgate_grpc"
TOOLGATE_GRPC_SHARED = "toolgate_grpc_1conn"
PYTHON_MCP = "python_sdk_mcp"
LABELS = {
    TOOLGATE_MCP: "toolgate MCP `tools/call` (2026-07-28, stateless)",
    TOOLGATE_MCP_SESSION: "toolgate MCP `tools/call` (2025-11-25 session)",
    TOOLGATE_GRPC: "toolgate gRPC `Dispatch` (1 conn. per worker)",
    TOOLGATE_GRPC_SHARED: "toolgate gRPC `Dispatch` (1 shared conn.)",
    PYTHON_MCP: "MCP Python SDK server `tools/call` (2026-07-28, stateless)",
}
# The issue's bars: MCP at least 0.7× gRPC's calls/s; toolgate's MCP faster than the SDK's.
MCP_OVER_GRPC_BAR = 0.7
OVER_PYTHON_BAR = 1.0


def env_list(name, default):
    return [int(x) for x in os.environ.get(name, default).split(",") if x.strip()]


def split_server(spec):
    """`ADDR@PID` -> (addr, pid)."""
    addr, pid = spec.rsplit("@", 1)
    return addr, int(pid)


def plan(args, concurrency, session_concurrency):
    mcp_addr, tg_pid = split_server(args.toolgate_mcp)
    grpc_addr, _ = split_server(args.toolgate_grpc)
    py_addr, py_pid = split_server(args.python)
    targets = [
        (TOOLGATE_MCP, "mcp-stateless", f"http://{mcp_addr}/mcp", tg_pid, None),
        (TOOLGATE_GRPC, "grpc", grpc_addr, tg_pid, None),
        (PYTHON_MCP, "mcp-stateless", f"http://{py_addr}/mcp", py_pid, None),
        (TOOLGATE_MCP_SESSION, "mcp-session", f"http://{mcp_addr}/mcp", tg_pid, session_concurrency),
        (TOOLGATE_GRPC_SHARED, "grpc-shared", grpc_addr, tg_pid, None),
    ]
    return {
        "targets": [
            {"label": key, "kind": kind, "addr": addr, "pid": pid, "concurrency": levels}
            for key, kind, addr, pid, levels in targets
        ],
        "concurrency": concurrency,
        "slices": int(os.environ.get("BENCH_SLICES", 6)),
        "slice_seconds": float(os.environ.get("BENCH_SLICE_SECONDS", 1.5)),
        "warmup_seconds": float(os.environ.get("BENCH_WARMUP", 1)),
    }


def run_driver(driver, plan_path, raw_path):
    """Runs the driver, its progress passed through to stderr; returns its records."""
    with open(raw_path, "w") as raw:
        done = subprocess.run([driver, "--plan", str(plan_path)], stdout=raw, check=False)
    records = [json.loads(line) for line in pathlib.Path(raw_path).read_text().splitlines() if line]
    if done.returncode != 0:
        sys.exit(f"the driver exited {done.returncode}; its records so far are in {raw_path}")
    return records


def per_call_us(slices, field):
    seconds = [s[field] for s in slices if s.get(field) is not None]
    calls = sum(s["calls"] for s in slices)
    if len(seconds) != len(slices) or not calls:
        return None
    return sum(seconds) / calls * 1e6


def port_of(addr):
    return addr.split("://")[-1].split("/")[0].rsplit(":", 1)[1]


def expected_sockets(the_plan, target, concurrency):
    """Connections the driver should hold to `target`'s port at `concurrency`: every target on
    that port is open for the whole level, one connection per worker (one for `grpc-shared`)."""
    port = port_of(target["addr"])
    return sum(1 if t["kind"] == "grpc-shared" else concurrency
               for t in the_plan["targets"]
               if port_of(t["addr"]) == port
               and (t["concurrency"] is None or concurrency in t["concurrency"]))


def summarize(records, the_plan):
    """{(key, concurrency): cell} with the slices' figures folded in."""
    targets = {t["label"]: t for t in the_plan["targets"]}
    cells = {}
    for r in records:
        if r["type"] == "cell":
            cells[(r["target"], r["concurrency"])] = dict(r, slices=[])
    for r in records:
        if r["type"] == "slice":
            cells[(r["target"], r["concurrency"])]["slices"].append(r)
    for cell in cells.values():
        slices = cell["slices"]
        cell["rate"] = statistics.median(s["rate"] for s in slices) if slices else 0.0
        cell["server_cpu_us_per_call"] = per_call_us(slices, "server_cpu_s")
        cell["driver_cpu_us_per_call"] = per_call_us(slices, "driver_cpu_s")
        cell["expected_connections"] = expected_sockets(
            the_plan, targets[cell["target"]], cell["concurrency"])
    return cells


def paired_ratio(cells, top, bottom, concurrency):
    """Median over rounds of top's rate / bottom's rate in the same round."""
    a, b = cells.get((top, concurrency)), cells.get((bottom, concurrency))
    if not a or not b:
        return None
    by_round = {s["slice"]: s["rate"] for s in b["slices"]}
    ratios = [s["rate"] / by_round[s["slice"]] for s in a["slices"]
              if by_round.get(s["slice"])]
    return statistics.median(ratios) if ratios else None


def fmt(value, spec, unit=""):
    return "—" if value is None else f"{value:{spec}}{unit}"


def mark(value, ok):
    """A ratio, flagged when it misses its bar."""
    return "—" if value is None else f"{value:.2f}×" + ("" if ok else " **(misses the bar)**")


def tables(cells, concurrency):
    lines = [
        "| Target | Conc. | calls/s | p50 | p99 | p99.9 | mean | server CPU/call | driver CPU/call "
        "| conns. to port | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key in (TOOLGATE_MCP, TOOLGATE_MCP_SESSION, TOOLGATE_GRPC, TOOLGATE_GRPC_SHARED, PYTHON_MCP):
        for c in concurrency:
            cell = cells.get((key, c))
            if not cell:
                continue
            seen = sorted(set(cell.get("open_connections_seen") or []))
            conns = "/".join(map(str, seen)) or "—"
            if seen != [cell["expected_connections"]]:
                conns = f"**{conns}** (expected {cell['expected_connections']})"
            lines.append(
                f"| {LABELS[key]} | {c} | {cell['rate']:,.0f} | {cell['p50_us']:,.0f} µs "
                f"| {cell['p99_us']:,.0f} µs | {cell['p999_us']:,.0f} µs | {cell['mean_us']:,.0f} µs "
                f"| {fmt(cell['server_cpu_us_per_call'], ',.0f', ' µs')} "
                f"| {fmt(cell['driver_cpu_us_per_call'], ',.0f', ' µs')} | {conns} "
                f"| {'**' + str(cell['errors']) + '**' if cell['errors'] else 0} |")
    lines += [
        "",
        "| Conc. | MCP / gRPC calls/s (same conns.; bar ≥ 0.7) | MCP / gRPC (1 conn.) | MCP p50 − gRPC p50 "
        "| server CPU/call MCP / gRPC | toolgate MCP / Python SDK calls/s (bar > 1) "
        "| toolgate p50 / SDK p50 | session / stateless calls/s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    ratios = []
    for c in concurrency:
        mcp, grpc, py = (cells.get((k, c)) for k in (TOOLGATE_MCP, TOOLGATE_GRPC, PYTHON_MCP))
        row = {
            "concurrency": c,
            "mcp_over_grpc": paired_ratio(cells, TOOLGATE_MCP, TOOLGATE_GRPC, c),
            "mcp_over_grpc_1conn": paired_ratio(cells, TOOLGATE_MCP, TOOLGATE_GRPC_SHARED, c),
            "mcp_minus_grpc_p50_us": mcp["p50_us"] - grpc["p50_us"] if mcp and grpc else None,
            "mcp_over_grpc_server_cpu": (
                mcp["server_cpu_us_per_call"] / grpc["server_cpu_us_per_call"]
                if mcp and grpc and mcp["server_cpu_us_per_call"] and grpc["server_cpu_us_per_call"]
                else None),
            "toolgate_over_python": paired_ratio(cells, TOOLGATE_MCP, PYTHON_MCP, c),
            "toolgate_p50_over_python_p50": mcp["p50_us"] / py["p50_us"] if mcp and py else None,
            "session_over_stateless": paired_ratio(cells, TOOLGATE_MCP_SESSION, TOOLGATE_MCP, c),
        }
        row["mcp_over_grpc_meets_bar"] = (row["mcp_over_grpc"] is not None
                                         and row["mcp_over_grpc"] >= MCP_OVER_GRPC_BAR)
        row["toolgate_over_python_meets_bar"] = (row["toolgate_over_python"] is not None
                                                and row["toolgate_over_python"] > OVER_PYTHON_BAR)
        ratios.append(row)

        lines.append(
            f"| {c} | {mark(row['mcp_over_grpc'], row['mcp_over_grpc_meets_bar'])} "
            f"| {fmt(row['mcp_over_grpc_1conn'], '.2f', '×')} "
            f"| {fmt(row['mcp_minus_grpc_p50_us'], '+,.0f', ' µs')} "
            f"| {fmt(row['mcp_over_grpc_server_cpu'], '.2f', '×')} "
            f"| {mark(row['toolgate_over_python'], row['toolgate_over_python_meets_bar'])} "
            f"| {fmt(row['toolgate_p50_over_python_p50'], '.2f', '×')} "
            f"| {fmt(row['session_over_stateless'], '.2f', '×')} |")
    return lines, ratios


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--driver", required=True, help="the mcp_driver bench executable")
    parser.add_argument("--toolgate-mcp", required=True, help="toolgate's MCP listener, ADDR@PID")
    parser.add_argument("--toolgate-grpc", required=True, help="toolgate's gRPC listener, ADDR@PID")
    parser.add_argument("--python", required=True, help="the MCP Python SDK server, ADDR@PID")
    parser.add_argument("--toolgate-label", default="")
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()

    concurrency = env_list("BENCH_CONCURRENCY", "1,16,64")
    session_concurrency = env_list("BENCH_SESSION_CONCURRENCY", ",".join(map(str, concurrency)))
    the_plan = plan(args, concurrency, session_concurrency)
    args.out.mkdir(parents=True, exist_ok=True)
    plan_path = args.out / "plan.json"
    plan_path.write_text(json.dumps(the_plan, indent=2))
    started = datetime.datetime.now(datetime.timezone.utc)
    records = run_driver(args.driver, plan_path, args.out / "raw.jsonl")
    cells = summarize(records, the_plan)
    lines, ratios = tables(cells, concurrency)
    errors = sum(cell["errors"] for cell in cells.values())
    header = [
        f"toolgate: {args.toolgate_label or 'unknown'}; {started:%Y-%m-%d %H:%M} UTC; "
        f"{os.cpu_count()} cores; {the_plan['slices']} slices × {the_plan['slice_seconds']} s "
        f"per cell; echo input `{{\"n\": N}}`, N distinct per call",
        "",
    ]
    text = "\n".join(header + lines) + "\n"
    if errors:
        text += f"\n**{errors} calls failed**; first reasons:\n"
        for (key, c), cell in sorted(cells.items()):
            for reason in cell["error_samples"]:
                text += f"- {LABELS[key]} at {c}: {reason}\n"
    print(text)
    (args.out / "results.md").write_text(text)
    results = {
        "toolgate": args.toolgate_label,
        "started": started.isoformat(),
        "cores": os.cpu_count(),
        "plan": the_plan,
        "labels": LABELS,
        "cells": [
            {k: v for k, v in cell.items() if k != "slices"} | {"key": key, "label": LABELS[key],
                                                               "slice_rates": [s["rate"] for s in cell["slices"]]}
            for (key, _), cell in sorted(cells.items())
        ],
        "ratios": ratios,
        "errors": errors,
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
