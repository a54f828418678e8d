"""An OpenAI Responses agent loop whose tools run in toolgate.

Without OPENAI_API_KEY the model's replies come from clients/recorded/openai_responses.json.
"""

import os

from openai import OpenAI
from replay import http_client
from toolgate import Client

tg = Client(os.environ.get("TOOLGATE_ADDR", "127.0.0.1:50051"))
llm = OpenAI() if "OPENAI_API_KEY" in os.environ else OpenAI(
    api_key="recorded", http_client=http_client("openai_responses"))

items = [{"role": "user", "content": "Echo 'hello from the model', then tell me the time."}]
tools = tg.tools("openai_responses")
while True:
    response = llm.responses.create(model="gpt-4.1", input=items, tools=tools)
    items += [item.model_dump(exclude_none=True) for item in response.output]
    if not any(item.type == "function_call" for item in response.output):
        break
    out = tg.dispatch(response, session_id="readme-openai-responses")
    items += out.messages
print(response.output_text)
