"""What the verdicts' LangChain runs cost (retryctl.nodes._lc_runs): per decision with no callback
handler listening (the check that finds none), and with one no-op ``BaseCallbackHandler``.

    .venv/bin/python bench/langchain_runs_overhead.py [--n 20000] [--json]

Timed by ``timeit`` (best of 5 repeats, per call): ``traced_config()`` outside a run and inside a
run whose config has no handler; ``attempt_scope`` entered and left with none; ``verdict_run`` (one
``retryctl.verdict`` run started and ended, one custom event) with one no-op handler; and an
``attempt_scope`` with that handler. The figures are microseconds per call.
"""

from __future__ import annotations

import argparse
import json
import timeit
import uuid
from collections.abc import Callable
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler, CallbackManager
from langchain_core.runnables.config import var_child_runnable_config

from retryctl.controller import Action, Verdict
from retryctl.nodes._lc_runs import attempt_scope, traced_config, verdict_run


class Noop(BaseCallbackHandler):
    """A handler that does nothing: what remains is LangChain's dispatch and retryctl's building."""


def per_call_us(fn: Callable[[], Any], n: int) -> float:
    """The best of five repeats of ``n`` calls, in microseconds per call."""
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


def _scope() -> None:
    with attempt_scope(2, "multiply"):
        pass


def measure(n: int) -> dict[str, float]:
    verdict = Verdict(action=Action.RETRY, reason="transient fault from 'multiply'", confidence=None)
    parent = CallbackManager(handlers=[Noop()], inheritable_handlers=[Noop()], parent_run_id=uuid.uuid4())
    heard: Any = {"callbacks": parent, "tags": ["seq:step:1"], "metadata": {"langgraph_node": "tools"}}
    silent: Any = {"callbacks": CallbackManager(handlers=[]), "tags": [], "metadata": {}}
    out: dict[str, float] = {"check_outside_run_us": per_call_us(traced_config, n)}
    token = var_child_runnable_config.set(silent)
    try:
        out["check_no_handler_us"] = per_call_us(traced_config, n)
        out["attempt_scope_no_handler_us"] = per_call_us(_scope, n)
    finally:
        var_child_runnable_config.reset(token)
    token = var_child_runnable_config.set(heard)
    try:
        out["attempt_scope_one_handler_us"] = per_call_us(_scope, n // 10)
    finally:
        var_child_runnable_config.reset(token)

    def one_run() -> None:
        verdict_run(heard, verdict, step_id="tool:multiply:c1", attempt=2, target="multiply",
                    record_hash="ab" * 32, run_id="t1")  # fmt: skip

    out["verdict_run_one_handler_us"] = per_call_us(one_run, max(1, n // 20))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="calls per repeat (fewer for the handler runs)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    args = parser.parse_args()
    figures = measure(args.n)
    if args.json:
        print(json.dumps(figures))
        return
    for name, value in figures.items():
        print(f"{name:32} {value:9.3f}")


if __name__ == "__main__":
    main()
