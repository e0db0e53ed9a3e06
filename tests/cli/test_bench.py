"""``retryctl bench``: JSON and table output, --curve and --strata, and one-line errors with exit 2."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from retryctl.cli import app
from tests.replay._banks import question, write_bank

runner = CliRunner()


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    records = [
        question("easy1", "a", ["a"] * 10),
        question("easy2", "b", ["b"] * 9 + ["c"]),
        question("medium", "a", ["a"] * 7 + ["b"] * 3),
        question("hard", "a", ["a"] * 4 + ["b"] * 3 + ["c"] * 3),
    ]
    return write_bank(tmp_path / "bank.jsonl", records)


def _bench(*args: str):
    return runner.invoke(app, ["bench", *args])


class TestBenchCommand:
    def test_json_has_one_object_per_policy_with_contract_keys(self, bank: Path) -> None:
        result = _bench(str(bank), "--policy", "default", "--policy", "sc-10", "--json")
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout)
        assert [r["policy"] for r in rows] == ["default", "sc-10"]
        for row in rows:
            assert set(row) == {
                "policy", "label", "cap", "accuracy", "avg_samples", "avg_tokens", "cut_rate", "questions",
                "orders", "ece", "auroc", "tokens_vs_sc_max", "tokens_vs_ac_beta", "samples_vs_sc_max",
                "samples_vs_ac_beta",
            }  # fmt: skip
            assert row["questions"] == 4 and row["orders"] == 20 and row["cap"] == 10
        # SC-10 on these four questions: every majority is the gold, so no wrong answer to rank against
        # (AUROC undefined), and the error is how far the vote shares fall short of 1.
        assert rows[1]["accuracy"] == 1.0 and rows[1]["avg_samples"] == 10.0  # a fraction, not 100
        assert rows[1]["auroc"] is None and 0.0 < rows[1]["ece"] < 1.0

    def test_options_reach_the_replay(self, bank: Path) -> None:
        result = _bench(str(bank), "--policy", "sc-40", "--orders", "3", "--max-samples", "2", "--json")
        row = json.loads(result.stdout)[0]
        assert row["orders"] == 3 and row["avg_samples"] == 2.0

    def test_seed_changes_orders(self, bank: Path) -> None:
        outs = {_bench(str(bank), "--policy", "sc-1", "--seed", str(s), "--json").stdout for s in range(6)}
        assert len(outs) > 1

    def test_table_lists_every_builtin_by_default(self, bank: Path) -> None:
        result = _bench(str(bank))
        assert result.exit_code == 0
        for name in ("default", "sc-40", "esc", "ac-beta", "ac-dirichlet", "threshold", "budget"):
            assert name in result.stdout

    def test_strata_and_curve(self, bank: Path) -> None:
        args = [str(bank), "--policy", "sc-10", "--policy", "ac-beta", "--strata", "--curve"]
        rows = {row["policy"]: row for row in json.loads(_bench(*args, "--json").stdout)}
        strata = rows["ac-beta"]["strata"]
        # No stratum in the bank: bins by full-bank agreement, named for it (not "easy", "hard").
        assert rows["ac-beta"]["strata_from"] == "agreement"
        assert list(strata) == ["agree>=0.9", "agree 0.6-0.9", "agree<0.6"]
        assert strata["agree>=0.9"]["questions"] == 2 and strata["agree>=0.9"]["delta_vs"] == "sc-10"
        assert [p["policy"] for p in rows["ac-beta"]["curve"]][:2] == ["ac-beta:0.8", "ac-beta:0.9"]
        table = _bench(*args)
        assert "by full-bank agreement" in table.stdout and "ac-beta sweep" in table.stdout
        # Rows are sorted by cost, but Δ stays against the first policy asked for.
        assert "(Δ vs sc-10" in table.stdout

    def test_strata_are_the_banks_own_when_it_has_them(self, tmp_path: Path) -> None:
        records = [
            {**question("q1", "a", ["a"] * 4), "stratum": "two_step"},
            {**question("q2", "a", ["b"] * 4), "stratum": "one_step"},
            {**question("q3", "a", ["a"] * 2 + ["b"] * 2), "stratum": "two_step"},
        ]
        bank = write_bank(tmp_path / "b.jsonl", records)
        rows = json.loads(_bench(str(bank), "--policy", "sc-4", "--strata", "--json").stdout)
        assert rows[0]["strata_from"] == "bank"
        assert {k: v["questions"] for k, v in rows[0]["strata"].items()} == {"two_step": 2, "one_step": 1}
        assert rows[0]["strata"]["one_step"]["accuracy"] == 0.0
        assert "by the bank's own stratum" in _bench(str(bank), "--policy", "sc-4", "--strata").stdout

    def test_a_policy_is_labelled_by_the_samples_it_really_had(self, tmp_path: Path) -> None:
        bank = write_bank(tmp_path / "b.jsonl", [question("q", "a", ["a", "a", "b"])])
        rows = json.loads(_bench(str(bank), "--policy", "sc-40", "--policy", "default", "--json").stdout)
        by = {row["policy"]: row for row in rows}
        assert by["sc-40"]["cap"] == 3 and by["sc-40"]["label"] == "sc-3 (asked sc-40)"
        assert by["default"]["label"] == "default" and by["default"]["cap"] == 3
        table = _bench(str(bank), "--policy", "sc-40", "--policy", "default").stdout
        assert "sc-3 (asked sc-40)" in table

    def test_the_table_shows_what_json_has(self, bank: Path) -> None:
        row = json.loads(_bench(str(bank), "--policy", "sc-10", "--json").stdout)[0]
        table = _bench(str(bank), "--policy", "sc-10").stdout
        for header in ("cap", "accuracy", "avg samples", "cut rate", "ECE", "AUROC", "questions", "orders"):
            assert header in table
        assert f"{row['accuracy']:.3f}" in table and f"{row['ece']:.3f}" in table


SURE, DOUBT = math.log(0.9), math.log(0.05)


def _costly_cuts_bank(path: Path, *, logprobs: bool = True) -> Path:
    """Three sure "a" samples of 20 tokens and seven "a" samples whose 200 tokens turn doubtful after 10:
    the default cuts those at 16 tokens, so it draws more samples than ``predictive`` (a cut sample
    gives no vote) and spends fewer tokens."""

    def sample(lps: list[float]) -> dict[str, object]:
        out: dict[str, object] = {"text": "The answer is a.", "answer": "a", "tokens": len(lps)}
        return {**out, "token_logprobs": lps} if logprobs else out

    sure, doubtful = sample([SURE] * 20), sample([SURE] * 10 + [DOUBT] * 190)
    samples = [sure] * 3 + [doubtful] * 7
    records = [{"id": f"q{i}", "question": "?", "gold": "a", "samples": samples} for i in range(3)]
    return write_bank(path, records)


class TestTokensFirst:
    def test_rows_are_sorted_by_tokens_where_the_bank_has_them(self, tmp_path: Path) -> None:
        bank = _costly_cuts_bank(tmp_path / "b.jsonl")
        args = [str(bank), "--policy", "predictive", "--policy", "default", "--orders", "5"]
        rows = json.loads(_bench(*args, "--json").stdout)
        assert [row["policy"] for row in rows] == ["default", "predictive"]
        default, predictive = rows
        # Fewer tokens, though more samples: the order is by tokens, not by samples.
        assert default["avg_tokens"] < predictive["avg_tokens"]
        assert default["avg_samples"] > predictive["avg_samples"]
        table = _bench(*args).stdout
        assert "fewest tokens first" in table
        assert table.index("default") < table.index("predictive")

    def test_rows_are_sorted_by_samples_without_token_counts(self, bank: Path) -> None:
        rows = json.loads(_bench(str(bank), "--policy", "sc-10", "--policy", "ac-beta", "--json").stdout)
        assert [row["policy"] for row in rows] == ["ac-beta", "sc-10"]
        assert all(row["tokens_vs_sc_max"] is None and row["tokens_vs_ac_beta"] is None for row in rows)
        assert "fewest samples first" in _bench(str(bank), "--policy", "sc-10").stdout

    def test_equal_costs_keep_the_order_asked(self, tmp_path: Path) -> None:
        bank = _costly_cuts_bank(tmp_path / "b.jsonl", logprobs=False)  # nothing to cut: the same rule
        for asked in (["predictive", "default"], ["default", "predictive"]):
            args = [str(bank), "--json", *(x for name in asked for x in ("--policy", name))]
            assert [row["policy"] for row in json.loads(_bench(*args).stdout)] == asked

    def test_costs_against_sc_max_and_ac_beta_replayed_even_if_not_asked(self, tmp_path: Path) -> None:
        bank = _costly_cuts_bank(tmp_path / "b.jsonl")
        [alone] = json.loads(_bench(str(bank), "--policy", "default", "--json").stdout)
        asked = ("--policy", "default", "--policy", "sc-40", "--policy", "ac-beta")
        rows = json.loads(_bench(str(bank), *asked, "--json").stdout)
        by = {row["policy"]: row for row in rows}
        assert alone == by["default"]  # the same figures whether the references were asked for or not
        for unit in ("tokens", "samples"):
            own = by["default"][f"avg_{unit}"]
            assert alone[f"{unit}_vs_sc_max"] == pytest.approx(own / by["sc-40"][f"avg_{unit}"], abs=1e-4)
            assert alone[f"{unit}_vs_ac_beta"] == pytest.approx(own / by["ac-beta"][f"avg_{unit}"], abs=1e-4)
        assert by["sc-40"]["tokens_vs_sc_max"] == 1.0 and by["ac-beta"]["samples_vs_ac_beta"] == 1.0
        # The share of the samples drawn that were cut, not cuts per question.
        assert 0 < by["default"]["cut_rate"] < 1 and by["sc-40"]["cut_rate"] == 0


class TestBenchErrors:
    @pytest.mark.parametrize(
        ("args", "needle"),
        [
            (["--orders", "0"], "--orders must be >= 1 (got 0)"),
            (["--max-samples", "0"], "--max-samples must be >= 1 (got 0)"),
            (["--policy", "magic"], "unknown policy 'magic'; known: default, predictive, sc-N"),
            (["--policy", "ac-beta:7"], "invalid threshold=7.0"),
        ],
    )
    def test_bad_option_is_one_line_and_exit_2(self, bank: Path, args: list[str], needle: str) -> None:
        result = _bench(str(bank), *args)
        assert result.exit_code == 2
        assert needle in result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.output

    def test_missing_file(self, tmp_path: Path) -> None:
        result = _bench(str(tmp_path / "nope.jsonl"))
        assert result.exit_code == 2 and "no such file" in result.stderr

    def test_bad_line_names_the_line(self, tmp_path: Path) -> None:
        path = write_bank(tmp_path / "bad.jsonl", [question("q", "a", ["a"]), "{oops"])
        result = _bench(str(path))
        assert result.exit_code == 2
        assert f"{path}:2: invalid JSON" in result.stderr
        assert result.stderr.count("\n") == 1


class TestInstalledEntryPoint:
    def test_console_script_runs_bench(self, bank: Path) -> None:
        exe = Path(sys.executable).parent / "retryctl"
        if not exe.exists():
            pytest.fail(f"the retryctl entry point is not installed beside {sys.executable}")
        done = subprocess.run(
            [str(exe), "bench", str(bank), "--policy", "default", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)[0]["policy"] == "default"
        bad = subprocess.run(
            [str(exe), "bench", str(bank), "--orders", "0"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert bad.returncode == 2 and bad.stderr.strip() == "error: --orders must be >= 1 (got 0)"
