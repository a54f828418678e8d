"""The providers' own objects, made by their SDKs from the recorded replies (no network)."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
from replay import http_client  # noqa: E402

PROMPT = "Echo 'hello from the model', then tell me the time."
#: The call ids of the recorded first replies, in order.
IDS = {
    "openai_chat": ["call_Qm1", "call_Qm2"],
    "openai_responses": ["call_Rs1", "call_Rs2"],
    "anthropic": ["toolu_01A", "toolu_01B"],
    "gemini": ["gc-1", "gc-2"],
}


def chat_completion() -> Any:
    from openai import OpenAI

    llm = OpenAI(api_key="recorded", http_client=http_client("openai_chat"))
    return llm.chat.completions.create(model="gpt-4.1",
                                       messages=[{"role": "user", "content": PROMPT}])


def response() -> Any:
    from openai import OpenAI

    llm = OpenAI(api_key="recorded", http_client=http_client("openai_responses"))
    return llm.responses.create(model="gpt-4.1", input=PROMPT)


def message() -> Any:
    from anthropic import Anthropic

    llm = Anthropic(api_key="recorded", http_client=http_client("anthropic"))
    return llm.messages.create(model="claude-sonnet-4-6", max_tokens=256,
                               messages=[{"role": "user", "content": PROMPT}])


def generate_content() -> Any:
    from google import genai
    from google.genai import types

    llm = genai.Client(api_key="recorded",
                       http_options=types.HttpOptions(httpx_client=http_client("gemini")))
    return llm.models.generate_content(model="gemini-2.5-flash", contents=PROMPT)
