"""Replays a provider's recorded responses, so the agent loops here run without an API key.

``http_client(name)`` is an httpx2 client (what the provider SDKs take as ``http_client``) that
answers each request with the next response of ``clients/recorded/<name>.json``, in order. With
``REPLAY_LOG`` set, the requests' bodies (what the SDK sent) are written there as a JSON list.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import httpx2

# Shared with the TypeScript package's examples: clients/recorded/.
RECORDED = pathlib.Path(__file__).resolve().parents[2] / "recorded"


def http_client(name: str) -> httpx2.Client:
    replies: list[Any] = json.loads((RECORDED / f"{name}.json").read_text())
    sent: list[Any] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        if log := os.environ.get("REPLAY_LOG"):
            pathlib.Path(log).write_text(json.dumps(sent, indent=1))
        if len(sent) > len(replies):
            return httpx2.Response(500, json={"error": {"message": "no more recorded replies"}})
        return httpx2.Response(200, json=replies[len(sent) - 1])

    return httpx2.Client(transport=httpx2.MockTransport(answer))
