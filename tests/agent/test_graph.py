"""The demo graph with scripted models: the controller's verdicts drive accept, switch, stop, ask."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from retryctl.agent import DemoState, build_demo_graph
from retryctl.agent._calibration import shipped_calibration
from retryctl.agent._graph import demo_policy
from retryctl.audit import DecisionLog, verify_log
from retryctl.controller import LIMIT_NAMES, Budget
from retryctl.models import Message, SamplingParams
from retryctl.testing import ScriptedBackend, acapture_verdicts, capture_verdicts

QUESTION: DemoState = {
    "messages": [HumanMessage("Mia has 7 boxes of 8 crayons. She loses 5. How many are left?")]
}
CONFIG: RunnableConfig = {"configurable": {"thread_id": "t1", "run_id": "run-1"}}


def model(
    answers: list[str], expression: str, *, confidence: float = 0.9, name: str = "small"
) -> ScriptedBackend:
    """A scripted model: its own answers in turn, and always ``expression`` when asked for one."""
    turn = iter(answers * 10)

    def reply(_messages: list[Message], params: SamplingParams) -> str:
        if params.response_format is not None:
            return json.dumps({"expression": expression})
        return f"The answer is {next(turn)}."

    item: Callable[[list[Message], SamplingParams], str] = reply
    return ScriptedBackend([item], model=name, confidence=confidence, cycle=True)


class TestBuildDemoGraph:
    def test_agreeing_answers_are_accepted_from_the_model(self) -> None:
        run = capture_verdicts(build_demo_graph(model=model(["51"], "1 + 1")), QUESTION, CONFIG)
        assert run.actions == ["accept"]
        result = run.output["result"]
        assert (result["status"], result["answer"], result["served_by"]) == ("accepted", "51", "small")
        assert set(result["usage"]) == set(LIMIT_NAMES) and result["usage"]["samples"] == 3
        assert run.output["messages"][-1].content == "The answer is 51."

    def test_disagreeing_answers_switch_to_the_calculator(self) -> None:
        graph = build_demo_graph(model=model(["10", "15", "13", "2", "9"], "7 * 8 - 5"))
        run = capture_verdicts(graph, QUESTION, CONFIG)
        assert run.actions == ["switch", "accept"]
        assert run.verdicts[0]["verdict"]["switch_to"] == "calculator"
        assert [v["target"] for v in run.verdicts] == ["small", "calculator"]
        result = run.output["result"]
        assert (result["status"], result["answer"], result["text"]) == ("accepted", "51", "7 * 8 - 5 = 51")
        assert result["served_by"] == "calculator"

    def test_a_spent_budget_stops_the_run(self) -> None:
        graph = build_demo_graph(
            model=model(["10", "15", "13", "2", "9"], "7 * 8 - 5"), budget=Budget(samples=4)
        )
        run = capture_verdicts(graph, QUESTION, CONFIG)
        assert run.actions[-1] == "stop"
        result = run.output["result"]
        assert result["status"] == "stopped"
        # 3 samples, then one more draw up to the limit: committed use reached it, so "spent"; and
        # the switch to the calculator that low confidence calls for is not started without samples.
        assert result["reason"].startswith(
            "step 'solve' budget 'samples' is spent (4 of 4); the switch it called for was not started"
        )
        assert run.actions == ["stop"]
        assert result["usage"]["samples"] == 4

    def test_an_invented_number_is_named_in_the_refine_feedback(self) -> None:
        # The expressions agree with each other, but 15 is not a number of the question.
        scripted = model(["10", "15", "13", "2", "9"], "7 * 8 - 5 - 15")
        run = capture_verdicts(build_demo_graph(model=scripted), QUESTION, CONFIG)
        assert run.actions == ["switch", "refine", "switch", "ask_user"]
        assert [v["target"] for v in run.verdicts] == ["small", "calculator", "calculator", "python"]
        finding = (
            "numbers_from_question: the expression '7 * 8 - 5 - 15' uses 15, which is not in the question"
        )
        refine = run.verdicts[1]["verdict"]
        assert refine["reason"] == f"failed check(s) {finding}"
        assert (
            refine["feedback"] == f"The answer failed these checks: {finding}. Correct it and answer again."
        )
        # The feedback reached the model, and quoting 15 in it did not make 15 the question's number:
        # the refined attempt failed the same check.
        assert any(c.messages[-1]["content"] == refine["feedback"] for c in scripted.calls)
        assert run.verdicts[2]["verdict"]["reason"].startswith(f"failed check(s) {finding} after 1 refines")
        assert run.output["result"]["status"] == "needs_user"

    def test_without_a_person_ask_user_ends_the_run_as_needs_user(self) -> None:
        # Every expression is refused, by the calculator and by python: nothing agrees anywhere.
        graph = build_demo_graph(model=model(["10", "15", "13", "2", "9"], "7 * (8 - 5"))
        run = capture_verdicts(graph, QUESTION, CONFIG)
        assert run.actions == ["switch", "switch", "refine", "ask_user"]
        assert [v["target"] for v in run.verdicts] == ["small", "calculator", "python", "python"]
        assert not run.interrupted
        assert run.output["result"]["status"] == "needs_user"

    def test_an_interactive_run_pauses_and_takes_the_persons_answer(self) -> None:
        graph = build_demo_graph(
            model=model(["10", "15", "13", "2", "9"], "7 * (8 - 5"),
            interactive=True,
            checkpointer=InMemorySaver(),
        )
        paused = capture_verdicts(graph, QUESTION, CONFIG)
        assert paused.interrupted and paused.actions[-1] == "ask_user"
        done = capture_verdicts(graph, Command(resume={"action": "answer", "answer": "51"}), CONFIG)
        result = done.output["result"]
        assert (result["status"], result["answer"], result["served_by"]) == ("answered_by_user", "51", "user")

    def test_every_verdict_and_a_summary_go_to_a_log_that_verifies(self, tmp_path: Path) -> None:
        path = tmp_path / "demo.jsonl"
        with DecisionLog(path) as log:
            graph = build_demo_graph(model=model(["10", "15", "13", "2", "9"], "7 * 8 - 5"), log=log)
            run = capture_verdicts(graph, QUESTION, CONFIG)
        report = verify_log(path)
        assert report.ok and report.records == len(run.verdicts) + 1
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert [r["action"] for r in records[:-1]] == run.actions
        summary = records[-1]
        assert summary["kind"] == "summary" and summary["run_id"] == "run-1"
        assert summary["final_answer"] == "51"
        assert [h["action"] for h in summary["sampling_history"]] == ["switch", "accept"]

    def test_the_async_path_reaches_the_same_verdicts(self) -> None:
        # The batch runner drives the graph with ainvoke: the async twins must decide the same.
        graph = build_demo_graph(model=model(["10", "15", "13", "2", "9"], "7 * 8 - 5"))
        run = asyncio.run(acapture_verdicts(graph, QUESTION, CONFIG))
        assert run.actions == ["switch", "accept"]
        assert run.output["result"]["answer"] == "51"
        state = asyncio.run(graph.ainvoke(QUESTION, CONFIG))
        assert state["result"]["served_by"] == "calculator"


class TestShippedCalibration:
    def test_the_embedded_models_own_agreeing_answers_are_not_taken_at_their_word(self) -> None:
        # On the development set the model's own answers, agreeing or not, were right a few times in a
        # hundred: calibrated, three agreeing answers are far from "probably right", so the step moves on.
        shipped = demo_policy()
        assert shipped.calibration is not None and shipped.calibration is shipped_calibration()
        embedded = "embedded:SmolLM2-135M-Instruct.Q4_1"
        own = shipped.calibration.curves[embedded]
        assert own(1.0) < shipped.accept_threshold
        scripted = model(["51"], "7 * 8 - 5", name=embedded)  # answers as the embedded model is named
        raw = capture_verdicts(build_demo_graph(model=scripted), QUESTION, CONFIG)
        assert raw.actions == ["accept"]  # another backend: no calibration, the raw confidence
        calibrated = capture_verdicts(build_demo_graph(model=scripted, policy=shipped), QUESTION, CONFIG)
        first = calibrated.verdicts[0]["verdict"]
        assert first["action"] == "switch"
        assert first["evidence"]["signals"]["fused"] >= 0.8 > first["confidence"]
