#!/usr/bin/env python3
"""An agent that asks its user on the terminal before a tool call a rule flags (approvals).

The server needs a hook or permission rule that answers `ask` (the README's "Approvals" shows one);
the batch sets options.interactive_approvals, so the flagged call waits for ResolveApproval.

usage: python examples/python/ask_user.py [--addr 127.0.0.1:50051]
"""

import argparse
import json

import grpc
import toolgate_stubs
from google.protobuf import json_format

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--addr", default="127.0.0.1:50051")
args = parser.parse_args()
pb, pb_grpc = toolgate_stubs.load()
calls = [{"id": "call_1", "name": "echo", "arguments": {"q": "risky: delete the draft"}}]
messages = []

# --- the README's ten lines ---
tg = pb_grpc.ToolGateStub(grpc.insecure_channel(args.addr))
req = json_format.ParseDict({"session_id": "s1", "calls": calls, "options": {"interactive_approvals": True}}, pb.DispatchBatchRequest())
for event in tg.DispatchBatch(req):
    if event.HasField("approval_requested"):
        a = event.approval_requested
        yes = input(f"{a.tool} {json_format.MessageToJson(a.arguments, indent=None)}: {a.reason}. Run it? [y/N] ") == "y"
        decision = pb.ResolveApprovalRequest.APPROVE if yes else pb.ResolveApprovalRequest.DENY
        tg.ResolveApproval(pb.ResolveApprovalRequest(approval_id=a.approval_id, decision=decision, reason="the user said no"))
    elif event.HasField("result"):
        messages += json_format.MessageToDict(event.result)["messages"]
# ---

print()
for message in messages:
    print(json.dumps(message, sort_keys=True))
