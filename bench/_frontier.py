"""``confidence_stopping.py --frontier``: where the #32 targets stand against every point the two
families of rules reach, and against the hindsight oracle, per bank.

The points, each replayed in-process in ``retryctl bench``'s orders:

* the count-only family, ``predictive`` at thresholds 0.9, 0.95, 0.975 (its own) and 0.99, and the
  highest threshold whose tokens reach 0.75 x AC-Beta's, found by bisection to 0.002 (a lower
  threshold never draws more): what the family gives up to get there;
* the cut family (``PredictiveCut``) along its knobs, conventions not fits: ``warmup`` 2, 4, 8, 16
  complete samples before the bound is set, times the group window 8, 16 (the default's), 32 tokens,
  and the default's cut under the lower thresholds 0.95 and 0.9;
* the hindsight oracle: it knows SC-max's answer and stops at the first sample count whose running
  majority is it, without cuts and with the default's cuts (a cut sample gives it no vote either).

The window is not a field of the rule (the live decoder's window is ``GROUP_WINDOW``): a bench-only
replay of another window recomputes the floors at it and runs the replay's one cut check at it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from unittest import mock

import retryctl.replay._replay as replay_module
from retryctl.controller.stopping import (
    GROUP_WINDOW,
    PredictiveCut,
    PredictiveMajority,
    StopRule,
    Tally,
    cut_point,
    group_floor,
)
from retryctl.replay import CodedBank, ReplayResult, paired_delta, replay, run_policies

__all__ = ["frontier"]

Orders = list[list[list[int]]]
CURVE = (0.9, 0.95, 0.975, 0.99)
WARMUPS = (2, 4, 8, 16)
WINDOWS = (8, 16, 32)


@dataclass(frozen=True)
class Point:
    """One point of the frontier, measured against ``predictive`` and AC-Beta."""

    label: str
    causal: bool
    delta: float
    se: float
    samples: float
    tokens: float | None
    tokens_ac: float | None

    @property
    def marks(self) -> str:
        """Which targets it meets: A(ccuracy), S(amples), T(okens x pred), C (tokens x AC-Beta)."""
        met = [
            ("A", self.delta >= -0.1),
            ("S", self.samples <= 1.02),
            ("T", self.tokens is not None and self.tokens <= 1.0),
            ("C", self.tokens_ac is not None and self.tokens_ac <= 0.75),
        ]
        return "all" if all(ok for _, ok in met) else "".join(m if ok else "." for m, ok in met)


@contextlib.contextmanager
def _window(bank: CodedBank, window: int) -> Iterator[CodedBank]:
    """The bank with floors at ``window``, and the replay's cut check at it, for the block."""
    if window == GROUP_WINDOW:
        yield bank
        return
    questions = tuple(
        dataclasses.replace(q, floors=tuple(group_floor(lp, window) if lp else None for lp in q.logprobs))
        for q in bank.questions
    )
    with mock.patch.object(replay_module, "cut_point", functools.partial(cut_point, window=window)):
        yield dataclasses.replace(bank, questions=questions)


def _result(label: str, orders: int, rows: Sequence[tuple[int, int, int]], has_tokens: bool) -> ReplayResult:
    return ReplayResult(
        policy=label,
        orders=orders,
        correct=tuple(r[0] for r in rows),
        samples=tuple(r[1] for r in rows),
        tokens=tuple(r[2] for r in rows) if has_tokens else None,
    )


def oracle(bank: CodedBank, orders: Orders, cap: int, *, cut: bool) -> ReplayResult:
    """The hindsight oracle: stops at the first sample count whose running majority (of the votes
    not cut, with ``cut``) is SC-cap's answer; at the cap if there is none."""
    rule = PredictiveCut()
    rows = [[0, 0, 0] for _ in bank.questions]
    for order in orders:
        for qi, (question, perm) in enumerate(zip(bank.questions, order, strict=True)):
            drawn = list(perm[: min(cap, question.n)])
            final = Tally.of([question.key(question.answers[i]) for i in drawn]).leader
            votes: list[str | None] = []
            floors: list[float | None] = []
            tokens = stop = 0
            for index in drawn:
                stop += 1
                lps = question.logprobs[index] if question.logprobs else None
                bound = rule.cut_bound(floors) if cut and lps else None
                at = cut_point(lps, bound) if bound is not None and lps else None
                if at is not None:
                    tokens += at
                    continue
                tokens += (question.tokens[index] or 0) if question.tokens else 0
                votes.append(question.key(question.answers[index]))
                floors.append(question.floors[index] if question.floors else None)
                if Tally.of(votes).leader == final:
                    break
            answer = Tally.of(votes).leader if votes else None
            rows[qi][0] += answer is not None and answer == question.key(question.gold)
            rows[qi][1] += stop
            rows[qi][2] += tokens
    label = "oracle + cut" if cut else "oracle"
    return _result(label, len(orders), [(a, b, c) for a, b, c in rows], bank.has_tokens)


def _point(result: ReplayResult, base: ReplayResult, ac: ReplayResult, causal: bool) -> Point:
    delta, se = paired_delta(result, base, range(result.questions))
    tokens, base_tokens, ac_tokens = result.avg_tokens(), base.avg_tokens(), ac.avg_tokens()
    return Point(
        label=result.policy,
        causal=causal,
        delta=delta,
        se=se,
        samples=result.avg_samples() / base.avg_samples(),
        tokens=tokens / base_tokens if tokens is not None and base_tokens else None,
        tokens_ac=tokens / ac_tokens if tokens is not None and ac_tokens else None,
    )


def _fmt(value: float | None) -> str:
    return "    -" if value is None else f"{value:.3f}"


def _reach(at: Callable[[float], Point]) -> Point | None:
    """The count-only point of the highest threshold whose tokens are at most 0.75 x AC-Beta's (none
    above 0.5: ``None``); bisection, as a lower threshold never stops later."""

    def reached(p: Point) -> bool:
        return p.tokens_ac is not None and p.tokens_ac <= 0.75

    low, high = 0.5, 0.975
    best = at(low)
    if not reached(best):
        return None
    while high - low > 0.002:
        mid = (low + high) / 2
        point = at(mid)
        if reached(point):
            low, best = mid, point
        else:
            high = mid
    return best


def frontier(name: str, bank: CodedBank, orders: Orders, cap: int) -> list[Point]:
    """Print ``name``'s frontier table and its summary line; return its points."""
    base, ac = run_policies(bank, ["predictive", "ac-beta"], orders=orders, max_samples=cap)

    def run(label: str, rule: StopRule, window: int = GROUP_WINDOW) -> ReplayResult:
        with _window(bank, window) as windowed:
            return replay(windowed, rule, orders=orders, max_samples=cap, policy=label)

    results = [run(f"predictive {t}", PredictiveMajority(threshold=t)) for t in CURVE]
    results += [
        run(f"cut warmup {w} window {g}", PredictiveCut(warmup=w), g) for g in WINDOWS for w in WARMUPS
    ]
    results += [run(f"cut {t} (warmup 2, window 16)", PredictiveCut(threshold=t)) for t in (0.95, 0.9)]
    points = [_point(r, base, ac, causal=True) for r in results]
    points += [_point(oracle(bank, orders, cap, cut=c), base, ac, causal=False) for c in (False, True)]
    reach = _reach(
        lambda t: _point(run(f"predictive {t:.3f}", PredictiveMajority(threshold=t)), base, ac, True)
    )
    print(
        f"  frontier {name} (questions {base.questions}, cap {cap}; predictive {base.accuracy():.2f} % "
        f"@ {base.avg_samples():.2f} samples; marks: A acc >= pred - 0.1, S samples <= 1.02x, "
        f"T tokens <= pred, C tokens <= 0.75x AC-Beta):",
        flush=True,
    )
    print(f"    {'point':32s} {'dacc ± s.e.':>15s} {'samp x':>7s} {'tok x':>7s} {'x ac':>7s}  marks")
    for p in points:
        print(
            f"    {p.label:32s} {p.delta:+6.2f} ± {p.se:5.2f} {p.samples:7.3f} {_fmt(p.tokens):>7s} "
            f"{_fmt(p.tokens_ac):>7s}  {p.marks}"
        )
    if reach is None:
        print("    count-only: no threshold down to 0.5 reaches 0.75x AC-Beta's tokens")
    else:
        print(
            f"    count-only: {reach.label} first reaches 0.75x AC-Beta's tokens ({_fmt(reach.tokens_ac)}), "
            f"at samples x{reach.samples:.3f}, {reach.delta:+.2f} ± {reach.se:.2f} points"
        )
    causal = [p for p in points if p.causal]
    winners = [p.label for p in causal if p.marks == "all"]
    eligible = [p for p in causal if p.samples <= 1.02 and p.delta >= -0.1 and p.tokens_ac is not None]
    best = min(eligible, key=lambda p: p.tokens_ac or 0.0, default=None)
    print(
        f"  summary {name}: "
        + (f"all four targets met by {', '.join(winners)}" if winners else "no causal point meets all four")
        + "; best tokens x AC-Beta with samples <= 1.02x and dacc >= -0.1: "
        + (f"{best.label} (x{_fmt(best.tokens_ac)}, marks {best.marks})" if best else "none"),
        flush=True,
    )
    return points
