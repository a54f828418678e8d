"""A Gemini (google-genai) agent loop whose tools run in toolgate.

Without GEMINI_API_KEY the model's replies come from clients/recorded/gemini.json.
"""

import os

from google import genai
from google.genai import types
from replay import http_client
from toolgate import Client

tg = Client(os.environ.get("TOOLGATE_ADDR", "127.0.0.1:50051"))
llm = genai.Client() if "GEMINI_API_KEY" in os.environ else genai.Client(
    api_key="recorded", http_options=types.HttpOptions(httpx_client=http_client("gemini")))

contents = [types.Content(role="user", parts=[
    types.Part(text="Echo 'hello from the model', then tell me the time.")])]
config = types.GenerateContentConfig(tools=tg.tools("gemini"))
while True:
    response = llm.models.generate_content(model="gemini-2.5-flash", contents=contents,
                                           config=config)
    contents.append(response.candidates[0].content)
    if not response.function_calls:
        break
    out = tg.dispatch(response, session_id="readme-gemini")
    contents += out.messages
print(response.text)
