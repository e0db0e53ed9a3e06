"""Temperature by stage on the embedded model: one request at T 0.7 beside a low-temperature thinking stage
followed by an answer stage at 0.7, on the same tasks, in one run (issue #32, part 3).

    python bench/staged_sampling.py                    # record what is missing (resumable), then report
    python bench/staged_sampling.py --tasks 30 --samples 6 --work .bench-banks   # the defaults

Every arm is recorded with ``retryctl record`` into ``--work`` (default ``.bench-banks/``; a rerun adds
what a bank lacks) on word problems from ``retryctl.evals.word_problems`` at seed 21 (the ``small`` and
``one_step`` strata), which no other figure uses, with the reasoning prompt of
``bench/confidence_stopping.py`` and one token budget of 160 per sample in every arm:

* ``single T0.7``: one request, T 0.7, 160 tokens;
* ``think T0.3 + answer T0.7``: a ``think`` stage at T 0.3 (144 tokens) that ends where the model writes
  ``The answer is``, then an ``answer`` stage at T 0.7 (16 tokens) that continues after it and ends at
  the first ``.`` or newline;
* ``think T0.7 + answer T0.7``: the same two stages at one temperature, which separates what the lower
  temperature does from what splitting the request does (a thinking stage cut by its cap is closed with
  ``The answer is`` on a line of its own, so the answer stage always gets asked).

SmolLM2-135M has no thinking delimiters of its own: the stages' boundary is the phrase the prompt asks
for, given as the think stage's ``end`` strings. Per arm the script prints accuracy (the majority of all
K samples, ``sc-K``, and the ``default`` stopping policy, both from ``retryctl bench``), the default's
samples and tokens a question, the share of samples whose answer is right (less noisy than a majority
of K over few tasks) and its difference from the single request's, ± the paired standard error over
the tasks, mean tokens a sample, the share with no answer to extract (``--extract number`` falls back
on the last number, so this is rare), the share that never states ``The answer is N``, and per stage
its mean tokens, the share cut off by its cap and the mean prompt tokens its request re-evaluated.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _cli import retryctl  # bench/ is the script's directory

from retryctl.banks import load_bank
from retryctl.evals import word_problems
from retryctl.record._sweep import stage_figures
from retryctl.replay import NO_ANSWER, code_bank

SEED = 21
REASON = "Solve the math problem. Think step by step, then finish with: The answer is N."
BUDGET = 160
THINK_END = r"end=\nThe answer is,end=The answer is"
ANSWER = r"answer:temperature=0.7,max_tokens=16,end=.,end=\n"
STATED = re.compile(r"the answer is:?\s*\$?-?\d", re.IGNORECASE)
"""A sample that states its answer as the prompt asks (the ``number`` extraction reads any last number)."""


@dataclass(frozen=True)
class Arm:
    """One way of drawing the samples: the bank's name and ``retryctl record``'s sampling options."""

    name: str
    label: str
    options: tuple[str, ...]


ARMS = (
    Arm("staged-single-t0.7", "single T0.7", ("--temperature", "0.7", "--max-tokens", str(BUDGET))),
    Arm(
        "staged-think-t0.3",
        "think T0.3 + answer T0.7",
        ("--stage", f"think:temperature=0.3,max_tokens=144,{THINK_END}", "--stage", ANSWER),
    ),
    Arm(
        "staged-think-t0.7",
        "think T0.7 + answer T0.7",
        ("--stage", f"think:temperature=0.7,max_tokens=144,{THINK_END}", "--stage", ANSWER),
    ),
)


def _tasks(path: Path, count: int) -> Path:
    lines = [wp.task() for wp in word_problems(count, seed=SEED, strata=("small", "one_step"))]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _record(arm: Arm, tasks: Path, bank: Path, samples: int) -> None:
    started = time.monotonic()
    retryctl(
        "record", str(tasks), "--out", str(bank), "--samples", str(samples), "--system", REASON,
        "--extract", "number", *arm.options,
    )  # fmt: skip
    print(f"recorded {arm.name} in {time.monotonic() - started:.0f} s", flush=True)


def _bench(bank: Path, samples: int, orders: int) -> dict[str, dict[str, Any]]:
    args = ["bench", str(bank), "--max-samples", str(samples), "--orders", str(orders), "--json"]
    rows = json.loads(retryctl(*args, "--policy", "default", "--policy", f"sc-{samples}"))
    return {row["policy"]: row for row in rows}


def _figures(bank: Path) -> dict[str, Any]:
    samples = [s for q in load_bank(bank) for s in q.samples]
    per_stage = stage_figures(samples)
    if not per_stage:  # one request: the whole sample is its one stage
        lengths = [s.token_count or 0 for s in samples]
        cut = sum(s.finish_reason == "length" for s in samples)
        per_stage = [
            {
                "name": "all",
                "mean_tokens": sum(lengths) / len(samples),
                "finish": {"length": cut / len(samples)},
            }
        ]
    return {
        "mean_tokens": sum(s.token_count or 0 for s in samples) / len(samples),
        "no_answer": sum(s.answer is None for s in samples) / len(samples),
        "unstated": sum(STATED.search(s.text) is None for s in samples) / len(samples),
        "stages": per_stage,
    }


def _right_shares(bank: Path) -> dict[str, float]:
    """Per question, the share of its samples whose answer is the gold (bench's answer keys)."""
    coded = code_bank(bank)
    return {q.id: sum(a == q.gold and a != NO_ANSWER for a in q.answers) / q.n for q in coded.questions}


def _paired(arm: dict[str, float], base: dict[str, float]) -> str:
    """Mean per-sample accuracy of ``arm`` minus ``base``'s, ± the paired standard error, over the
    questions both banks hold."""
    ids = sorted(arm.keys() & base.keys())
    diffs = [arm[i] - base[i] for i in ids]
    if len(diffs) < 2:
        return "-"
    mean = sum(diffs) / len(diffs)
    var = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    return f"{mean:+.3f} ± {(var / len(diffs)) ** 0.5:.3f}"


def main() -> None:
    """Record the arms' banks (what is missing), then print their figures side by side."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=Path(".bench-banks"))
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--orders", type=int, default=20)
    parser.add_argument("--report-only", action="store_true", help="Report the banks there, record nothing.")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    tasks = _tasks(args.work / f"staged-tasks-{SEED}-{args.tasks}.jsonl", args.tasks)
    banks = {arm: args.work / f"{arm.name}-{args.tasks}x{args.samples}.jsonl" for arm in ARMS}
    if not args.report_only:
        for arm, bank in banks.items():
            _record(arm, tasks, bank, args.samples)
    print(
        f"\n{args.tasks} word problems (seed {SEED}) x {args.samples} samples, {args.orders} orders. "
        "Accuracy as a fraction; tokens per sample; per stage: mean tokens, share cut off by the "
        "stage's cap, mean prompt tokens its request re-evaluated (the embedded model's prefix cache)\n"
    )
    print(
        f"| arm | sc-{args.samples} | default: acc @ samples, tokens a question | samples right | "
        "vs single | tokens a sample | no answer | not stated | per stage |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    base: dict[str, float] | None = None
    for arm, bank in banks.items():
        if not bank.exists():
            print(f"| {arm.label} | not recorded | | | | | | | |")
            continue
        rows, figures, shares = _bench(bank, args.samples, args.orders), _figures(bank), _right_shares(bank)
        base = shares if base is None else base
        default, majority = rows["default"], rows[f"sc-{args.samples}"]
        stages = "; ".join(_stage_cell(s) for s in figures["stages"])
        versus = "-" if shares is base else _paired(shares, base)
        print(
            f"| {arm.label} | {majority['accuracy']:.3f} | {default['accuracy']:.3f} @ "
            f"{default['avg_samples']:.2f}, {default['avg_tokens'] or 0:.1f} | "
            f"{sum(shares.values()) / len(shares):.3f} | {versus} | {figures['mean_tokens']:.1f} | "
            f"{figures['no_answer']:.3f} | {figures['unstated']:.3f} | {stages} |",
            flush=True,
        )


def _stage_cell(stage: dict[str, Any]) -> str:
    prompt = stage.get("mean_prompt_tokens")
    cut = stage["finish"].get("length", 0.0)
    return f"{stage['name']} {stage['mean_tokens']:.1f}, cut {cut:.3f}" + (
        "" if prompt is None else f", prompt {prompt:.1f}"
    )


if __name__ == "__main__":
    main()
