"""The fast audit path gives what the plain path gives: the same analysis, summary and chain report.

The plain path is :func:`analyse_plain` (orjson dicts, the reference fold) and
:func:`retryctl.audit.verify_log`; the fast one is :func:`analyse` (typed records) and
:func:`audit_log` (one pass, the log cut in two parts folded by two processes). They are compared on
varied logs, damaged ones included, with the cut in many places.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import retryctl.report._audit as audit_module
import retryctl.report._scan as scan_module
from retryctl.audit import VerifyReport, verify_log
from retryctl.audit._canonical import canonical_bytes
from retryctl.report import Analysis, analyse, audit_log, audit_summary, summarise
from retryctl.report._analyse import analyse_plain
from tests.report._logs import agent_log, failover_log, graph_log, tool_log, verdict, write_verdicts

SHARES = (0.05, 0.3, 0.45, 0.6, 0.95)


def _snapshot(a: Analysis) -> str:
    """Everything in an analysis, types and orders included (``5`` is not ``5.0`` here; sets aside)."""
    fields = {**vars(a), "runs": sorted(map(repr, a.runs)), "tools": sorted(map(repr, a.tools))}
    return repr(fields) + json.dumps(summarise(a), sort_keys=False)


def _report(r: VerifyReport) -> tuple[Any, ...]:
    err = None if r.error is None else (r.error.line, r.error.index, r.error.problem, str(r.error))
    return (r.path, r.ok, r.records, r.runs, r.head, err)


def _sorted_layout(line: bytes) -> bytes:
    """The line as another tool writes it: canonical JSON of the whole record, ``hash`` in its place."""
    return canonical_bytes(json.loads(line)) + b"\n"


def _odd_lines() -> list[bytes]:
    """Records of odd but valid shapes (the typed decoder refuses most; the fold must not differ)."""
    base: dict[str, Any] = {
        "kind": "verdict",
        "run_id": "odd",
        "step_id": "s",
        "action": "retry",
        "attempt": 1,
        "reason": "r",
    }
    variants: list[dict[str, Any]] = [
        {"answer": 42, "target": 7, "confidence": 1},
        {"confidence": 0.95, "thresholds": {}, "budget": None},
        {"thresholds": {"accept": None}, "budget": {"used": None, "limit": {}}},
        {"thresholds": {"max_refines": 2}, "budget": {"used": {"samples": 4}, "limit": {"samples": 9}}},
        {"budget": {"used": {"samples": 4, "usd": 0}}, "candidates_summary": [1, 2]},
        {"attempt": 2.0, "budget": {"used": {"samples": 6.0, "usd": 0.5}}, "error_class": "rate_limit"},
        {"extra": {"gold": 12, "token_entropy": [0.5, 1.5]}},
        {"extra": {"token_logprobs": [-0.1, -2]}, "candidates_summary": {"tool": "calc"}},
        {"run_id": 5},
        {"kind": None},
        {"kind": "other"},
        {"action": None},
        {"confidence": True},
        # Budgets of a ledger the run's steps share: what each attempt charged is counted.
        {"budget": {"scope": "run", "used": {"samples": 9}, "charged": {"samples": 1, "usd": 0.25}}},
        {"budget": {"scope": "run", "used": {"samples": 9}, "charged": {"samples": 2.0}}, "target": "m"},
        {"budget": {"scope": "run", "used": {"samples": 12}}, "candidates_summary": {"tool": "calc"}},
        {"budget": {"scope": "run", "charged": None}},
        {"budget": {"scope": "step", "used": {"samples": 2}, "charged": {}}},
        {"budget": {"scope": "other", "used": {"samples": 2}}},
        {"budget": {"scope": "run", "charged": {"samples": "1"}}},
        {"action": "accept", "checked": False, "target": "calc"},
        {"action": "accept", "checked": True, "confidence": 0.9},
        {"action": "accept", "checked": None},
        {"action": "accept", "checked": 0},
    ]
    lines = [json.dumps({**base, **v}).encode() + b"\n" for v in variants]
    summary = {
        "kind": "summary",
        "run_id": "odd",
        "step_id": "s",
        "final_answer": "x",
        "budget_used": {"samples": 3},
        "budget_max": {"samples": 9.0},
        "extra": {"gold": "x", "token_entropy": [0.1]},
        "sampling_history": [{"token_logprobs": [-0.5]}, 3, "y"],
    }
    lines.append(json.dumps(summary).encode() + b"\n")
    lines.append(
        json.dumps({**summary, "budget_used": None, "extra": None, "sampling_history": None}).encode() + b"\n"
    )
    lines += [b"[1, 2]\n", b"\n", b"   \n", b"not json\n", b'{"kind": "verdict", "reason": "caf\xe9"}\n']
    lines.append('{"kind": "verdict", "run_id": "é", "step_id": "ü", "answer": "日本"}\n'.encode())
    lines.append(b'{"kind": "repair", "cut": 12}\n')
    return lines


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fast")
    graph = graph_log(d / "graph.jsonl", token_logprobs=True)
    tools = tool_log(d / "tools.jsonl")
    budgets = [None, "step 'q' budget 'usd' is spent (0.5 of 0.5)", "run budget 'samples' is spent (8 of 8)"]
    stops = [verdict("stop" if i % 4 else "accept", 0.5 + i / 100, reason=budgets[i % 3]) for i in range(30)]
    rows = [(f"r{i}", f"q{i % 3}", v, "m") for i, v in enumerate(stops)]
    # Steps interleaved: each run's verdicts alternate with another run's.
    rows += [(f"i{i % 2}", "q", verdict("retry", 0.3, samples=3 + i), f"m{i % 3}") for i in range(12)]
    verdicts = write_verdicts(d / "verdicts.jsonl", rows)
    agent = d / "agent.jsonl"
    agent_log(agent)
    failover = d / "failover.jsonl"  # breaker skips: verdicts that charged no attempt
    failover_log(failover)
    out = {"graph": graph, "tools": tools, "verdicts": verdicts, "agent": agent, "failover": failover}
    lines = graph.read_bytes().splitlines(keepends=True)
    sorted_layout = d / "sorted.jsonl"
    sorted_layout.write_bytes(b"".join(_sorted_layout(x) for x in lines))
    out["sorted"] = sorted_layout
    mixed = d / "mixed.jsonl"
    mixed.write_bytes(b"".join(_sorted_layout(x) if i % 3 == 1 else x for i, x in enumerate(lines)))
    out["mixed"] = mixed
    torn = d / "torn.jsonl"
    torn.write_bytes(graph.read_bytes() + lines[0][:50])
    out["torn"] = torn
    odd = d / "odd.jsonl"
    odd.write_bytes(
        verdicts.read_bytes()
        + b"".join(_odd_lines())
        + graph.read_bytes()
        + agent.read_bytes()
        + failover.read_bytes()
    )
    out["odd"] = odd
    both = d / "both.jsonl"
    both.write_bytes(graph.read_bytes() + verdicts.read_bytes())  # a second chain: broken at its start
    out["both"] = both
    return out


NAMES = ("graph", "tools", "verdicts", "agent", "failover", "sorted", "mixed", "torn", "odd", "both")


class TestAnalyse:
    @pytest.mark.parametrize("name", NAMES)
    def test_typed_fold_equals_the_dict_fold(self, logs: dict[str, Path], name: str) -> None:
        assert _snapshot(analyse([logs[name]])) == _snapshot(analyse_plain([logs[name]]))

    def test_several_logs_fold_in_order(self, logs: dict[str, Path]) -> None:
        paths = [logs["graph"], logs["odd"], logs["graph"]]
        assert _snapshot(analyse(paths)) == _snapshot(analyse_plain(paths))


class TestAuditLog:
    @pytest.mark.parametrize("name", NAMES)
    @pytest.mark.parametrize("share", SHARES)
    def test_two_parts_equal_verify_log_and_the_plain_analysis(
        self, logs: dict[str, Path], name: str, share: float
    ) -> None:
        path = str(logs[name])
        report, analysis = audit_log(path, min_bytes=0, first_share=share)
        assert _report(report) == _report(verify_log(path))
        assert _snapshot(analysis) == _snapshot(analyse_plain([path]))

    @pytest.mark.parametrize("name", NAMES)
    def test_one_process_for_a_small_log(self, logs: dict[str, Path], name: str) -> None:
        path = str(logs[name])
        report, analysis = audit_log(path)
        assert _report(report) == _report(verify_log(path))
        assert _snapshot(analysis) == _snapshot(analyse_plain([path]))

    def test_an_empty_log(self, tmp_path: Path) -> None:
        path = tmp_path / "empty.jsonl"
        path.write_bytes(b"")
        report, analysis = audit_log(str(path), min_bytes=0)
        assert _report(report) == _report(verify_log(path))
        assert _snapshot(analysis) == _snapshot(analyse_plain([path]))

    def test_a_failed_worker_leaves_the_work_to_this_process(
        self, logs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def fail(*_: object, **__: object) -> bytes:
            raise RuntimeError("worker down")

        monkeypatch.setattr(audit_module, "pack", fail)  # the forked worker inherits it
        path = str(logs["graph"])
        report, analysis = audit_log(path, min_bytes=0)
        assert _report(report) == _report(verify_log(path))
        assert _snapshot(analysis) == _snapshot(analyse_plain([path]))
        report, summary = audit_summary(path, min_bytes=0)
        assert _report(report) == _report(verify_log(path))
        assert json.dumps(summary) == json.dumps(summarise(analyse_plain([path])))


class TestAuditSummary:
    """Only the summary: each process totals its own steps, and the totals are joined."""

    @pytest.mark.parametrize("name", NAMES)
    @pytest.mark.parametrize("share", SHARES)
    def test_two_parts_equal_verify_log_and_the_plain_summary(
        self, logs: dict[str, Path], name: str, share: float
    ) -> None:
        path = str(logs[name])
        report, summary = audit_summary(path, min_bytes=0, first_share=share)
        assert _report(report) == _report(verify_log(path))
        assert json.dumps(summary) == json.dumps(summarise(analyse_plain([path])))

    def test_a_step_in_both_parts_is_folded_again_here(
        self, logs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # The interleaved runs at the end of this log have steps on both sides of any cut among them.
        path = str(logs["verdicts"])
        lines = Path(path).read_bytes().splitlines(keepends=True)
        cut = sum(map(len, lines[:-6]))
        monkeypatch.setattr(audit_module, "_step_boundary", lambda *_: cut)
        refolded: list[int] = []
        fold = scan_module.fold_span

        def counted(*args: Any, **kwargs: Any) -> None:
            refolded.append(1)
            fold(*args, **kwargs)

        monkeypatch.setattr(audit_module, "fold_span", counted)
        report, summary = audit_summary(path, min_bytes=0)
        assert refolded
        assert _report(report) == _report(verify_log(path))
        assert json.dumps(summary) == json.dumps(summarise(analyse_plain([path])))


def _edit(line: bytes, how: int) -> bytes:
    rec = json.loads(line)
    if how == 0:
        rec["reason"] = "edited"
    elif how == 1:
        rec["prev_hash"] = "f" * 64
    else:
        rec["hash"] = "0" * 64
    return json.dumps(rec).encode() + b"\n"


mutations = st.one_of(
    st.tuples(st.just("edit"), st.integers(0, 40), st.integers(0, 2)),
    st.tuples(st.just("drop"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("swap"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("duplicate"), st.integers(0, 40), st.integers(0, 40)),
    st.tuples(st.just("garbage"), st.integers(0, 40), st.sampled_from([b"\n", b"{oops\n", b"[]\n"])),
    st.tuples(st.just("sorted"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("torn"), st.integers(1, 200), st.just(0)),
)


def _mutate(lines: list[bytes], mutation: tuple[str, int, Any]) -> list[bytes]:
    kind, i, arg = mutation
    out = list(lines)
    i %= len(out)
    if kind == "edit":
        out[i] = _edit(out[i], arg)
    elif kind == "drop":
        del out[i]
    elif kind == "swap" and i + 1 < len(out):
        out[i], out[i + 1] = out[i + 1], out[i]
    elif kind == "duplicate":
        out.insert(arg % len(out), lines[i])
    elif kind == "garbage":
        out.insert(i, arg)
    elif kind == "sorted":
        out[i] = _sorted_layout(out[i])
    elif kind == "torn":
        out[-1] = out[-1][: arg % len(out[-1])]
    return out


class TestDamage:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(mutation=mutations, share=st.sampled_from(SHARES))
    def test_the_first_problem_is_the_one_verify_log_names(
        self, logs: dict[str, Path], tmp_path: Path, mutation: tuple[str, int, Any], share: float
    ) -> None:
        lines = logs["verdicts"].read_bytes().splitlines(keepends=True)
        path = tmp_path / "damaged.jsonl"
        path.write_bytes(b"".join(_mutate(lines, mutation)))
        report, analysis = audit_log(str(path), min_bytes=0, first_share=share)
        assert _report(report) == _report(verify_log(path))
        assert _snapshot(analysis) == _snapshot(analyse_plain([path]))


class TestAuditSummaryResult:
    """What audit_summary builds is freed with its result, not on return (retryctl audit keeps it)."""

    @pytest.mark.parametrize("min_bytes", [0, 1 << 62], ids=["two processes", "one process"])
    def test_the_result_holds_the_analysis_until_it_goes(self, logs: dict[str, Path], min_bytes: int) -> None:
        import gc
        import weakref

        result = audit_summary(str(logs["graph"]), min_bytes=min_bytes)
        report, summary = result
        held = [weakref.ref(x) for x in result.built if isinstance(x, Analysis)]
        assert len(held) == 1 and held[0]() is not None
        assert summary["overview"]["records"] == held[0]().records  # type: ignore[union-attr]
        del result
        gc.collect()
        assert held[0]() is None
        assert report.ok
