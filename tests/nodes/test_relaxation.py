"""Relaxation in the controlled step: a refine of output decoded under a grammar lowers the member's
strictness on the policy's schedule, and the verdict, the feedback and the record say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from retryctl.audit import DecisionLog, VerdictRecord, read_records, verify_log
from retryctl.controller import Policy, Relaxation, ValidatorResult
from retryctl.models import Candidate, ConstrainedBackend, Grammar, SamplingParams
from retryctl.models._messages import Message
from retryctl.nodes import ControlledStep
from retryctl.testing import ScriptedBackend
from tests.nodes._support import Runner, user

ONE: dict[str, Any] = {"stopping": "sc-1", "min_samples": 1, "max_samples": 1}
PERMUTATIONS = Grammar(name="permutations", gbnf='root ::= "3 + 4" | "4 + 3"', strictness=1.0)
NUMBERS = Grammar(
    name="numbers", gbnf="root ::= [0-9]+", strictness=0.5, description="a whole number, digits only"
)


def _summary(record: Any) -> dict[str, Any]:
    """A record's ``candidates_summary`` as the dict it is (typed as any JSON value)."""
    return cast("dict[str, Any]", record.candidates_summary)


def answer(texts: dict[str | None, str]) -> Any:
    """A scripted item answering by the grammar it is decoded under, and saying it was."""

    def item(messages: list[Message], params: SamplingParams) -> Candidate:
        name = params.grammar.name if params.grammar is not None else None
        return Candidate(text=texts[name], model="calculator", grammar=name)

    return item


def is_seven(text: str) -> ValidatorResult:
    return ValidatorResult("is_seven", text.strip() == "7", f"got {text.strip()!r}")


def sent(backend: ScriptedBackend) -> list[tuple[float, str | None]]:
    """The strictness and the grammar of every call the member received."""
    return [(c.params.strictness, c.params.grammar.name if c.params.grammar else None) for c in backend.calls]


def records(path: Path) -> list[VerdictRecord]:
    return [r for r in read_records(path) if isinstance(r, VerdictRecord)]


class TestRelaxingStep:
    def test_a_refine_relaxes_the_member_to_its_wider_rung(self, run: Runner, tmp_path: Path) -> None:
        inner = ScriptedBackend(
            [answer({"permutations": "3 + 4", "numbers": "7"})], model="calculator", cycle=True
        )
        member = ConstrainedBackend(inner, [PERMUTATIONS, NUMBERS])
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            step = ControlledStep(member, policy=Policy(**ONE), validators=[is_seven], log=log)
            out = run(step.compile(), user("What is 3 + 4?"))

        assert out.actions == ["refine", "accept"]
        assert sent(inner) == [(1.0, "permutations"), (0.8, "numbers")]
        reason = out.verdicts[0]["verdict"]["reason"]
        assert reason == (
            "failed check(s) is_seven: got '3 + 4'; relaxing calculator's constraint: "
            "strictness 1.00 -> 0.80 (grammar 'permutations' -> 'numbers')"
        )
        assert reason.isascii()
        # The model is told, in one line after the check's own feedback.
        feedback = inner.calls[1].messages[-1]["content"]
        assert feedback.splitlines()[-1] == (
            "Your output is now held to the wider grammar 'numbers': a whole number, digits only."
        )
        assert feedback.splitlines()[0].startswith("The answer failed these checks: is_seven: got '3 + 4'.")
        refined, accepted = records(path)
        assert _summary(refined)["grammars"] == ["permutations"]
        assert _summary(refined)["strictness"] == 1.0
        assert _summary(refined)["relaxation"] == {
            "member": "calculator",
            "from": 1.0,
            "to": 0.8,
            "grammar_from": "permutations",
            "grammar_to": "numbers",
            "at_floor": False,
        }
        assert _summary(accepted)["grammars"] == ["numbers"]
        assert _summary(accepted)["strictness"] == 0.8
        assert "relaxation" not in _summary(accepted)
        assert out.output["result"]["text"] == "7"
        assert verify_log(path).ok

    def test_each_failure_steps_down_the_schedule_to_its_floor(self, run: Runner, tmp_path: Path) -> None:
        inner = ScriptedBackend(
            [answer({"permutations": "3 + 4", "numbers": "8"})], model="calculator", cycle=True
        )
        member = ConstrainedBackend(inner, [PERMUTATIONS, NUMBERS])
        policy = Policy(
            **ONE, max_refines=3, low_confidence=("stop",), relaxation=Relaxation(factor=0.5, floor=0.5)
        )
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            step = ControlledStep(member, policy=policy, validators=[is_seven], log=log)
            out = run(step.compile(), user("What is 3 + 4?"))

        assert out.actions == ["refine", "refine", "refine", "stop"]
        assert sent(inner) == [(1.0, "permutations"), (0.5, "numbers"), (0.5, "numbers"), (0.5, "numbers")]
        reasons = [v["verdict"]["reason"] for v in out.verdicts]
        assert reasons[0].endswith("strictness 1.00 -> 0.50 (grammar 'permutations' -> 'numbers')")
        assert reasons[1].endswith("; calculator's constraint is at its floor 0.50 (grammar 'numbers')")
        floor = _summary(records(path)[1])["relaxation"]
        assert floor == {
            "member": "calculator",
            "from": 0.5,
            "to": 0.5,
            "grammar_from": "numbers",
            "grammar_to": "numbers",
            "at_floor": True,
        }
        # At the floor nothing relaxes, so the model is not told that anything did.
        assert "wider grammar" not in inner.calls[2].messages[-1]["content"]

    def test_the_default_schedule_reaches_each_strictness_in_turn(self, run: Runner) -> None:
        inner = ScriptedBackend([answer({"permutations": "3 + 4", "numbers": "8", "wide": "9"})], cycle=True)
        wide = Grammar(name="wide", regex=".*", strictness=0.3)
        member = ConstrainedBackend(inner, [PERMUTATIONS, NUMBERS, wide])
        policy = Policy(**ONE, max_refines=7, low_confidence=("stop",))
        out = run(ControlledStep(member, policy=policy, validators=[is_seven]).compile(), user("q"))
        assert out.actions == ["refine"] * 7 + ["stop"]
        strictness = [s for s, _ in sent(inner)]
        assert strictness == pytest.approx([1.0, 0.8, 0.64, 0.512, 0.4096, 0.32768, 0.3, 0.3])
        assert [g for _, g in sent(inner)] == ["permutations"] + ["numbers"] * 3 + ["wide"] * 4
        reasons = [v["verdict"]["reason"] for v in out.verdicts]
        assert reasons[5].endswith(
            "relaxing scripted's constraint: strictness 0.33 -> 0.30 (grammar 'wide' still)"
        )
        assert reasons[6].endswith("scripted's constraint is at its floor 0.30 (grammar 'wide')")

    def test_output_no_grammar_shaped_does_not_relax(self, run: Runner) -> None:
        inner = ScriptedBackend(["3 + 4", "7"], model="calculator")  # takes no grammar: its candidates say so
        member = ConstrainedBackend(inner, [PERMUTATIONS, NUMBERS])
        out = run(ControlledStep(member, policy=Policy(**ONE), validators=[is_seven]).compile(), user("q"))
        assert out.actions == ["refine", "accept"]
        assert sent(inner) == [(1.0, "permutations"), (1.0, "permutations")]
        assert "relaxing" not in out.verdicts[0]["verdict"]["reason"]

    def test_relaxation_none_never_relaxes(self, run: Runner) -> None:
        inner = ScriptedBackend([answer({"permutations": "3 + 4", "numbers": "7"})], cycle=True)
        member = ConstrainedBackend(inner, [PERMUTATIONS, NUMBERS])
        policy = Policy(**ONE, relaxation=None, low_confidence=("stop",))
        out = run(ControlledStep(member, policy=policy, validators=[is_seven]).compile(), user("q"))
        assert out.actions == ["refine", "refine", "stop"]
        assert sent(inner) == [(1.0, "permutations")] * 3
        assert all("constraint" not in v["verdict"]["reason"] for v in out.verdicts)

    def test_a_member_without_a_ladder_is_relaxed_by_strictness_alone(self, run: Runner) -> None:
        # Any backend that decodes under grammars of its own (Candidate.grammar) gets the strictness;
        # without grammar_at the step cannot name the rung it moves to.
        def own(messages: list[Message], params: SamplingParams) -> Candidate:
            text = "3 + 4" if params.strictness == 1.0 else "7"
            return Candidate(text=text, model="m", grammar="house")

        inner = ScriptedBackend([own], model="m", cycle=True)
        out = run(ControlledStep(inner, policy=Policy(**ONE), validators=[is_seven]).compile(), user("q"))
        assert out.actions == ["refine", "accept"]
        assert [c.params.strictness for c in inner.calls] == [1.0, 0.8]
        assert out.verdicts[0]["verdict"]["reason"].endswith(
            "relaxing m's constraint: strictness 1.00 -> 0.80 (was grammar 'house')"
        )
        assert (
            inner.calls[1].messages[-1]["content"].endswith("Your output is now held to a looser constraint.")
        )

    def test_each_member_has_its_own_schedule(self, run: Runner) -> None:
        first = ScriptedBackend([answer({"permutations": "3 + 4", "numbers": "8"})], model="a", cycle=True)
        second = ScriptedBackend([answer({"permutations": "7", "numbers": "7"})], model="b", cycle=True)
        group = [
            ConstrainedBackend(first, [PERMUTATIONS, NUMBERS]),
            ConstrainedBackend(second, [PERMUTATIONS]),
        ]
        policy = Policy(**ONE, max_refines=1, low_confidence=("switch", "stop"))
        out = run(ControlledStep(group, policy=policy, validators=[is_seven]).compile(), user("q"))
        assert out.actions == ["refine", "switch", "accept"]
        assert sent(first) == [(1.0, "permutations"), (0.8, "numbers")]
        assert sent(second) == [(1.0, "permutations")]  # b failed nothing yet: it starts strict


class TestRelaxationSurvivesACheckpoint:
    def test_a_resumed_step_samples_at_the_relaxed_strictness(self, run: Runner) -> None:
        saver = InMemorySaver()
        config = {"configurable": {"thread_id": "relax"}}
        policy = Policy(**ONE, max_refines=1, low_confidence=("ask_user",))

        def step(script: dict[str | None, str]) -> tuple[ScriptedBackend, Any]:
            inner = ScriptedBackend([answer(script)], model="calculator", cycle=True)
            member = ConstrainedBackend(inner, [PERMUTATIONS, NUMBERS])
            graph = ControlledStep(member, policy=policy, validators=[is_seven]).compile(checkpointer=saver)
            return inner, graph

        before, graph = step({"permutations": "3 + 4", "numbers": "8"})
        out = run(graph, user("What is 3 + 4?"), config)
        assert out.actions == ["refine", "ask_user"] and out.interrupted
        assert graph.get_state(config).values["control"]["relaxed"] == {"calculator": 1}
        # Another process: a new step and member, the same checkpoint.
        after, graph = step({"permutations": "3 + 4", "numbers": "7"})
        out = run(graph, Command(resume={"action": "extend", "budget": {"attempts": 1}}), config)
        assert out.actions == ["retry", "accept"]
        assert sent(before) == [(1.0, "permutations"), (0.8, "numbers")]
        assert sent(after) == [(0.8, "numbers")]
