"""Print accuracy vs average samples for every built-in stopping policy on a bank (or synthetic ones).

    python bench/stopping_policies.py --bank ../shared/banks/last_letters_gpt35.jsonl [--strata] [--curve]
                                      [--json]
    python bench/stopping_policies.py --synthetic      # generalisation: known answer distributions

Figures are printed, never asserted: speed and accuracy targets live here, not in timed tests.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from retryctl.replay import (
    BUILTIN_BENCH_POLICIES,
    ReplayResult,
    code_bank,
    make_orders,
    paired_delta,
    run_policies,
    strata_of,
    write_synthetic_bank,
)

MIXES: dict[str, dict[str, float]] = {
    "easy-heavy": {"easy": 0.7, "medium": 0.2, "hard": 0.1},
    "balanced": {"easy": 1 / 3, "medium": 1 / 3, "hard": 1 / 3},
    "hard-heavy": {"easy": 0.1, "medium": 0.3, "hard": 0.6},
}


def _table(title: str, results: list[ReplayResult], strata: dict[str, list[int]] | None) -> Table:
    table = Table(title=title)
    table.add_column("policy")
    table.add_column("accuracy %", justify="right")
    table.add_column("avg samples", justify="right")
    if strata:
        for name, indices in strata.items():
            table.add_column(f"{name} ({len(indices)} q): acc / avg / Δ vs {results[0].policy}")
    base = results[0]
    for result in results:
        cells = [result.policy, f"{result.accuracy():.2f}", f"{result.avg_samples():.2f}"]
        for indices in (strata or {}).values():
            delta, se = paired_delta(result, base, indices)
            cells.append(
                f"{result.accuracy(indices):.2f} / {result.avg_samples(indices):.1f} / {delta:+.2f}±{se:.2f}"
            )
        table.add_row(*cells)
    return table


def run_bank(args: argparse.Namespace, console: Console) -> None:
    bank = code_bank(args.bank)
    orders = make_orders(bank, orders=args.orders, seed=args.seed)
    names = [f"sc-{args.max_samples}"] + [n for n in BUILTIN_BENCH_POLICIES if n != "sc-40"]
    started = time.perf_counter()
    results = run_policies(bank, names, orders=orders, max_samples=args.max_samples)
    elapsed = time.perf_counter() - started
    title = (
        f"{args.bank}: {len(bank.questions)} questions × {args.orders} orders, seed {args.seed}, "
        f"max {args.max_samples} ({elapsed:.1f} s for {len(names)} policies)"
    )
    console.print(_table(title, results, strata_of(bank) if args.strata else None))
    if args.json:
        rows = [
            {"policy": r.policy, "accuracy": r.accuracy(), "avg_samples": r.avg_samples()} for r in results
        ]
        summary = {"bank": str(args.bank), "questions": len(bank.questions), "orders": args.orders}
        print(json.dumps({**summary, "seconds": elapsed, "policies": rows}))
    if args.curve:
        from retryctl.replay import curve_for

        table = Table(title="accuracy vs average samples along each policy's knob")
        for column in ("policy", "accuracy %", "avg samples"):
            table.add_column(column, justify="left" if column == "policy" else "right")
        for name in names:
            for point in curve_for(bank, name, orders=orders, max_samples=args.max_samples):
                table.add_row(point.policy, f"{point.accuracy:.2f}", f"{point.avg_samples:.2f}")
        console.print(table)


def run_synthetic(args: argparse.Namespace, console: Console) -> None:
    names = [f"sc-{args.max_samples}"] + [n for n in BUILTIN_BENCH_POLICIES if n != "sc-40"]
    with tempfile.TemporaryDirectory() as tmp:
        for mix_name, mix in MIXES.items():
            for logprobs in (False, True):
                path = write_synthetic_bank(
                    Path(tmp) / f"{mix_name}-{logprobs}.jsonl",
                    mix=mix,
                    questions=args.questions,
                    samples=args.max_samples,
                    logprobs=logprobs,
                    seed=args.seed + 1,
                )
                bank = code_bank(path)
                orders = make_orders(bank, orders=args.orders, seed=args.seed)
                results = run_policies(bank, names, orders=orders, max_samples=args.max_samples)
                title = (
                    f"synthetic {mix_name}{' + token logprobs' if logprobs else ''}: "
                    f"{args.questions} questions × {args.orders} orders (gold = mode)"
                )
                console.print(_table(title, results, strata_of(bank)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", type=Path, help="a JSONL sample bank")
    parser.add_argument("--synthetic", action="store_true", help="run the synthetic suite instead")
    parser.add_argument("--orders", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-samples", type=int, default=40)
    parser.add_argument("--questions", type=int, default=300, help="questions per synthetic bank")
    parser.add_argument("--strata", action="store_true", help="split by difficulty stratum")
    parser.add_argument("--curve", action="store_true", help="sweep each policy's knob")
    parser.add_argument("--json", action="store_true", help="also print one JSON object on the last line")
    args = parser.parse_args()
    console = Console(width=200)
    if args.synthetic:
        run_synthetic(args, console)
    elif args.bank is None:
        parser.error("give --bank PATH or --synthetic")
    else:
        run_bank(args, console)


if __name__ == "__main__":
    main()
