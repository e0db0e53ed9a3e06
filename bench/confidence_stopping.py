"""Confidence-aware stopping on banks the project records itself: ``default`` beside ``predictive``
and SC-max, in one run, with the #15 targets.

    python bench/confidence_stopping.py --record     # record the development banks (embedded model)
    python bench/confidence_stopping.py [--bank B]   # replay them (and any --bank given), print targets
    python bench/confidence_stopping.py --probe      # and how far other stopping rules get (below)

The development banks are recorded with ``retryctl record`` from the embedded model on tasks this
script generates (word problems from ``retryctl.evals.word_problems`` at seeds 5 and 6, which no
other figure uses, plus bare arithmetic), at two temperatures and two prompts: short answers at 0.7
and at 0.4 (more peaked answers, easier for a stopping rule) and reasoning first at 0.7 (long samples,
where cutting matters most). Recording takes about 40 minutes on 2 cores (two recordings at once, one
thread each); they resume where they stopped. Synthetic banks with token logprobs
(``write_synthetic_bank``) are replayed beside them. Figures are printed, never asserted.

``--probe`` asks whether any simple rule reaches the #15 targets, replaying in-process in the orders
``retryctl bench`` uses: the default stopped as soon as its first two samples agree
(``agree-at-2``); the default that also gives up once the weighted leader's share is unlikely to be
a majority, P(share > 1/2) < f after 3 samples (``futility-f``, f = 0.1, 0.2, 0.3); and the
hindsight oracle, which stops at the first sample count whose running majority is SC-max's answer
(it knows the answer; no rule can know it). None of these is a shipped policy.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from _cli import retryctl  # bench/ is the script's directory

from retryctl.controller.stopping import (
    ConfidenceWeighted,
    StopDecision,
    StopRule,
    Tally,
    beta_sf_half,
)
from retryctl.evals import word_problems
from retryctl.replay import CodedBank, code_bank, make_orders, replay, run_policies, write_synthetic_bank

ROOT = Path(__file__).resolve().parents[1]
SHORT = "You solve arithmetic word problems. Reply with one line: The answer is N."
REASON = "Solve the math problem. Think step by step, then finish with: The answer is N."
TERSE = "Reply with one line: The answer is N."
WORDS = (
    "apple", "river", "candle", "tiger", "paper", "garden", "window", "pencil", "orange", "button",
    "rabbit", "summer", "bottle", "forest", "pillow", "rocket", "basket", "mirror", "ladder", "violin",
)  # fmt: skip


@dataclass(frozen=True)
class DevBank:
    """One development bank: its tasks' seed and how its samples are drawn."""

    name: str
    seed: int
    samples: int
    temperature: float
    max_tokens: int
    system: str
    kind: str = "arithmetic"
    """Which generator writes its tasks: ``arithmetic`` (:func:`tasks_for`) or ``compare-count``
    (:func:`compare_count_tasks`)."""

    @property
    def tasks(self) -> str:
        """The task file's name (the arithmetic one keeps the name earlier recordings used)."""
        kind = "" if self.kind == "arithmetic" else f"{self.kind}-"
        return f"tasks-{kind}{self.seed}.jsonl"


DEV_BANKS = (
    DevBank("wp-short-t0.7", seed=5, samples=20, temperature=0.7, max_tokens=48, system=SHORT),
    DevBank("wp-short-t0.4", seed=5, samples=20, temperature=0.4, max_tokens=48, system=SHORT),
    DevBank("wp-reason-t0.7", seed=6, samples=16, temperature=0.7, max_tokens=160, system=REASON),
    DevBank(
        "cmp-count-t0.7",
        seed=7,
        samples=16,
        temperature=0.7,
        max_tokens=32,
        system=TERSE,
        kind="compare-count",
    ),
)


def tasks_for(seed: int, *, problems: int = 60, arithmetic: int = 20) -> list[dict[str, Any]]:
    """Word problems of the two easiest strata, then bare arithmetic (``What is 17 - 9?``)."""
    lines = [wp.task() for wp in word_problems(problems, seed=seed, strata=("small", "one_step"))]
    rng = random.Random(seed)
    for i in range(arithmetic):
        a, b, op = rng.randint(2, 30), rng.randint(2, 30), rng.choice("+-*")
        gold = a + b if op == "+" else a - b if op == "-" else a * b
        lines.append(
            {"id": f"ar-{seed}-{i}", "question": f"What is {a} {op} {b}?", "gold": gold, "stratum": "bare"}
        )
    return lines


def compare_count_tasks(seed: int, *, compare: int = 40, count: int = 40) -> list[dict[str, Any]]:
    """A task kind other than arithmetic: the larger of two numbers (``Which number is larger, 38 or
    71?``), then counting the words of a list of 2 to 6 (``How many words are in this list: ...?``).
    The embedded model is right on about half of the samples of the first and a third of the second."""
    rng = random.Random(seed)
    lines: list[dict[str, Any]] = []
    for i in range(compare):
        a, b = rng.sample(range(10, 100), 2)
        lines.append(
            {"id": f"cmp-{seed}-{i}", "question": f"Which number is larger, {a} or {b}?",
             "gold": max(a, b), "stratum": "compare"}
        )  # fmt: skip
    for i in range(count):
        items = rng.sample(WORDS, rng.randint(2, 6))
        lines.append(
            {"id": f"count-{seed}-{i}", "question": f"How many words are in this list: {', '.join(items)}?",
             "gold": len(items), "stratum": "count"}
        )  # fmt: skip
    return lines


def _tasks(bank: DevBank) -> list[dict[str, Any]]:
    return tasks_for(bank.seed) if bank.kind == "arithmetic" else compare_count_tasks(bank.seed)


def _record(bank: DevBank, work: Path) -> None:
    tasks = work / bank.tasks
    started = time.monotonic()
    retryctl(
        "record", str(tasks), "--out", str(work / f"{bank.name}.jsonl"), "--samples", str(bank.samples),
        "--temperature", str(bank.temperature), "--max-tokens", str(bank.max_tokens),
        "--system", bank.system, "--extract", "number",
    )  # fmt: skip
    print(f"recorded {bank.name} in {time.monotonic() - started:.0f} s", flush=True)


def _bench(bank: Path, cap: int, orders: int) -> dict[str, dict[str, Any]]:
    policies = ["default", "predictive", f"sc-{cap}"]
    args = ["bench", str(bank), "--max-samples", str(cap), "--orders", str(orders), "--json"]
    rows = json.loads(retryctl(*args, *(x for p in policies for x in ("--policy", p))))
    # `retryctl bench --json` gives accuracy as a fraction; this report's targets are in points.
    return {row["policy"]: {**row, "accuracy": 100 * row["accuracy"]} for row in rows}


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def _report(name: str, rows: dict[str, dict[str, Any]], cap: int) -> None:
    default, predictive, sc = rows["default"], rows["predictive"], rows[f"sc-{cap}"]
    samples = default["avg_samples"] / predictive["avg_samples"]
    tokens = _ratio(default["avg_tokens"], predictive["avg_tokens"])
    gap = default["accuracy"] - sc["accuracy"]
    print(
        f"{name:22s} SC-{cap} {sc['accuracy']:6.2f} | predictive {predictive['accuracy']:6.2f} "
        f"@ {predictive['avg_samples']:5.2f} | default {default['accuracy']:6.2f} "
        f"@ {default['avg_samples']:5.2f} (cut {default['cut_rate']:.2f}) "
        f"| acc-SC {gap:+.2f} (>= -0.3 {'met' if gap >= -0.3 else 'NOT met'}) "
        f"| samples x{samples:.2f} (<= 0.65 {'met' if samples <= 0.65 else 'NOT met'}) "
        f"| tokens x{tokens} (<= 0.50)",
        flush=True,
    )


@dataclass(frozen=True, kw_only=True, repr=False)
class AgreeAtTwo(ConfidenceWeighted):
    """Probe: the default, stopped as soon as its first two samples give the same answer."""

    def __call__(self, tally: Tally) -> StopDecision:
        decision = super().__call__(tally)
        first = tally.answers[:2]
        if tally.n == 2 and first[0] is not None and first[0] == first[1]:
            return replace(decision, stop=True, leader=first[0])
        return decision


@dataclass(frozen=True, kw_only=True, repr=False)
class Futility(ConfidenceWeighted):
    """Probe: the default that also stops once P(the leader's share > 1/2) < ``futility``
    (Jeffreys prior over its weighted votes), after ``after`` samples: no majority is coming."""

    futility: float = 0.1
    after: int = 3

    def __call__(self, tally: Tally) -> StopDecision:
        decision = super().__call__(tally)
        if decision.stop or tally.n < self.after:
            return decision
        lead = decision.details.get("leader_weight", tally.leader_votes)  # plain votes without logprobs
        if beta_sf_half(lead + 0.5, tally.n - lead + 0.5) < self.futility:
            return replace(decision, stop=True)
        return decision


def _oracle(bank: CodedBank, orders: list[list[list[int]]], cap: int) -> tuple[float, float | None]:
    """Mean samples and tokens of the hindsight oracle (first n whose majority is SC-cap's)."""
    samples = tokens = pairs = 0
    for order in orders:
        for question, perm in zip(bank.questions, order, strict=True):
            # The controller's own vote count (first seen wins a tie), as the replay's leader is.
            answers = [question.key(question.answers[i]) for i in perm[: min(cap, question.n)]]
            final = Tally.of(answers).leader
            stop = next(n for n in range(1, len(answers) + 1) if Tally.of(answers[:n]).leader == final)
            samples += stop
            tokens += sum(question.tokens[i] or 0 for i in perm[:stop]) if question.tokens else 0
            pairs += 1
    return samples / pairs, (tokens / pairs if bank.has_tokens else None)


def _probe(name: str, path: Path, cap: int, orders: int) -> None:
    bank = code_bank(path)
    replay_orders = make_orders(bank, orders=orders, seed=0)  # retryctl bench's orders
    policies = run_policies(
        bank, ["predictive", "default", f"sc-{cap}"], orders=replay_orders, max_samples=cap
    )
    probes: dict[str, StopRule] = {"agree-at-2": AgreeAtTwo()}
    probes.update({f"futility-{f:g}": Futility(futility=f) for f in (0.1, 0.2, 0.3)})
    results = {r.policy: r for r in policies} | {
        label: replay(bank, rule, orders=replay_orders, max_samples=cap, policy=label)
        for label, rule in probes.items()
    }
    sc, predictive = results[f"sc-{cap}"], results["predictive"]
    base_tokens = predictive.avg_tokens()
    print(f"  probe {name} (SC-{cap} {sc.accuracy():.2f}):", flush=True)
    for label, result in results.items():
        if label.startswith("sc-"):
            continue
        tokens = result.avg_tokens()
        print(
            f"    {label:13s} {result.accuracy():6.2f} ({result.accuracy() - sc.accuracy():+6.2f}) "
            f"samples x{result.avg_samples() / predictive.avg_samples():.2f} "
            f"tokens x{_ratio(tokens, base_tokens)}"
        )
    samples, tokens = _oracle(bank, replay_orders, cap)
    print(
        f"    {'oracle':13s} {sc.accuracy():6.2f} ( +0.00) samples x{samples / predictive.avg_samples():.2f} "
        f"tokens x{_ratio(tokens, base_tokens)}  (knows SC-{cap}'s answer)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--record", action="store_true", help="record the development banks first")
    parser.add_argument("--work", type=Path, default=ROOT / ".bench-banks", help="where the banks are kept")
    parser.add_argument("--bank", type=Path, action="append", default=[], help="another bank to replay")
    parser.add_argument("--orders", type=int, default=20, help="random orders per question")
    parser.add_argument("--probe", action="store_true", help="also replay the probe rules and the oracle")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    for dev in DEV_BANKS:
        path = args.work / dev.tasks
        path.write_text("".join(json.dumps(t) + "\n" for t in _tasks(dev)), encoding="utf-8")
    if args.record:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda b: _record(b, args.work), DEV_BANKS))
    print("development banks (recorded from the embedded model):")
    for bank in DEV_BANKS:
        path = args.work / f"{bank.name}.jsonl"
        if path.exists():
            _report(bank.name, _bench(path, bank.samples, args.orders), bank.samples)
            if args.probe:
                _probe(bank.name, path, bank.samples, args.orders)
        else:
            print(f"{bank.name:22s} not recorded: run with --record")
    for path in args.bank:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        cap = min(len(line["samples"]) for line in lines)
        _report(path.name, _bench(path, cap, args.orders), cap)
        if args.probe:
            _probe(path.name, path, cap, args.orders)
    print("synthetic banks with token logprobs (300 questions x 40 samples, known answer distributions):")
    with tempfile.TemporaryDirectory() as scratch:
        mixes = {
            "easy-heavy": {"easy": 0.7, "medium": 0.2, "hard": 0.1},
            "balanced": {"easy": 1 / 3, "medium": 1 / 3, "hard": 1 / 3},
            "hard-heavy": {"easy": 0.1, "medium": 0.3, "hard": 0.6},
        }
        for name, mix in mixes.items():
            path = write_synthetic_bank(Path(scratch) / f"{name}.jsonl", mix=mix, logprobs=True, seed=11)
            _report(f"synthetic {name}", _bench(path, 40, 10), 40)
            if args.probe:
                _probe(f"synthetic {name}", path, 40, 10)


if __name__ == "__main__":
    main()
