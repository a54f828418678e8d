"""An Anthropic Messages agent loop whose tools run in toolgate.

Without ANTHROPIC_API_KEY the model's replies come from clients/recorded/anthropic.json.
"""

import os

from anthropic import Anthropic
from replay import http_client
from toolgate import Client

tg = Client(os.environ.get("TOOLGATE_ADDR", "127.0.0.1:50051"))
llm = Anthropic() if "ANTHROPIC_API_KEY" in os.environ else Anthropic(
    api_key="recorded", http_client=http_client("anthropic"))

messages = [{"role": "user", "content": "Echo 'hello from the model', then tell me the time."}]
tools = tg.tools("anthropic")
while True:
    reply = llm.messages.create(model="claude-sonnet-4-6", max_tokens=1024,
                                messages=messages, tools=tools)
    messages.append({"role": "assistant", "content": reply.content})
    if reply.stop_reason != "tool_use":
        break
    out = tg.dispatch(reply, session_id="readme-anthropic")
    messages += out.messages
print(reply.content[0].text)
