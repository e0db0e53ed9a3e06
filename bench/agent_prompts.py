"""The demo agent's prompts and grammar ladder, measured on the development set with the embedded model.

For each problem: ``k`` expressions under the ladder's rung at ``--strictness`` (each checked and
evaluated as the expression members do) and ``a`` answers in the model's own words. Prints, by
stratum, how often the expressions' majority is right, its precision and coverage where 7 or more of
8 agree, the own answers' majority, and the AUROC of cross-member agreement (the share of own answers
equal to the expressions' leading value) for right vs wrong leaders.

    python bench/agent_prompts.py --n 40 --seed 11 --expression-shots six --answer-shots six

Development seeds only (not 1 or 3: the calibration's fit and test sets).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections import Counter

from retryctl.agent._grammars import grammar_for
from retryctl.agent._members import ToolBackend
from retryctl.agent._prompts import EXPRESSION_FORMAT, answer_prompt, demo_equivalence, expression_prompt
from retryctl.evals import word_problems
from retryctl.models import EmbeddedBackend, Message, SamplingParams
from retryctl.tools import CalculatorTool


def auroc(right: list[float], wrong: list[float]) -> float | None:
    """The chance that a right leader scores above a wrong one (ties count half)."""
    if not right or not wrong:
        return None
    wins = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    return wins / (len(right) * len(wrong))


def main() -> None:
    """Run the measurement and print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--answers", type=int, default=5)
    ap.add_argument("--strictness", type=float, default=1.0)
    ap.add_argument("--expression-shots", default="six")
    ap.add_argument("--answer-shots", default="six")
    args = ap.parse_args()
    if args.seed in (1, 3):
        raise SystemExit("seeds 1 and 3 are the calibration's fit and test sets: use another")
    model = EmbeddedBackend(n_ctx=1536)
    tool = ToolBackend(model, CalculatorTool())
    rows = []
    started = time.monotonic()
    for i, task in enumerate(word_problems(args.n, seed=args.seed)):
        asked: list[Message] = [{"role": "user", "content": task.question}]
        grammar = grammar_for(asked, args.strictness)
        params = SamplingParams(
            temperature=0.7, max_tokens=40, seed=1000 + i, response_format=EXPRESSION_FORMAT, grammar=grammar
        )
        drawn = model.sample_sync(expression_prompt(asked, args.expression_shots), params, k=args.k)
        values = [tool.evaluate(c, asked).answer for c in drawn]
        votes = Counter(v for v in values if v is not None)
        leader, n = votes.most_common(1)[0] if votes else (None, 0)
        own_params = dataclasses.replace(params, response_format=None, grammar=None, max_tokens=16)
        own = model.sample_sync(answer_prompt(asked, args.answer_shots), own_params, k=args.answers)
        own_votes = Counter(demo_equivalence(c.text) for c in own)
        own_lead = next((a for a, _ in own_votes.most_common() if a is not None), None)
        cross = own_votes.get(leader, 0) / len(own) if leader is not None else 0.0
        gold = str(task.gold)
        rows.append((task.stratum, n, leader == gold, own_lead == gold, cross))
        shown = Counter(drawn_expression(c.text) for c in drawn).most_common(2)
        print(task.stratum, gold, leader, n, own_lead, f"{cross:.2f}", shown, flush=True)
    print(f"time {time.monotonic() - started:.0f}s  rung {grammar.name if grammar else None}")
    for stratum in ("small", "one_step", "two_step", "three_step", None):
        part = [r for r in rows if stratum is None or r[0] == stratum]
        if not part:
            continue
        line = f"{stratum or 'all'}: n {len(part)} expr-majority {sum(r[2] for r in part) / len(part):.2f}"
        line += f" own-majority {sum(r[3] for r in part) / len(part):.2f}"
        sure = [r for r in part if r[1] >= 7 * args.k / 8]
        if sure:
            precision = sum(r[2] for r in sure) / len(sure)
            line += f" >=7/8: coverage {len(sure) / len(part):.2f} precision {precision:.2f}"
        print(line)
    led = [r for r in rows if r[1] > 0]
    area = auroc([r[4] for r in led if r[2]], [r[4] for r in led if not r[2]])
    print(f"cross_member AUROC (right vs wrong leaders, n {len(led)}): {area}")
    sure = [r for r in led if r[1] >= 5 * args.k / 8]
    area = auroc([r[4] for r in sure if r[2]], [r[4] for r in sure if not r[2]])
    print(f"cross_member AUROC where >=5/8 agree (n {len(sure)}): {area}")


def drawn_expression(text: str) -> str:
    """The expression in a drawn reply, or the reply itself."""
    return text.split('"expression": "', 1)[-1].rstrip('"}')


if __name__ == "__main__":
    main()
