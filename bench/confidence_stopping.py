"""Confidence-aware stopping on banks the project records itself: ``default`` beside ``predictive``,
AC-Beta and SC-max, in one run, with the #32 targets.

    python bench/confidence_stopping.py --record     # record the development banks (embedded model)
    python bench/confidence_stopping.py [--bank B]   # replay them (and any --bank given), print targets
    python bench/confidence_stopping.py --probe      # and the other candidates for the default (below)
    python bench/confidence_stopping.py --after 40   # only each bank's questions after its first 40
    python bench/confidence_stopping.py --frontier   # every point of both families and the oracle

The development banks are recorded with ``retryctl record`` from the embedded model on tasks this
script generates, of two kinds: arithmetic (word problems from ``retryctl.evals.word_problems`` at
seeds 5 and 6, which no other figure uses, plus bare arithmetic), at two temperatures and two prompts
(short answers at 0.7 and at 0.4, reasoning first at 0.7: long samples, where cutting matters most);
and comparing and counting (``Which number is larger, 38 or 71?``, ``How many words are in this
list: ...?``, seed 7) at 0.7. Recording takes about an hour on 2 cores (two recordings at once, one
thread each); they resume where they stopped. Synthetic banks with token logprobs
(``write_synthetic_bank``) are replayed beside them. Figures are printed, never asserted.

The #32 targets, per bank with logprobs: the default's accuracy at least ``predictive``'s - 0.1
point (printed with the paired standard error over questions: on 80 questions it is 1-3 points, so
"met" at this resolution is partly luck), its samples at most 1.02 x ``predictive``'s, its tokens at
most ``predictive``'s and at most 0.75 x AC-Beta's.

``--probe`` replays the candidates for the default in-process, in the orders ``retryctl bench``
uses: ``weighted`` (#15's default: confidence-weighted votes and the cut), ``weighted`` without the
cut (CISC-style weights alone), the default with a later cut bound (``warmup`` 9: the lowest floor
of 9 samples is about their 10th percentile, DeepConf-high's), and the hindsight oracle, which stops
at the first sample count whose running majority is SC-max's answer (no rule can know it).
``--frontier`` prints, per bank, every point of the count-only family (``predictive``'s threshold)
and of the cut's (``warmup`` x window) and the oracle, against the four targets (``_frontier.py``).
``--after N`` replays only each development bank's questions after its first N: the part not looked
at while the default was chosen (the first 30-36 questions of the three short banks were).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _cli import retryctl  # bench/ is the script's directory
from _frontier import frontier

from retryctl.controller.stopping import ConfidenceWeighted, PredictiveCut, StopRule, Tally
from retryctl.evals import word_problems
from retryctl.replay import (
    CodedBank,
    code_bank,
    make_orders,
    paired_delta,
    replay,
    run_policies,
    write_synthetic_bank,
)

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


POLICIES = ("default", "predictive", "ac-beta")


def _bench(bank: Path, cap: int, orders: int) -> dict[str, dict[str, Any]]:
    policies = [*POLICIES, f"sc-{cap}"]
    args = ["bench", str(bank), "--max-samples", str(cap), "--orders", str(orders), "--json"]
    rows = json.loads(retryctl(*args, *(x for p in policies for x in ("--policy", p))))
    # `retryctl bench --json` gives accuracy as a fraction; this report's targets are in points.
    return {row["policy"]: {**row, "accuracy": 100 * row["accuracy"]} for row in rows}


def _paired(path: Path, cap: int, orders: int) -> tuple[float, float]:
    """The default's accuracy minus ``predictive``'s in points, and its paired standard error."""
    bank = code_bank(path)
    replay_orders = make_orders(bank, orders=orders, seed=0)  # retryctl bench's orders
    default, predictive = run_policies(bank, ["default", "predictive"], orders=replay_orders, max_samples=cap)
    return paired_delta(default, predictive, range(len(bank.questions)))


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _target(value: float | None, limit: float, text: str) -> str:
    if value is None:
        return f"{text} - (no token counts)"
    return f"{text} {value:.3f} (<= {limit:g} {'met' if value <= limit else 'NOT met'})"


def _cell(row: dict[str, Any]) -> str:
    tokens = "-" if row["avg_tokens"] is None else f"{row['avg_tokens']:.1f}"
    return f"{row['accuracy']:6.2f} % @ {row['avg_samples']:5.2f} samples, {tokens} tokens"


def _report(name: str, rows: dict[str, dict[str, Any]], cap: int, paired: tuple[float, float]) -> None:
    default, predictive, ac, sc = rows["default"], rows["predictive"], rows["ac-beta"], rows[f"sc-{cap}"]
    gap, se = paired
    print(f"{name} (questions {default['questions']}, cap {cap}, cut rate {default['cut_rate']:.3f}):")
    for label, row in (("default", default), ("predictive", predictive), ("ac-beta", ac), (f"sc-{cap}", sc)):
        print(f"    {label:11s} {_cell(row)}")
    print(
        f"    targets: acc - predictive {gap:+.2f} ± {se:.2f} "
        f"(>= -0.1 {'met' if gap >= -0.1 else 'NOT met'}) | "
        + " | ".join(
            (
                _target(default["avg_samples"] / predictive["avg_samples"], 1.02, "samples x pred"),
                _target(_ratio(default["avg_tokens"], predictive["avg_tokens"]), 1.0, "tokens x pred"),
                _target(default["tokens_vs_ac_beta"], 0.75, "tokens x ac-beta"),
            )
        ),
        flush=True,
    )


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
    names = ["predictive", "default", "ac-beta", f"sc-{cap}", "weighted"]
    results = {r.policy: r for r in run_policies(bank, names, orders=replay_orders, max_samples=cap)}
    probes: dict[str, StopRule] = {
        "weighted, no cut": ConfidenceWeighted(cut=False),
        "default, warmup 9": PredictiveCut(warmup=9),
    }
    results |= {
        label: replay(bank, rule, orders=replay_orders, max_samples=cap, policy=label)
        for label, rule in probes.items()
    }
    sc, predictive, ac = results[f"sc-{cap}"], results["predictive"], results["ac-beta"]
    everyone = range(len(bank.questions))
    print(
        f"  probe {name} (SC-{cap} {sc.accuracy():.2f}, predictive {predictive.accuracy():.2f}):", flush=True
    )
    for label, result in results.items():
        if label in ("predictive", "ac-beta", f"sc-{cap}"):
            continue
        gap, se = paired_delta(result, predictive, everyone)
        tokens = result.avg_tokens()
        print(
            f"    {label:18s} {result.accuracy():6.2f} ({gap:+6.2f} ± {se:.2f} vs predictive) "
            f"samples x{result.avg_samples() / predictive.avg_samples():.3f} "
            f"tokens x{_fmt(_ratio(tokens, predictive.avg_tokens()))} "
            f"(x{_fmt(_ratio(tokens, ac.avg_tokens()))} ac-beta)"
        )
    samples, tokens = _oracle(bank, replay_orders, cap)
    print(
        f"    {'oracle':18s} {sc.accuracy():6.2f} (knows SC-{cap}'s answer) "
        f"samples x{samples / predictive.avg_samples():.3f} "
        f"tokens x{_fmt(_ratio(tokens, predictive.avg_tokens()))} "
        f"(x{_fmt(_ratio(tokens, ac.avg_tokens()))} ac-beta)"
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _tail(path: Path, after: int, scratch: Path) -> Path:
    """The bank's questions after its first ``after``, as a bank file of their own."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = scratch / f"{path.stem}-after-{after}.jsonl"
    out.write_text("".join(line + "\n" for line in lines[after:]), encoding="utf-8")
    return out


def _one(label: str, path: Path, cap: int, orders: int, probe: bool, front: bool = False) -> None:
    if front:
        bank = code_bank(path)
        frontier(label, bank, make_orders(bank, orders=orders, seed=0), cap)
        return
    _report(label, _bench(path, cap, orders), cap, _paired(path, cap, orders))
    if probe:
        _probe(label, path, cap, orders)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--record", action="store_true", help="record the development banks first")
    parser.add_argument("--work", type=Path, default=ROOT / ".bench-banks", help="where the banks are kept")
    parser.add_argument("--bank", type=Path, action="append", default=[], help="another bank to replay")
    parser.add_argument("--orders", type=int, default=20, help="random orders per question")
    parser.add_argument(
        "--probe", action="store_true", help="also replay the other candidates and the oracle"
    )
    parser.add_argument(
        "--frontier", action="store_true", help="only the frontier of both families and the oracle, per bank"
    )
    parser.add_argument("--after", type=int, default=0, help="only each development bank's questions after N")
    parser.add_argument("--no-synthetic", action="store_true", help="skip the synthetic banks")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    for dev in DEV_BANKS:
        path = args.work / dev.tasks
        path.write_text("".join(json.dumps(t) + "\n" for t in _tasks(dev)), encoding="utf-8")
    if args.record:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda b: _record(b, args.work), DEV_BANKS))
    with tempfile.TemporaryDirectory() as scratch:
        after = f", questions after the first {args.after}" if args.after else ""
        print(f"development banks (recorded from the embedded model{after}):")
        for bank in DEV_BANKS:
            path = args.work / f"{bank.name}.jsonl"
            if not path.exists():
                print(f"{bank.name:22s} not recorded: run with --record")
                continue
            if args.after:
                path = _tail(path, args.after, Path(scratch))
                if not path.read_text(encoding="utf-8").strip():
                    print(f"{bank.name:22s} has no questions after its first {args.after}")
                    continue
            _one(bank.name, path, bank.samples, args.orders, args.probe, args.frontier)
        for path in args.bank:
            lines = [
                json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
            ]
            cap = min(len(line["samples"]) for line in lines)
            _one(path.name, path, cap, args.orders, args.probe, args.frontier)
        if args.no_synthetic:
            return
        print("synthetic banks with token logprobs (300 questions x 40 samples, known answer distributions):")
        mixes = {
            "easy-heavy": {"easy": 0.7, "medium": 0.2, "hard": 0.1},
            "balanced": {"easy": 1 / 3, "medium": 1 / 3, "hard": 1 / 3},
            "hard-heavy": {"easy": 0.1, "medium": 0.3, "hard": 0.6},
        }
        for name, mix in mixes.items():
            path = write_synthetic_bank(Path(scratch) / f"{name}.jsonl", mix=mix, logprobs=True, seed=11)
            _one(f"synthetic {name}", path, 40, 10, args.probe, args.frontier)


if __name__ == "__main__":
    main()
