"""How a step samples: the knobs of each attempt's draws (:class:`SamplingSchedule`), temperature by
attempt, on disagreement and by stage, and each sample's seed. The loop that draws is
:mod:`retryctl.nodes._sampling`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from retryctl.exceptions import ConfigError
from retryctl.models import SamplingParams, Stage
from retryctl.models._stages import check_stages

__all__ = ["SamplingSchedule"]

_SEED_STRIDE = 1000  # seeds of successive attempts never overlap while an attempt draws < 1000 samples


@dataclass(frozen=True, kw_only=True)
class SamplingSchedule:
    """The sampling knobs of each attempt of a step.

    The temperature of attempt ``n`` is ``temperatures[n - 1]`` (the last one repeats): e.g.
    ``(0.2, 0.7, 1.0)`` starts nearly greedy and widens the search on each retry. Once ``min_samples``
    are in and the stopping rule asks for more (the samples disagree), further draws use
    ``disagreement_temperature`` when it is set. With ``stages``, these temperatures are the draw's:
    they reach the stages that leave ``temperature`` unset, and a stage's own temperature holds on
    every draw (a schedule whose every stage sets one refuses a ``disagreement_temperature`` or a
    second attempt temperature, which would change nothing). Every candidate gets its own seed
    (``seed`` + a stride per attempt + its index), so branches differ and a rerun draws the same ones.
    """

    temperatures: tuple[float, ...] = (0.7,)
    """Temperature per attempt; the last value repeats."""
    disagreement_temperature: float | None = None
    """Temperature of the extra draws made because the samples disagreed; ``None`` keeps the attempt's.
    With ``stages``: of the stages that leave ``temperature`` unset."""
    top_p: float | None = None
    """Nucleus sampling mass, ``None`` for the backend default."""
    seed: int | None = None
    """Base seed; ``None`` leaves seeding to the backend."""
    max_tokens: int = 512
    """Most tokens per candidate, sent with each call; also the output tokens a sample reserves, but for
    a backend that says its model answers under another limit (``output_limit``: a LangChain chat
    model's own ``max_tokens``, which a ``LangChainBackend`` that sends only ``stop`` keeps)."""
    batch: int = 1
    """Samples per extra draw once ``min_samples`` are in."""
    stages: tuple[Stage, ...] = ()
    """Decode each sample in these stages (e.g. a ``think`` stage at a low temperature, then an
    ``answer`` stage at the attempt's), one request each, the second continuing the first's text. A
    stage's ``None`` knob takes the draw's value; a sample then reserves the stages' caps summed as
    output (``max_tokens`` is not used) and the prompt once per stage, with what came before it, as
    input (:func:`~retryctl.models._stages.staged_input_bound`). A sample's answer is read from the
    last stage's text, its delimiters taken off (:func:`~retryctl.models._stages.answer_text`).
    ``()``: one request per sample."""

    def __post_init__(self) -> None:
        if not self.temperatures:
            raise ConfigError(
                field="temperatures", value=self.temperatures, problem="needs at least one value"
            )
        for i, t in enumerate(self.temperatures):
            if not 0.0 <= t <= 5.0 or math.isnan(t):
                raise ConfigError(field=f"temperatures[{i}]", value=t, problem="must be in [0, 5]")
        dt = self.disagreement_temperature
        if dt is not None and (not 0.0 <= dt <= 5.0 or math.isnan(dt)):
            raise ConfigError(field="disagreement_temperature", value=dt, problem="must be in [0, 5]")
        if self.batch < 1:
            raise ConfigError(field="batch", value=self.batch, problem="must be >= 1")
        object.__setattr__(self, "stages", check_stages(self.stages))
        self._check_stage_temperatures()
        # The rest (top_p, seed, max_tokens, stages) is checked by SamplingParams itself.
        self.params(attempt=1, drawn=0, disagreed=False)

    def _check_stage_temperatures(self) -> None:
        """A schedule's temperatures reach only the stages that leave theirs unset: where every stage
        sets its own, a ``disagreement_temperature`` or a second attempt temperature would change
        nothing, and the extra draws would be the first ones again."""
        own = [f"{s.name}={s.temperature:g}" for s in self.stages if s.temperature is not None]
        if not self.stages or len(own) < len(self.stages):
            return
        why = f"every stage sets its own temperature ({', '.join(own)}), so it would reach none"
        if self.disagreement_temperature is not None:
            raise ConfigError(
                field="disagreement_temperature",
                value=self.disagreement_temperature,
                problem=f"{why}: leave temperature unset on the stage(s) it should widen",
            )
        if len(set(self.temperatures)) > 1:
            raise ConfigError(
                field="temperatures",
                value=self.temperatures,
                problem=f"{why}: leave temperature unset on the stage(s) the attempts should vary",
            )

    def params(self, *, attempt: int, drawn: int, disagreed: bool, strictness: float = 1.0) -> SamplingParams:
        """The sampling parameters of the draw that starts at sample ``drawn`` of ``attempt``, at the
        member's ``strictness`` (the policy's relaxation schedule)."""
        temperature = self.temperatures[min(attempt, len(self.temperatures)) - 1]
        if disagreed and self.disagreement_temperature is not None:
            temperature = self.disagreement_temperature
        seed = None
        if self.seed is not None:
            seed = (self.seed + _SEED_STRIDE * (attempt - 1) + drawn) % 2**31
        return SamplingParams(
            temperature=temperature,
            top_p=self.top_p,
            seed=seed,
            max_tokens=self.max_tokens,
            strictness=strictness,
            stages=self.stages,
        )
