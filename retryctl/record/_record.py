"""Record a sample bank from a model: K samples per task, with everything a policy is tuned on.

Each task becomes one bank line (the format :mod:`retryctl.banks` reads), written whole when the
task's samples are all in, so a stopped recording loses at most the tasks in flight and a rerun with
the same file records only the tasks it lacks. With an ``executor`` (``retryctl record --ray``) the
tasks are drawn on its workers (:class:`BankJob`: each builds the model once, from its address or the
embedded one) and this process writes the bank. A sample keeps its text, the answer extracted from it,
per-token logprobs and (where the backend gives them) the top alternatives at each token, the
per-token diagnostics a decision log keeps under the same names (``token_text``, ``token_entropy``
with ``entropy_kind``, ``token_top3``), its token count, finish reason, latency and seed. A staged
sample (``SamplingParams.stages``) has its answer read from its last stage's text alone
(:func:`~retryctl.models._stages.answer_text`) and keeps, per stage in order, its ``name``, ``tokens``,
``finish_reason``, ``chars`` (the length of its part of the text, which the stages split in order)
and, where the backend says, ``prompt_tokens`` (what its request re-evaluated).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from retryctl._answers import default_equivalence, number_equivalence
from retryctl.batch import Executor, Task
from retryctl.batch._executor import Done, drive
from retryctl.batch._files import BANK_LINES, ResultsFile, read_results
from retryctl.exceptions import RuntimeFailure
from retryctl.models import Candidate, ModelBackend, SamplingParams, Stage, StageOutcome
from retryctl.models._stages import answer_text
from retryctl.models._token_stats import token_stats

__all__ = [
    "EXTRACTIONS",
    "BankJob",
    "Extraction",
    "RecordPlan",
    "bank_line",
    "record_bank",
    "recorded_ids",
    "sampling_of",
    "stage_settings",
]

Extraction = Literal["default", "number"]
EXTRACTIONS: dict[str, Callable[[str], str | None]] = {
    "default": default_equivalence,
    "number": number_equivalence,
}
"""How a sample's answer is read from its text: ``default`` (boxed, "the answer is", last line) or
``number`` (the number stated as the answer, else the last number)."""


@dataclass(frozen=True, kw_only=True)
class RecordPlan:
    """What to draw for each task."""

    samples: int
    """Samples per task (the bank's K)."""
    params: SamplingParams
    """How to sample; its ``seed`` is the first sample's, sample i uses seed + i."""
    system: str | None = None
    """A system message put before each task's question."""
    extraction: Extraction = "default"
    """How each sample's answer is extracted."""
    concurrency: int = 1
    """Tasks drawn at once (the embedded model decodes one at a time whatever this is)."""

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The stages each sample runs, one request each (``params.stages``; none: one request)."""
        return self.params.stages


def _sample(
    candidate: Candidate, extract: Callable[[str], str | None], stages: Sequence[Stage]
) -> dict[str, Any]:
    # A staged sample's answer is its last stage's (answer_text), as a step reads it.
    read = answer_text(candidate.stages, stages) if stages else candidate.text
    out: dict[str, Any] = {
        "text": candidate.text,
        "answer": None if read is None else extract(read),
        "tokens": candidate.usage.output_tokens,
        "finish_reason": candidate.finish_reason,
        "latency_ms": round(candidate.latency_ms, 3),
        "seed": candidate.seed,
    }
    if candidate.stages:
        out["stages"] = [_stage(stage) for stage in candidate.stages]
    if candidate.logprobs is not None:
        out["token_logprobs"] = [t.logprob for t in candidate.logprobs]
        if any(t.top for t in candidate.logprobs):
            out["top_logprobs"] = [[[tok, lp] for tok, lp in t.top] for t in candidate.logprobs]
        # The decision log's per-token fields, by the same names (its token_logprobs, rounded, are
        # not: a bank keeps them exact for replays).
        stats = token_stats(candidate.logprobs)
        out |= {k: v for k, v in stats.items() if k not in ("token_logprobs", "tokens_total")}
    return out


def _stage(outcome: StageOutcome) -> dict[str, Any]:
    # The stage's text is the sample's from ``chars`` on; its length (not a second copy) is kept.
    out: dict[str, Any] = {
        "name": outcome.name,
        "tokens": outcome.tokens,
        "finish_reason": outcome.finish_reason,
        "chars": len(outcome.text),
    }
    if outcome.prompt_tokens is not None:
        out["prompt_tokens"] = outcome.prompt_tokens
    return out


def stage_settings(stage: Stage) -> dict[str, Any]:
    """A stage as a bank's ``sampling.stages`` records it (every knob, ``None`` for the draw's)."""
    return {
        "name": stage.name,
        "temperature": stage.temperature,
        "top_p": stage.top_p,
        "top_k": stage.top_k,
        "min_p": stage.min_p,
        "max_tokens": stage.max_tokens,
        "start": stage.start,
        "end": list(stage.end),
    }


def sampling_of(plan: RecordPlan) -> dict[str, Any]:
    """How a bank line was drawn, as its ``sampling`` key says (a resumed recording must match it).

    ``stages`` is there only for a staged recording, so that a bank recorded before stages existed
    still matches an unstaged rerun."""
    params = plan.params
    staged = {"stages": [stage_settings(s) for s in params.stages]} if params.stages else {}
    return {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "min_p": params.min_p,
        "seed": params.seed,
        "max_tokens": params.max_tokens,
        "system": plan.system,
        "extraction": plan.extraction,
    } | staged


def bank_line(task: Task, candidates: Sequence[Candidate], plan: RecordPlan, model: str) -> dict[str, Any]:
    """One task's bank line: the task, the samples, and how they were drawn."""
    extract = EXTRACTIONS[plan.extraction]
    line: dict[str, Any] = {
        "id": task.id,
        "question": task.question,
        "gold": task.gold if task.gold is not None else "",
        "samples": [_sample(c, extract, plan.stages) for c in candidates],
        "model": model,
        "sampling": sampling_of(plan),
    }
    if task.stratum is not None:
        line["stratum"] = task.stratum
    return line


def recorded_ids(path: str) -> set[str]:
    """Ids of the tasks a bank already holds (none for a missing file); a file that is not a bank raises."""
    return {str(line["id"]) for line in read_results(path, kind=BANK_LINES).results}


async def record_bank(
    tasks: Sequence[Task],
    backend: ModelBackend,
    out: str,
    plan: RecordPlan,
    *,
    recorded: Collection[str] | None = None,
    on_done: Callable[[Task, dict[str, Any], float], None] | None = None,
    executor: Executor | None = None,
    base_url: str | None = None,
    model_name: str | None = None,
    stage_mode: str | None = None,
    chat_template: str | None = None,
) -> int:
    """Append a bank line to ``out`` for every task it does not hold yet; returns how many were added.

    ``recorded`` is the ids ``out`` holds when the caller has read them already (else they are read
    here). ``on_done(task, line, seconds)`` is called after each line is written. A task whose gold
    is missing is recorded with an empty gold: such a bank cannot be graded, only replayed. With an
    ``executor`` its workers draw (``backend`` is not used: each builds the model from ``base_url`` and
    ``model_name``, and ``stage_mode``/``chat_template`` as :class:`BankJob` says); a task whose
    worker kept failing gets no line and raises at the end.
    """
    held = recorded_ids(out) if recorded is None else recorded
    todo = [t for t in tasks if t.id not in held]
    if executor is not None:
        job = BankJob(
            plan=plan,
            base_url=base_url,
            model_name=model_name,
            stage_mode=stage_mode,
            chat_template=chat_template,
        )
        return await _record_on(executor, job, todo, out, on_done)
    messages_of = _messages(plan.system)
    bank = ResultsFile(out, kind=BANK_LINES)
    gate = asyncio.Semaphore(plan.concurrency)
    written = 0

    async def one(task: Task) -> None:
        nonlocal written
        async with gate:
            started = time.perf_counter()
            candidates = await backend.sample(messages_of(task), plan.params, k=plan.samples)
            line = bank_line(task, candidates, plan, backend.name)
            bank.append(line)
            written += 1
            if on_done is not None:
                on_done(task, line, time.perf_counter() - started)

    try:
        async with asyncio.TaskGroup() as group:
            for task in todo:
                group.create_task(one(task))
    finally:
        bank.close()
    return written


def _messages(system: str | None) -> Callable[[Task], list[dict[str, str]]]:
    def build(task: Task) -> list[dict[str, str]]:
        user = {"role": "user", "content": task.question}
        return [{"role": "system", "content": system}, user] if system else [user]

    return build


@dataclass(frozen=True, kw_only=True)
class BankJob:
    """One task's bank line on a worker: the model built once per worker (``retryctl record --ray``)."""

    plan: RecordPlan
    """What to draw."""
    base_url: str | None = None
    """The OpenAI-compatible server (``None``: the embedded model)."""
    model_name: str | None = None
    """The model on that server."""
    stage_mode: str | None = None
    """How that server continues a stage (``OpenAIBackend.stage_mode``)."""
    chat_template: str | None = None
    """The GGUF file whose chat template renders the prompt (``stage_mode="completions"``)."""
    logs: bool = False
    """A recording writes no decision log."""

    def build(self, log: Any) -> ModelBackend:
        """The model, once per worker."""
        from retryctl.agent._graph import demo_model

        model = demo_model(self.base_url, self.model_name)
        if self.stage_mode is not None:
            from retryctl.models._openai_stages import gguf_renderer, set_stage_mode

            render = gguf_renderer(self.chat_template) if self.chat_template else None
            set_stage_mode(model, self.stage_mode, render)  # type: ignore[arg-type]  # a server's
        return model

    async def run(self, backend: ModelBackend, task: Task) -> dict[str, Any]:
        """The task's bank line, with how long it took (``elapsed_s``, read off by the driver)."""
        started = time.perf_counter()
        messages = _messages(self.plan.system)(task)
        candidates = await backend.sample(messages, self.plan.params, k=self.plan.samples)
        line = bank_line(task, candidates, self.plan, backend.name)
        return {**line, "elapsed_s": time.perf_counter() - started}

    def failed(self, task: Task, exc: BaseException) -> dict[str, Any]:
        """Not written (a bank line is a whole task's samples): the next run draws it."""
        return {"id": task.id, "error": f"{type(exc).__name__}: {exc}"[:500]}


async def _record_on(
    executor: Executor,
    job: BankJob,
    todo: Sequence[Task],
    out: str,
    on_done: Callable[[Task, dict[str, Any], float], None] | None,
) -> int:
    bank = ResultsFile(out, kind=BANK_LINES)
    written = 0
    failed: list[str] = []

    def accept(task: Task, done: Done) -> bool:
        nonlocal written
        line = dict(done.line)
        if "error" in line:
            failed.append(f"{task.id}: {line['error']}")
            return False
        seconds = float(line.pop("elapsed_s", 0.0))
        bank.append(line)
        written += 1
        if on_done is not None:
            on_done(task, line, seconds)
        return False

    try:
        await drive(executor, job, todo, accept=accept)
    finally:
        bank.close()
    if failed:
        raise RuntimeFailure(
            f"{len(failed)} task(s) not recorded (run again to draw them); the first: {failed[0]}"
        )
    return written
