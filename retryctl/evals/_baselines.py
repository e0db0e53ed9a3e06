"""The plain baselines a graded run is judged beside: each member of the demo's group alone, and the
bare model's majority vote over N samples, on the same backend and the same tasks.

A baseline always answers (coverage 1): its answer is the majority of its samples and its confidence
the majority's share of them, the usual self-consistency confidence. That is what the agent must beat:
an agent whose accepted answers are right no more often than a plain majority vote adds nothing.
"""

from __future__ import annotations

from typing import Any

from retryctl._answers import answers_agree
from retryctl.agent._members import AnswerBackend, ToolBackend
from retryctl.agent._prompts import demo_equivalence
from retryctl.batch import Task
from retryctl.controller import Tally
from retryctl.models import Candidate, ModelBackend, SamplingParams
from retryctl.tools import ToolRegistry

__all__ = ["BASELINE_TEMPERATURE", "baseline_line"]

BASELINE_TEMPERATURE = 0.7
"""The demo's own sampling temperature, so that the baselines draw what the agent draws."""


def _system(answers: list[str | None], gold: str | None) -> dict[str, Any]:
    # The vote as the controller counts it: the leader (first seen wins a tie) and its share of all
    # samples, unanswered ones included.
    tally = Tally.of(answers)
    answer = tally.leader
    out: dict[str, Any] = {
        "answer": answer,
        "confidence": tally.agreement,
        "samples": tally.n,
        "answers": answers,
    }
    if gold is not None:
        out["correct"] = answer is not None and answers_agree(answer, gold)
    return out


async def baseline_line(
    task: Task,
    model: ModelBackend,
    tools: ToolRegistry,
    *,
    samples: int,
    tool_samples: int,
    group: str = "arithmetic",
    seed: int = 0,
) -> dict[str, Any]:
    """One task's baselines: ``model@N`` (majority of N own answers), ``model@1`` (its first answer),
    and ``<tool>@K`` for each tool of ``group`` (majority of K expressions the tool computed)."""
    messages = [{"role": "user", "content": task.question}]
    params = SamplingParams(temperature=BASELINE_TEMPERATURE, seed=seed, max_tokens=40)
    own: list[Candidate] = await AnswerBackend(model).sample(messages, params, k=samples)
    direct = [demo_equivalence(c.text) for c in own]
    systems = {f"model@{samples}": _system(direct, task.gold), "model@1": _system(direct[:1], task.gold)}
    for key in tools.group(group):
        member = ToolBackend(model, tools.get(key))
        drawn = await member.sample(messages, params, k=tool_samples)
        systems[f"{key}@{tool_samples}"] = _system([c.answer for c in drawn], task.gold)
    line: dict[str, Any] = {"id": task.id, "systems": systems}
    if task.gold is not None:
        line["gold"] = task.gold
    if task.stratum is not None:
        line["stratum"] = task.stratum
    return line
