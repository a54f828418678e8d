"""An OpenAI Chat Completions agent loop whose tools run in toolgate.

Without OPENAI_API_KEY the model's replies come from clients/recorded/openai_chat.json.
"""

import os

from openai import OpenAI
from replay import http_client
from toolgate import Client

tg = Client(os.environ.get("TOOLGATE_ADDR", "127.0.0.1:50051"))
llm = OpenAI() if "OPENAI_API_KEY" in os.environ else OpenAI(
    api_key="recorded", http_client=http_client("openai_chat"))

messages = [{"role": "user", "content": "Echo 'hello from the model', then tell me the time."}]
tools = tg.tools("openai")
while True:
    completion = llm.chat.completions.create(model="gpt-4.1", messages=messages, tools=tools)
    message = completion.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    if not message.tool_calls:
        break
    out = tg.dispatch(completion, session_id="readme-openai-chat")
    messages += out.messages
print(message.content)
