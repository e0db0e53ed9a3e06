"""RetryController: its constructor, and one ledger per agent run spanning model and tool calls."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from langgraph.types import Command

from retryctl.audit import DecisionLog, verify_log
from retryctl.controller import Breaker, BreakerConfig, Budget, Policy, PriceTable
from retryctl.exceptions import ConfigError
from retryctl.middleware import RetryController
from retryctl.nodes import VERDICT_EVENT
from tests.middleware._scripted import ScriptedChat, call, say
from tests.middleware._support import Agent, ano_wait, multiply, multiply_backup, no_wait, tool_messages


class TestRetryController:
    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"groups": ["multiply"]}, "groups"),
            ({"groups": {"arithmetic": []}}, "groups['arithmetic']"),
            ({"groups": {"arithmetic": "multiply"}}, "groups['arithmetic']"),
            ({"groups": {"arithmetic": [multiply, 3]}}, "groups['arithmetic'][1]"),
            ({"groups": {"a": [multiply], "b": [multiply]}}, "groups"),
            ({"budget": {"attempts": 3}}, "budget"),
            ({"policy": "strict"}, "policy"),
            ({"model_policy": {"max_samples": 3}}, "model_policy"),
            ({"log": 42}, "log"),
            ({"fallback_models": [object()]}, "fallback_models[0]"),
            ({"timeout_s": 0}, "timeout_s"),
            ({"prices": {"gpt": 1.0}}, "prices"),
            ({"journal": "journal.db"}, "journal"),
            ({"sleep": 1.0}, "sleep"),
        ],
    )
    def test_bad_input_names_the_field(self, kwargs: dict[str, Any], field: str) -> None:
        with pytest.raises(ConfigError) as caught:
            RetryController(**kwargs)
        assert caught.value.field == field

    @pytest.mark.parametrize(
        ("kwargs", "field", "value"),
        [
            ({"groups": {"arithmetic": [multiply, "abacus"]}}, "groups['arithmetic']", "abacus"),
            ({"validators": {"abacus": []}}, "validators", ["abacus"]),
        ],
    )
    def test_a_name_no_tool_has_is_named_at_the_first_call(
        self, kwargs: dict[str, Any], field: str, value: object
    ) -> None:
        # Names refer to the agent's tools, which the middleware first sees at a tool call.
        model = ScriptedChat(script=[call("multiply", {"a": 1, "b": 2})])
        with pytest.raises(ConfigError) as caught:
            Agent(model, [multiply], RetryController(**kwargs), "sync").ask("1 times 2?")
        assert (caught.value.field, caught.value.value) == (field, value)

    def test_log_given_as_a_path_or_a_log(self, tmp_path: Path) -> None:
        assert RetryController(log=tmp_path / "a.jsonl").log is not None
        log = DecisionLog(tmp_path / "b.jsonl")
        assert RetryController(log=log).log is log

    def test_a_log_in_a_missing_directory_names_log_and_the_directory(self, tmp_path: Path) -> None:
        missing = tmp_path / "logs"
        with pytest.raises(ConfigError) as caught:
            RetryController(log=missing / "decisions.jsonl")
        assert caught.value.field == "log"
        assert f"its directory {missing} does not exist" in str(caught.value)
        assert not missing.exists()

    def test_a_sleep_given_alone_is_the_wait_under_ainvoke(self) -> None:
        calls = [0]

        @tool
        def flaky_multiply(a: float, b: float) -> float:
            """Multiply two numbers."""
            calls[0] += 1
            if calls[0] == 1:
                raise ConnectionError("connection reset by peer")
            return a * b

        waits: list[float] = []
        model = ScriptedChat(script=[call("flaky_multiply", {"a": 6, "b": 7}), say("42")])
        out = Agent(model, [flaky_multiply], RetryController(sleep=waits.append), "async").ask("6 times 7?")
        assert [m.content for m in tool_messages(out)] == ["42.0"]
        assert len(waits) == 1 and waits[0] > 0  # the backoff went to the sleep given, not asyncio's

    def test_backup_tools_are_registered(self) -> None:
        controller = RetryController(groups={"arithmetic": [multiply, multiply_backup]})
        assert [t.name for t in controller.tools] == ["multiply", "multiply_backup"]


class TestRunLedger:
    def test_one_ledger_spans_model_and_tool_calls(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(
            script=[call("multiply", {"a": 6, "b": 7}, tokens=(100, 20)), say("42", tokens=(150, 3))]
        )
        prices = PriceTable.of({"scripted": (1.0, 2.0)})  # USD per million tokens in, out
        controller = RetryController(
            budget=Budget(attempts=10, usd=1.0), prices=prices, log=tmp_path / "log.jsonl", asleep=ano_wait
        )
        agent = Agent(model, [multiply], controller, mode)
        agent.ask("6 times 7?")
        run = agent.run()
        used = run.ledger.snapshot().used
        assert (run.model_calls, run.tool_calls) == (2, 1)
        assert used["attempts"] == 3  # two model calls and one tool call on one ledger
        assert used["samples"] == 2
        assert (used["input_tokens"], used["output_tokens"]) == (250, 23)
        assert used["usd"] == pytest.approx((250 * 1.0 + 23 * 2.0) / 1e6)
        assert verify_log(tmp_path / "log.jsonl").ok

    def test_a_prompt_over_the_token_budget_is_not_sent(self, mode: str) -> None:
        model = ScriptedChat(script=[say("unused")])
        controller = RetryController(budget=Budget(input_tokens=50), asleep=ano_wait)
        out = Agent(model, [multiply], controller, mode).ask("why? " * 100)
        assert model.seen == []  # its bound reserved before the call, and refused
        assert "budget 'input_tokens'" in str(out["messages"][-1].content)

    def test_each_run_has_its_own_ledger(self, mode: str) -> None:
        model = ScriptedChat(script=[say("one"), say("two")])
        controller = RetryController(budget=Budget(attempts=1), asleep=ano_wait)
        agent = Agent(model, [multiply], controller, mode)
        agent.ask("first")
        first = agent.run()
        out = agent.ask("second")  # the same thread, a new run: a budget of 1 attempt again
        assert out["messages"][-1].content == "two"
        assert agent.run() is not first
        assert first.ledger.snapshot().used["attempts"] == 1

    def test_concurrent_runs_do_not_share_a_budget(self) -> None:
        barrier = threading.Barrier(4)

        @tool
        def slow_multiply(a: float, b: float) -> float:
            """Multiply two numbers."""
            barrier.wait(timeout=10)  # all four runs are inside a tool call at once
            return a * b

        controller = RetryController(budget=Budget(attempts=2), sleep=no_wait)
        outcomes: list[list[str]] = []

        def one(i: int) -> None:
            model = ScriptedChat(script=[call("slow_multiply", {"a": i, "b": 2}), say(str(2 * i))])
            agent = Agent(model, [slow_multiply], controller, "sync")
            agent.config = {"configurable": {"thread_id": f"t{i}"}}
            out = agent.ask(f"{i} times 2?")
            outcomes.append([str(m.content) for m in tool_messages(out)])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        # Each run had 2 attempts of its own: its model call and its tool call; the final model
        # call of each run finds that budget spent.
        assert sorted(outcomes) == [["0.0"], ["2.0"], ["4.0"], ["6.0"]]


class TestBreakerAndEvents:
    def test_an_open_breaker_stops_the_call_saying_so(self, mode: str) -> None:
        @tool
        def crashing(a: float, b: float) -> float:
            """Multiply two numbers."""
            raise RuntimeError("multiplier crashed")

        breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=3600))
        script = [
            call("crashing", {"a": 1, "b": 2}),
            call("crashing", {"a": 1, "b": 2}, "c2"),
            say("gave up"),
        ]
        model = ScriptedChat(script=script)
        out = Agent(model, [crashing], RetryController(breaker=breaker, sleep=no_wait), mode).ask(
            "1 times 2?"
        )
        first, second = tool_messages(out)
        assert first.status == "error"  # the crash opened the breaker
        assert second.status == "error"
        assert "breaker" in str(second.content) and "crashing" in str(second.content)

    def test_verdicts_reach_the_custom_stream_when_asked(self) -> None:
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("42")])
        agent = Agent(model, [multiply], RetryController(stream_events=True), "sync")
        events = [
            e
            for e in agent.graph.stream(
                {"messages": [("user", "6 times 7?")]}, agent.config, stream_mode="custom"
            )
        ]
        steps = [(e["step_id"], e["verdict"]["action"]) for e in events if e.get("type") == VERDICT_EVENT]
        assert steps == [("model:1", "accept"), ("tool:multiply:c1", "accept"), ("model:2", "accept")]

    def test_no_events_by_default(self) -> None:
        model = ScriptedChat(script=[say("42")])
        agent = Agent(model, [multiply], RetryController(), "sync")
        stream = agent.graph.stream({"messages": [("user", "hi")]}, agent.config, stream_mode="custom")
        assert list(stream) == []


class TestModelAsk:
    def test_spent_budget_asks_and_an_extension_goes_on(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[say("hello")])
        policy = Policy(weights={"validators": 1.0}, on_budget_exhausted="ask_user")
        controller = RetryController(
            budget=Budget(attempts=0), model_policy=policy, log=tmp_path / "log.jsonl"
        )
        agent = Agent(model, [multiply], controller, mode)
        paused = agent.ask("hi")
        (question,) = paused["__interrupt__"]
        assert "budget 'attempts'" in question.value["reason"]
        out = agent.invoke(Command(resume={"action": "extend", "budget": {"attempts": 1}}))
        assert out["messages"][-1].content == "hello"
        assert agent.run().ledger.snapshot().limit["attempts"] == 1  # the 1 attempt the person granted
        assert verify_log(tmp_path / "log.jsonl").ok
