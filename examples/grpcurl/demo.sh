#!/usr/bin/env bash
# A tour of toolgate's API with grpcurl: list and describe the services through reflection, then
# dispatch an OpenAI-style batch (unary Dispatch) and an Anthropic-style assistant message
# (streaming DispatchBatch, tool messages in Anthropic format).
#
# usage: examples/grpcurl/demo.sh [ADDR]     (default 127.0.0.1:50051; GRPCURL=path overrides grpcurl)
set -euo pipefail
addr=${1:-127.0.0.1:50051}
grpcurl=${GRPCURL:-grpcurl}
g() { "$grpcurl" -plaintext "$@"; }

echo "== services =="
g "$addr" list

echo
echo "== the ToolGate service =="
g "$addr" describe toolgate.v1.ToolGate

echo
echo "== the request message =="
g "$addr" describe toolgate.v1.DispatchBatchRequest

echo
echo "== Dispatch: an OpenAI chat batch (one call to a tool that does not exist) =="
g -d @ "$addr" toolgate.v1.ToolGate/Dispatch <<'JSON'
{
  "session_id": "grpcurl-demo",
  "calls": [
    {"id": "call_weather_1", "type": "function",
     "function": {"name": "echo", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}},
    {"id": "call_time_2", "type": "function", "function": {"name": "now", "arguments": "{}"}},
    {"id": "call_oops_3", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
  ]
}
JSON

echo
echo "== DispatchBatch: an Anthropic assistant message, events streamed, Anthropic tool messages =="
g -d @ "$addr" toolgate.v1.ToolGate/DispatchBatch <<'JSON'
{
  "assistant_message": {
    "role": "assistant",
    "content": [
      {"type": "text", "text": "Let me note that down and check it."},
      {"type": "tool_use", "id": "toolu_01", "name": "scratch_write",
       "input": {"path": "notes/todo.txt", "content": "buy milk"}},
      {"type": "tool_use", "id": "toolu_02", "name": "scratch_read", "input": {"path": "notes/todo.txt"}}
    ]
  },
  "options": {"message_format": "ANTHROPIC"}
}
JSON
