"""stream() yields typed events in order and ends with the result; approve= answers the calls a
hook wants a person for, sync and async; AsyncClient does what Client does."""

from __future__ import annotations

import asyncio
from typing import Any

import sdk

from toolgate import (
    Answer,
    Approval,
    ApprovalRequested,
    ApprovalResolved,
    AsyncClient,
    CallReceived,
    Client,
    Finished,
    GateDecision,
    ToolPost,
    ToolPre,
)

RISKY = [{"id": "r1", "name": "echo", "arguments": {"text": "risky move"}}]


def test_stream_yields_each_calls_events_then_the_result(addr: str) -> None:
    with Client(addr) as tg:
        events = list(tg.stream(sdk.chat_completion(), session_id="py-stream"))
    kinds = [e.kind for e in events]
    assert kinds[-1] == "finished" and kinds.count("finished") == 1, kinds
    received = [e for e in events if isinstance(e, CallReceived)]
    assert [(e.index, e.id, e.name) for e in received] == [(0, "call_Qm1", "echo"),
                                                         (1, "call_Qm2", "now")]
    assert received[0].arguments == {"text": "hello from the model"}
    pre = [e for e in events if isinstance(e, ToolPre)]
    post = [e for e in events if isinstance(e, ToolPost)]
    assert [e.id for e in pre] == [e.id for e in post] == ["call_Qm1", "call_Qm2"]
    assert post[0].tool == "echo" and not post[0].is_error and post[0].error_class == "NONE"
    assert "hello from the model" in post[0].result_preview
    # Sequential: the second call starts after the first ended.
    assert kinds.index("tool_post") < [i for i, k in enumerate(kinds) if k == "tool_pre"][1]
    last = events[-1]
    assert isinstance(last, Finished) and last.result.session_id == "py-stream"
    assert last.result.all_succeeded


def test_approve_answers_an_ask_and_the_call_runs(addr: str) -> None:
    asked: list[Approval] = []

    def approve(a: Approval) -> bool:
        asked.append(a)
        return True

    with Client(addr) as tg:
        events = list(tg.stream(RISKY, session_id="py-approve", approve=approve))
    assert [a.tool for a in asked] == ["echo"]
    assert asked[0].reason == "a risky echo" and asked[0].source == "risky"
    assert asked[0].arguments == {"text": "risky move"} and asked[0].expires_at is not None
    assert any(isinstance(e, GateDecision) and e.verdict == "ASK" for e in events)
    assert any(isinstance(e, ApprovalRequested) for e in events)
    resolved = [e for e in events if isinstance(e, ApprovalResolved)]
    assert [(r.decision, r.how) for r in resolved] == [("APPROVE", "ANSWERED")]
    result = events[-1]
    assert isinstance(result, Finished)
    assert result.result.results[0].success
    assert result.result.results[0].content == '{"text":"risky move"}'


def test_an_answer_can_deny_or_edit_the_call(addr: str) -> None:
    with Client(addr) as tg:
        denied = tg.dispatch(RISKY, approve=lambda a: Answer(False, reason="not today"))
        edited = tg.dispatch(
            RISKY, approve=lambda a: Answer(True, arguments={"text": "a safer move"}))
    assert denied.results[0].error_class == "APPROVAL_DENIED"
    assert "not today" in denied.results[0].content
    assert edited.results[0].success
    assert edited.results[0].content == '{"text":"a safer move"}'


def test_without_approve_an_ask_is_refused_as_blocked(addr: str) -> None:
    with Client(addr) as tg:
        out = tg.dispatch(RISKY)
    assert out.results[0].error_class == "BLOCKED", out.results[0]


def test_the_caller_may_answer_approvals_itself(addr: str) -> None:
    with Client(addr) as tg:
        stream = tg.stream(RISKY, interactive_approvals=True)
        for event in stream:
            if isinstance(event, ApprovalRequested):
                answered = tg.resolve_approval(event.approval.approval_id, True)
                assert answered.approval_id == event.approval.approval_id
            if isinstance(event, Finished):
                assert event.result.results[0].success
                break
        else:
            raise AssertionError("no result")


def test_async_client_dispatches_streams_and_answers(addr: str) -> None:
    async def main() -> None:
        async with AsyncClient(addr) as tg:
            out = await tg.dispatch(sdk.generate_content(), session_id="py-async")
            assert out.format == "gemini" and out.all_succeeded
            assert [r.id for r in out.results] == sdk.IDS["gemini"]
            kinds = [e.kind async for e in tg.stream(sdk.response())]
            assert kinds[0] == "call_received" and kinds[-1] == "finished", kinds

            async def approve(a: Approval) -> Answer:
                await asyncio.sleep(0)
                return Answer(True, remember_session=True)

            first = await tg.dispatch(RISKY, session_id="py-async-remember", approve=approve)
            assert first.results[0].success
            # Remembered for the session: the next ask is answered without calling approve.
            def never(a: Approval) -> Any:
                raise AssertionError("asked again")

            again = await tg.dispatch(
                [{"id": "r2", "name": "echo", "arguments": {"text": "risky again"}}],
                session_id="py-async-remember", approve=never)
            assert again.results[0].success
            tools = await tg.tools("anthropic")
            assert any(t["name"] == "echo" for t in tools)
            assert await tg.end_session("py-async") is True

    asyncio.run(main())


def test_leaving_a_stream_early_cancels_the_batch(addr: str) -> None:
    calls = [{"id": "s1", "name": "sleep", "arguments": {"ms": 1500}},
             {"id": "e1", "name": "echo", "arguments": {"text": "after the break"}}]
    with Client(addr) as tg:
        with tg.stream(calls, session_id="py-break") as events:
            for event in events:
                if isinstance(event, ToolPre):
                    break
        import time

        time.sleep(2.5)
        memory = tg.session_memory("py-break")
    assert not any("after the break" in m for m in memory), memory


def test_leaving_an_async_stream_early_cancels_the_batch(addr: str) -> None:
    calls = [{"id": "s1", "name": "sleep", "arguments": {"ms": 1500}},
             {"id": "e1", "name": "echo", "arguments": {"text": "after the async break"}}]

    async def main() -> list[str]:
        async with AsyncClient(addr) as tg:
            async with tg.stream(calls, session_id="py-abreak") as events:
                async for event in events:
                    if isinstance(event, ToolPre):
                        break
            await asyncio.sleep(2.5)
            return await tg.session_memory("py-abreak")

    memory = asyncio.run(main())
    assert not any("after the async break" in m for m in memory), memory
