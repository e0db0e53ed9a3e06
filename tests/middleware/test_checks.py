"""The checks of a model's answer and the messages of a refine round, on plain messages."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from retryctl.middleware._checks import check_response, refine_messages
from tests.middleware._scripted import call, say
from tests.middleware._support import multiply

TOOLS = {"multiply": multiply}


class TestCheckResponse:
    def test_fitting_arguments_pass(self) -> None:
        (check,) = check_response([call("multiply", {"a": 2, "b": 3})], TOOLS)
        assert check.passed and check.name == "tool_args:multiply"

    def test_a_bad_field_is_named_with_what_was_sent(self) -> None:
        (check,) = check_response([call("multiply", {"a": "two", "b": 3})], TOOLS)
        assert not check.passed
        assert check.evidence.startswith("multiply: field 'a': ") and "(got 'two')" in check.evidence

    def test_a_missing_field_is_named(self) -> None:
        (check,) = check_response([call("multiply", {"a": 2})], TOOLS)
        assert "field 'b': Field required" in check.evidence

    def test_an_unknown_tool_lists_the_tools(self) -> None:
        (check,) = check_response([call("divide", {})], TOOLS)
        assert check.evidence == "there is no tool 'divide' (tools: multiply)"

    def test_skipped_calls_and_plain_answers(self) -> None:
        assert check_response([call("Answer", {"x": 1})], TOOLS, skip=frozenset({"Answer"}))[0].passed
        assert [c.name for c in check_response([say("42")], TOOLS)] == ["model_answered"]

    def test_arguments_that_are_not_json(self) -> None:
        message = AIMessage(
            content="",
            invalid_tool_calls=[
                {
                    "name": "multiply",
                    "args": "{a: 2",
                    "id": "c1",
                    "error": "bad JSON",
                    "type": "invalid_tool_call",
                }
            ],
        )
        (check,) = check_response([message], TOOLS)
        assert not check.passed and check.evidence == "multiply: bad JSON"

    def test_failed_checks_come_first(self) -> None:
        message = AIMessage(
            content="",
            tool_calls=[
                {"name": "multiply", "args": {"a": 1, "b": 2}, "id": "c1", "type": "tool_call"},
                {"name": "multiply", "args": {"a": "x", "b": 2}, "id": "c2", "type": "tool_call"},
            ],
        )
        assert [c.passed for c in check_response([message], TOOLS)] == [False, True]


class TestRefineMessages:
    def test_every_tool_call_gets_the_feedback(self) -> None:
        refused = call("multiply", {"a": "x", "b": 2}, "c7")
        sent, answer = refine_messages([refused], "fix 'a'")
        assert isinstance(sent, AIMessage) and sent.tool_calls == refused.tool_calls
        assert isinstance(answer, ToolMessage)
        assert (answer.tool_call_id, answer.status, answer.content) == ("c7", "error", "fix 'a'")

    def test_a_plain_answer_gets_a_human_message(self) -> None:
        sent, feedback = refine_messages([say("41")], "check the sum")
        assert sent.content == "41" and isinstance(feedback, HumanMessage)
