"""The drivers' shared arguments: one name each, checked where the node or step is built.

Each test is one behaviour a new user met: a wrong argument that failed deep inside a run (or not at
all) instead of naming itself at construction.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from retryctl.audit import VerdictRecord, read_records, verify_log
from retryctl.controller import Budget, Ledger, Policy
from retryctl.exceptions import ConfigError
from retryctl.models import LangChainBackend, SamplingParams, openai_style_kwargs
from retryctl.nodes import ControlledStep, ControlledToolNode
from retryctl.nodes._arguments import waits
from retryctl.testing import ScriptedBackend, acapture_verdicts
from tests.nodes._support import Runner, Sleeps, StreamingToolNode, user
from tests.nodes.test_tool_node import Calls, calling, graph_of, tool_messages

ONE_DRAW: dict[str, Any] = {"stopping": "sc-1", "min_samples": 1, "max_samples": 1}


def tool_node(**kwargs: Any) -> ControlledToolNode:
    return ControlledToolNode([Calls().calculator()], **kwargs)


def step(**kwargs: Any) -> ControlledStep:
    return ControlledStep(ScriptedBackend(["42"]), **kwargs)


class LimitedChat(GenericFakeChatModel):
    """A scripted chat model built with an output limit, as ``ChatOpenAI(max_tokens=200)`` is."""

    max_tokens: int = 200


def replies(*texts: str) -> Any:
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    return iter([AIMessage(text, usage_metadata=usage) for text in texts])


class TestNamedAtConstruction:
    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"groups": {"g": ["a"]}}, "groups['g'][0]"),  # a name none of the node's tools has
            ({"groups": {"g": []}}, "groups['g']"),
            ({"groups": {"g": ["calculator", 3]}}, "groups['g'][1]"),
            ({"groups": ["calculator"]}, "groups"),
            ({"policy": {"weights": {"validators": 1.0}}}, "policy"),
            ({"budget": {"attempts": 3}}, "budget"),
            ({"run_ledger": Budget(attempts=3)}, "run_ledger"),
            ({"log": 42}, "log"),
            ({"timeout_s": 0}, "timeout_s"),
            ({"sleep": 1.0}, "sleep"),
        ],
    )
    def test_tool_node(self, kwargs: dict[str, Any], field: str) -> None:
        with pytest.raises(ConfigError) as caught:
            tool_node(**kwargs)
        assert caught.value.field == field

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"policy": {"min_samples": 3}}, "policy"),
            ({"budget": {"attempts": 3}}, "budget"),
            ({"run_ledger": Budget(attempts=3)}, "run_ledger"),
            ({"log": 42}, "log"),
            ({"asleep": "later"}, "asleep"),
        ],
    )
    def test_step(self, kwargs: dict[str, Any], field: str) -> None:
        with pytest.raises(ConfigError) as caught:
            step(**kwargs)
        assert caught.value.field == field

    def test_a_dict_for_a_policy_says_how_to_build_one(self) -> None:
        with pytest.raises(ConfigError) as caught:
            tool_node(policy={"weights": {"validators": 1.0}})
        assert caught.value.problem == "must be a Policy (e.g. Policy(**the_dict)), not dict"

    @pytest.mark.parametrize("build", [tool_node, step])
    def test_a_log_in_a_missing_directory_names_log_and_the_directory(
        self, build: Any, tmp_path: Path
    ) -> None:
        missing = tmp_path / "logs"
        with pytest.raises(ConfigError) as caught:
            build(log=missing / "decisions.jsonl")
        assert caught.value.field == "log"
        assert f"its directory {missing} does not exist" in str(caught.value)
        assert not missing.exists()  # no directory made behind the caller's back

    def test_something_else_than_a_backend_names_langchain_backend(self) -> None:
        with pytest.raises(ConfigError, match="LangChainBackend") as caught:
            ControlledStep([ScriptedBackend(["42"]), "gpt-4o"])  # type: ignore[list-item]
        assert caught.value.field == "models[1]"

    def test_a_tool_given_as_the_model_is_named_whole(self) -> None:
        # A tool is a pydantic model, so iterable (its fields): it was read as a group of its fields.
        tool = Calls().calculator()
        with pytest.raises(ConfigError, match="LangChainBackend") as caught:
            ControlledStep(tool)  # type: ignore[arg-type]
        assert caught.value.field == "models[0]" and caught.value.value is tool


class TestToolNodeArguments:
    def test_groups_may_name_the_node_s_tools(self, run: Runner) -> None:
        calls = Calls()
        calculator = calls.calculator([RuntimeError("service gone")])  # terminal: switch
        node = StreamingToolNode(
            [calculator, calls.python()],
            groups={"arithmetic": ["calculator", "python"]},
            adapters={"python": lambda args: {"code": f"print({args['expression']})"}},
        )
        out = run(graph_of(node), calling(("calculator", {"expression": "6*7"})))
        assert out.actions == ["switch", "accept"]
        assert calls.names() == ["calculator", "python"]

    def test_a_log_given_as_a_path_is_written(self, run: Runner, tmp_path: Path) -> None:
        path = tmp_path / "decisions.jsonl"
        run(graph_of(tool_node(log=str(path))), calling(("calculator", {"expression": "6*7"})))
        records = [r for r in read_records(path) if isinstance(r, VerdictRecord)]
        assert [r.action.value for r in records] == ["accept"]
        assert verify_log(path).ok

    def test_budget_limits_the_node_s_calls(self, run: Runner) -> None:
        node = StreamingToolNode([Calls().calculator()], budget=Budget(attempts=1))
        first = run(graph_of(node), calling(("calculator", {"expression": "1"})))
        second = run(graph_of(node), calling(("calculator", {"expression": "2"})))
        assert (first.actions, second.actions) == (["accept"], ["stop"])
        assert "budget 'attempts' is spent (1 of 1)" in tool_messages(second)[0].content

    def test_budget_under_a_run_ledger_is_a_step_of_it(self) -> None:
        ledger = Ledger(Budget(attempts=10))
        node = tool_node(budget=Budget(attempts=2), run_ledger=ledger, name="tools")
        assert node.controller.ledger is ledger.steps()["tools"]
        assert ledger.steps()["tools"].budget == Budget(attempts=2)

    def test_ledger_still_works_with_a_deprecation_warning(self, run: Runner) -> None:
        with pytest.warns(DeprecationWarning, match="run_ledger"):
            node = StreamingToolNode([Calls().calculator()], ledger=Ledger(Budget(attempts=0)))
        assert run(graph_of(node), calling(("calculator", {"expression": "1"}))).actions == ["stop"]

    def test_a_budget_given_as_ledger_is_named(self) -> None:
        with pytest.warns(DeprecationWarning), pytest.raises(ConfigError) as caught:
            tool_node(ledger=Budget(attempts=3))
        assert caught.value.field == "ledger"
        assert "give budget=Budget(...)" in caught.value.problem

    def test_a_sleep_given_alone_is_the_wait_under_ainvoke(self) -> None:
        sleeps = Sleeps()
        node = StreamingToolNode([Calls().calculator([ConnectionError("down")])], sleep=sleeps)
        out = asyncio.run(acapture_verdicts(graph_of(node), calling(("calculator", {"expression": "1"}))))
        assert out.actions == ["retry", "accept"]
        assert len(sleeps.waits) == 1 and sleeps.waits[0] > 0


class TestStepArguments:
    def test_a_chat_model_is_wrapped_in_langchain_backend(self, run: Runner) -> None:
        model = GenericFakeChatModel(messages=replies("The answer is 42"))
        built = ControlledStep(model, policy=Policy(**ONE_DRAW))
        [backend] = built.models.values()
        assert isinstance(backend, LangChainBackend) and backend.model is model
        out = run(built.compile(), user("6 * 7?"))
        assert out.actions == ["accept"]
        assert out.output["result"]["answer"] == "42"

    def test_the_chat_model_s_max_tokens_is_what_a_sample_reserves(self, run: Runner) -> None:
        # 512 reserved a sample (the schedule's default) would not fit 300: the step stopped unasked.
        model = LimitedChat(messages=replies(*["The answer is 42"] * 3))
        built = ControlledStep(model, budget=Budget(output_tokens=300))
        result = run(built.compile(), user("6 * 7?")).output["result"]
        assert (result["status"], result["answer"]) == ("accepted", "42")
        # One sample a draw (three at 200 would not fit), each charged what it used.
        assert (result["usage"]["samples"], result["usage"]["output_tokens"]) == (3, 15)

    def test_a_refine_is_judged_at_the_chat_model_s_max_tokens(self, run: Runner) -> None:
        # The refine's cost was estimated at the schedule's 512, not the model's 200: 512 + 5 > 300
        # stopped the step where the refine it called for fits.
        def says_42(text: str) -> bool:
            return "42" in text

        model = LimitedChat(messages=replies("The answer is 13", "The answer is 42"))
        policy = Policy(**ONE_DRAW, weights={"validators": 1.0})
        built = ControlledStep(model, policy=policy, budget=Budget(output_tokens=300), validators=[says_42])
        out = run(built.compile(), user("6 * 7?"))
        assert out.actions == ["refine", "accept"]
        assert out.output["result"]["answer"] == "42"

    def test_a_limit_the_call_sends_wins_over_the_model_s(self) -> None:
        backend = LangChainBackend(LimitedChat(messages=replies()), to_kwargs=openai_style_kwargs)
        assert backend.output_limit(SamplingParams(max_tokens=64)) == 64
        assert LangChainBackend(LimitedChat(messages=replies())).output_limit(SamplingParams()) == 200

    def test_a_log_given_as_a_path_is_written(self, run: Runner, tmp_path: Path) -> None:
        path = tmp_path / "decisions.jsonl"
        run(step(log=path, policy=Policy(**ONE_DRAW)).compile(), user("q"))
        assert verify_log(path).ok and len(list(read_records(path))) >= 1

    def test_a_sleep_given_alone_is_the_wait_under_ainvoke(self) -> None:
        sleeps = Sleeps()
        built = ControlledStep(
            ScriptedBackend([TimeoutError("slow"), "42"]), policy=Policy(**ONE_DRAW), sleep=sleeps
        )
        out = asyncio.run(acapture_verdicts(built.compile(), user("q")))
        assert out.actions == ["retry", "accept"]
        assert len(sleeps.waits) == 1 and sleeps.waits[0] > 0


class TestWaits:
    def test_time_sleep_given_alone_waits_with_asyncio_sleep(self) -> None:
        # No worker thread per wait: a batch's many waiting tasks would queue for the executor.
        assert waits(time.sleep, None) == (time.sleep, asyncio.sleep)
        assert waits(None, None) == (time.sleep, asyncio.sleep)

    def test_a_sleep_given_alone_runs_in_a_worker_thread(self) -> None:
        threads: list[int] = []
        _, asleep = waits(lambda seconds: threads.append(threading.get_ident()), None)

        async def wait() -> None:
            await asleep(0.5)

        asyncio.run(wait())
        assert threads and threads[0] != threading.get_ident()
