"""``sample_final=True``: the answer the agent returns is a draw of the answer the verdict accepted, and
the verdict's record names that draw (``candidates_summary["chosen"]``, its index among the draws)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage

from retryctl.controller import Policy, default_equivalence
from retryctl.middleware import RetryController
from tests.middleware._scripted import ScriptedChat, call, say
from tests.middleware._support import Agent, ano_wait, last_ai, multiply, no_wait, records

_STOPPED = "retryctl stopped the agent"


def _controller(log: Path, policy: Policy) -> RetryController:
    return RetryController(log=log, sample_final=True, model_policy=policy, sleep=no_wait, asleep=ano_wait)


def _sampled(log: Path) -> list[dict[str, Any]]:
    """The model verdicts that judged samples of a final answer (their summary lists the draws)."""
    rows = records(log)
    return [r for r in rows if r["kind"] == "verdict" and "chosen" in (r.get("candidates_summary") or {})]


class TestReturnedAnswerIsAccepted:
    def test_the_accepted_answer_is_returned_not_the_first_draw(self, tmp_path: Path, mode: str) -> None:
        # The script: "5" first, then "4" four times; the verdict accepts '4'.
        model = ScriptedChat(script=[say("The answer is 5"), *[say("The answer is 4") for _ in range(7)]])
        policy = Policy(weights={"validators": 1.0, "agreement": 1.0}, max_samples=8)
        log = tmp_path / "log.jsonl"
        out = Agent(model, [multiply], _controller(log, policy), mode).ask("6 - 2?")
        [verdict] = _sampled(log)
        assert verdict["action"] == "accept" and verdict["answer"] == "4"
        assert last_ai(out).content == "The answer is 4"
        summary = verdict["candidates_summary"]
        assert summary["answers"][0] == "5"
        assert summary["answers"][summary["chosen"]] == "4" and summary["chosen"] >= 1


# A draw of the script: a final answer (its number), a tool call (no answer), or a failed call.
_draw = st.one_of(
    st.sampled_from(["3", "4", "5"]),
    st.just("tool"),
    st.just("error"),
)


def _message(item: str, i: int) -> AIMessage | Exception:
    if item == "tool":
        return call("multiply", {"a": 2, "b": 2}, f"c{i}")
    if item == "error":
        return TimeoutError("read timed out")
    return say(f"The answer is {item}")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    first=st.sampled_from(["3", "4", "5"]),
    rest=st.lists(_draw, max_size=7),
    min_samples=st.integers(1, 4),
    spare=st.integers(0, 4),
    threshold=st.sampled_from([0.5, 0.8, 0.95]),
)
def test_a_returned_answer_is_the_accepted_one(
    first: str, rest: list[str], min_samples: int, spare: int, threshold: float
) -> None:
    """Random draws through a real ``create_agent``: whenever the verdict on the samples accepts, the
    agent's answer is equivalent to the verdict's, and the record's ``chosen`` draw is that message."""
    script = [first, *rest]
    policy = Policy(
        weights={"validators": 1.0, "agreement": 1.0},
        min_samples=min_samples,
        max_samples=min_samples + spare,
        accept_threshold=threshold,
        low_confidence=("stop",),
    )
    # Enough items that the script never runs out (a used-up script would be one more failed draw).
    model = ScriptedChat(script=[_message(item, i) for i, item in enumerate([*script, *["9"] * 9])])
    with tempfile.TemporaryDirectory() as where:
        log = Path(where) / "log.jsonl"
        out = Agent(model, [multiply], _controller(log, policy), "sync").ask("a number?")
        [verdict] = _sampled(log)
    returned = last_ai(out).content
    summary = verdict["candidates_summary"]
    answers = summary["answers"]
    event(verdict["action"])
    if verdict["action"] == "accept":
        assert not str(returned).startswith(_STOPPED)
        assert default_equivalence(str(returned)) == verdict["answer"]
        # The named draw is the message returned: its answer, and its text as the model sent it
        # (the draws that answered are the model's calls in order, failed ones not among them).
        assert answers[summary["chosen"]] == verdict["answer"]
        drawn_texts = [str(m.content) for m in _delivered(script, len(answers))]
        assert drawn_texts[summary["chosen"]] == returned
    else:
        assert str(returned).startswith(_STOPPED)


def _delivered(script: list[str], n: int) -> list[AIMessage]:
    """The first ``n`` draws that came back (failed calls end the sampling, so none is skipped)."""
    drawn = [_message(item, i) for i, item in enumerate([*script, *["9"] * 9])]
    return [m for m in drawn if isinstance(m, AIMessage)][:n]
