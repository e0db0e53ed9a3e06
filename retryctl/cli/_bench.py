"""``retryctl bench``: replay a sample bank through stopping policies and report accuracy vs cost.

Accuracy is a fraction (0 to 1, three decimals in the table), as in every command (``retryctl._scores``).
Cost is tokens where the bank gives them (the unit users pay for), samples otherwise: rows are sorted
by it, cheapest first, and each is compared with SC at the cap and with AC-Beta, both replayed in the
same run whether asked for or not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from retryctl._paths import PathError, check_input
from retryctl._scores import LABELS, MISSING, cell
from retryctl.cli._console import table_console
from retryctl.controller.stopping import parse_stopping_rule
from retryctl.exceptions import BankFormatError, ConfigError, UnknownPolicyError
from retryctl.replay import (
    BUILTIN_BENCH_POLICIES,
    code_bank,
    curve_for,
    make_orders,
    run_policies,
    strata_of,
    summary_row,
)
from retryctl.replay._report import cost_order, policy_cap, strata_basis

__all__ = ["bench"]

_USAGE_EXIT = 2


def _fail(message: str) -> NoReturn:
    """One line on stderr and exit 2, the usage-error code: never a traceback for bad input."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(_USAGE_EXIT)


def _fraction(value: float | None) -> str:
    return cell(value)


def _times(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}"


def _render(rows: list[dict[str, Any]], *, bank: str, unit: str, baseline: str, console: Console) -> None:
    # Every key of the JSON rows has its column (the strata and the curve have their own tables);
    # figures are fractions with three decimals, as in `batch`, `eval` and `audit`. The two ratio
    # columns are in the unit the rows are sorted by (the JSON has both units).
    kind = "tokens" if unit == "avg_tokens" else "samples"
    table = Table(title=f"retryctl bench — {bank}\n(fewest {kind} first; {kind} × SC-max and × AC-Beta)")
    columns = ("policy", "cap", LABELS["accuracy"], "avg samples", "avg tokens", "× SC-max", "× AC-Beta",
               "cut rate", LABELS["ece"], LABELS["auroc"], "questions", "orders")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "policy" else "right", no_wrap=True)
    for row in rows:
        table.add_row(
            row.get("label", row["policy"]),
            str(row.get("cap", MISSING)),
            _fraction(row["accuracy"]),
            f"{row['avg_samples']:.2f}",
            MISSING if row["avg_tokens"] is None else f"{row['avg_tokens']:.1f}",
            _times(row[f"{kind}_vs_sc_max"]),
            _times(row[f"{kind}_vs_ac_beta"]),
            _fraction(row["cut_rate"]),
            _fraction(row["ece"]),
            _fraction(row["auroc"]),
            str(row["questions"]),
            str(row["orders"]),
        )
    console.print(table)
    if rows and "strata" in rows[0]:
        basis = rows[0].get("strata_from")
        by = "the bank's own stratum" if basis == "bank" else "full-bank agreement (no strata in the bank)"
        split = Table(title=f"by {by} (Δ vs {baseline}, ± paired s.e.)")
        for column in ("stratum", "questions", "policy", "accuracy", "avg samples", "Δ accuracy"):
            split.add_column(
                column, justify="left" if column in ("stratum", "policy") else "right", no_wrap=True
            )
        for stratum in rows[0]["strata"]:
            for row in rows:
                entry = row["strata"][stratum]
                delta = f"{entry['delta']:+.3f}±{entry['delta_se']:.3f}" if "delta" in entry else MISSING
                split.add_row(
                    stratum,
                    str(entry["questions"]),
                    row.get("label", row["policy"]),
                    _fraction(entry["accuracy"]),
                    f"{entry['avg_samples']:.2f}",
                    delta,
                )
        console.print(split)
    for row in rows:
        if "curve" in row:
            curve = Table(title=f"accuracy vs samples: {row['policy']} sweep")
            for column in ("policy", "accuracy", "avg samples"):
                curve.add_column(column, justify="left" if column == "policy" else "right")
            for point in row["curve"]:
                curve.add_row(point["policy"], _fraction(point["accuracy"]), f"{point['avg_samples']:.2f}")
            console.print(curve)


def bench(
    bank: Annotated[
        Path, typer.Argument(help="Sample bank, JSONL: one question a line (format in docs/stopping.md).")
    ],
    *,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            help="Policy to replay, repeatable: default, predictive, sc-N, esc, ac-beta, ac-dirichlet, "
            "threshold, budget; a ':value' sets its knob (ac-beta:0.99). Default: every built-in.",
        ),
    ] = None,
    orders: Annotated[int, typer.Option("--orders", help="Random sample orders per question.")] = 20,
    seed: Annotated[int, typer.Option("--seed", help="Seed of random.Random for the orders.")] = 0,
    max_samples: Annotated[
        int, typer.Option("--max-samples", help="Most samples any policy may draw per question.")
    ] = 40,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array instead of tables.")] = False,
    curve: Annotated[
        bool, typer.Option("--curve", help="Also sweep each policy's knob: accuracy vs samples.")
    ] = False,
    strata: Annotated[
        bool,
        typer.Option(
            "--strata",
            help="Also split by the bank's own 'stratum' (else by full-bank agreement), with Δ vs the "
            "first policy.",
        ),
    ] = False,
) -> None:
    """Replay a sample bank through stopping policies: accuracy, samples and tokens per policy, the
    cheapest first (by tokens where the bank gives them), each against SC-max and AC-Beta."""
    if orders < 1:
        _fail(f"--orders must be >= 1 (got {orders})")
    if max_samples < 1:
        _fail(f"--max-samples must be >= 1 (got {max_samples})")
    names = list(policy) if policy else list(BUILTIN_BENCH_POLICIES)
    for name in names:
        try:
            parse_stopping_rule(name)
        except (UnknownPolicyError, ConfigError) as exc:
            _fail(f"--policy: {exc}")
    try:
        if bank.exists() and not bank.is_dir():
            check_input(bank, "BANK")  # a FIFO would hang the read, /dev/zero never end it
        loaded = code_bank(bank)
    except PathError as exc:
        _fail(str(exc))
    except FileNotFoundError:
        _fail(f"BANK: no such file: {bank}")
    except IsADirectoryError:
        _fail(f"BANK: is a directory: {bank}")
    except BankFormatError as exc:
        _fail(f"bad bank line: {exc}")
    except OSError as exc:
        _fail(f"BANK: cannot read {bank}: {exc.strerror}")
    replay_orders = make_orders(loaded, orders=orders, seed=seed)
    results = run_policies(loaded, names, orders=replay_orders, max_samples=max_samples)
    asked = {result.policy: result for result in results}
    # The references every row is compared with, replayed in this run's orders even if not asked for.
    sc_name = f"sc-{max_samples}"
    sc_max, ac_beta = (
        asked[name]
        if name in asked
        else run_policies(loaded, [name], orders=replay_orders, max_samples=max_samples)[0]
        for name in (sc_name, "ac-beta")
    )
    split = strata_of(loaded) if strata else None
    rows = [
        summary_row(
            result,
            strata=split,
            baseline=results[0],
            curve=curve_for(loaded, result.policy, orders=replay_orders, max_samples=max_samples)
            if curve
            else None,
            cap=policy_cap(result.policy, loaded, max_samples=max_samples),
            references=(sc_max, ac_beta),
        )
        for result in results
    ]
    unit, rows = cost_order(rows)
    if split is not None:
        for row in rows:
            row["strata_from"] = strata_basis(loaded)
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    console = table_console()
    first = results[0].policy
    baseline = next(row.get("label", row["policy"]) for row in rows if row["policy"] == first)
    _render(rows, bank=str(bank), unit=unit, baseline=baseline, console=console)
