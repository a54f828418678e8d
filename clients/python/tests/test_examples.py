"""The README's agent loops, run as a user runs them (without an API key, against the recorded
replies) through the real server: the provider SDK sends toolgate's tool messages and tool list
as its next request, and the README shows the example files as they are."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

HERE = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = HERE / "examples"
FINAL = 'The echo said "hello from the model", and I have the time.'


def run(example: str, addr: str, tmp_path: pathlib.Path) -> list[Any]:
    log = tmp_path / "sent.json"
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY",
                        "GOOGLE_API_KEY")}
    env.update(TOOLGATE_ADDR=addr, REPLAY_LOG=str(log), PYTHONWARNINGS="error::DeprecationWarning")
    done = subprocess.run([sys.executable, str(EXAMPLES / example)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == FINAL, done.stdout
    sent: list[Any] = json.loads(log.read_text())
    assert len(sent) == 2, sent
    return sent


def test_openai_chat_loop(addr: str, tmp_path: pathlib.Path) -> None:
    first, second = run("openai_chat.py", addr, tmp_path)
    assert {t["function"]["name"] for t in first["tools"]} >= {"echo", "now"}
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_Qm1", "call_Qm2"]
    assert tool_messages[0]["content"] == '{"text":"hello from the model"}'
    assert second["messages"][1]["tool_calls"][0]["id"] == "call_Qm1"


def test_openai_responses_loop(addr: str, tmp_path: pathlib.Path) -> None:
    first, second = run("openai_responses.py", addr, tmp_path)
    assert {t["name"] for t in first["tools"]} >= {"echo", "now"}
    outputs = [i for i in second["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_Rs1", "call_Rs2"]
    assert outputs[0]["output"] == '{"text":"hello from the model"}'


def test_anthropic_loop(addr: str, tmp_path: pathlib.Path) -> None:
    first, second = run("anthropic_messages.py", addr, tmp_path)
    assert {t["name"] for t in first["tools"]} >= {"echo", "now"}
    user, assistant, results = second["messages"]
    assert [b["type"] for b in assistant["content"]] == ["text", "tool_use", "tool_use"]
    assert results["role"] == "user"
    assert [(b["type"], b["tool_use_id"]) for b in results["content"]] == [
        ("tool_result", "toolu_01A"), ("tool_result", "toolu_01B")]


def test_gemini_loop(addr: str, tmp_path: pathlib.Path) -> None:
    first, second = run("gemini.py", addr, tmp_path)
    declared = first["tools"][0]["functionDeclarations"]
    assert {d["name"] for d in declared} >= {"echo", "now"}
    responses = [p["functionResponse"] for p in second["contents"][-1]["parts"]]
    assert [(r["id"], r["name"]) for r in responses] == [("gc-1", "echo"), ("gc-2", "now")]
    assert responses[0]["response"] == {"output": {"text": "hello from the model"}}


@pytest.mark.parametrize("name", ["openai_chat.py", "openai_responses.py",
                                  "anthropic_messages.py", "gemini.py"])
def test_the_readme_shows_each_example_as_it_is(name: str) -> None:
    readme = (HERE / "README.md").read_text()
    shown = re.search(
        rf"<!-- example: examples/{re.escape(name)} -->\n```python\n(.*?)```", readme, re.S)
    assert shown, f"README.md does not show examples/{name}"
    assert shown.group(1) == (EXAMPLES / name).read_text()


def test_the_committed_stubs_match_proto() -> None:
    done = subprocess.run([sys.executable, str(HERE / "gen_proto.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
