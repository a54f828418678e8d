#!/usr/bin/env python3
"""A toolgate command hook (the PreToolUse contract coding agents use).

toolgate runs it once per call with the call as JSON on stdin:
  {"hook_event_name": "PreToolUse", "session_id", "tool_name", "tool_input", "tool_use_id", "attempt"}

- exit 2 blocks the call; stderr is the reason the model reads;
- exit 0 allows it; JSON on stdout may carry a decision and an updated input:
  {"hookSpecificOutput": {"permissionDecision": "allow" | "deny" | "ask",
                          "permissionDecisionReason": "...", "updatedInput": {...}}}

This one keeps scratch writes out of secrets/ and caps sleeps at one second.

config:
  [[hooks.command]]
  name = "guard"
  command = ["python3", "examples/hooks/guard.py"]
  tools = "*"
  timeout = "5s"
"""

import json
import sys

event = json.load(sys.stdin)
if event.get("hook_event_name") != "PreToolUse":
    sys.exit(0)

tool = event.get("tool_name")
args = event.get("tool_input") or {}

if tool == "scratch_write" and str(args.get("path", "")).startswith("secrets/"):
    print("writing under secrets/ is not allowed; use another directory", file=sys.stderr)
    sys.exit(2)

if tool == "sleep" and isinstance(args.get("ms"), int) and args["ms"] > 1000:
    print(json.dumps({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "sleep capped at 1000 ms",
            "updatedInput": {"ms": 1000},
        }
    }))
    sys.exit(0)

if tool == "now":
    print(json.dumps({"decision": "ask", "reason": "reading the clock needs a human"}))
sys.exit(0)
