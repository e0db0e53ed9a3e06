"""What the two overhead benchmarks (``controller_overhead.py``, ``middleware_overhead.py``) measure alike:
rounds that rotate the subjects, and a cProfile that sees ToolNode's worker threads."""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["paired_ratio", "profile_threads", "rotated_rounds"]


def rotated_rounds(subjects: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each subject's figure per round (what its callable returns: a median step time). Every round runs
    each subject once, in an order rotated by one per round, so that load drifting during the benchmark
    hits all of them alike."""
    names = list(subjects)
    runs: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(subjects[name]())
    return runs


def paired_ratio(runs: Mapping[str, list[float]], subject: str, base: str) -> float:
    """The median over rounds of ``subject``'s figure over ``base``'s in the same round: a second view
    of the ratio, less moved than best-of-N by a lucky round of one of the two (each round runs both
    within a few seconds)."""
    return statistics.median(s / b for s, b in zip(runs[subject], runs[base], strict=True))


def profile_threads(run: Callable[[], Any], *, label: str, top: int) -> None:
    """cProfile ``run()`` and print the top functions by own time, then retryctl's by cumulative time.

    ToolNode runs each sync step's tool calls in a new worker thread, where a profiler enabled on this
    thread sees nothing: each new thread gets a profiler of its own (through ``threading.setprofile``)
    and their figures are added to this thread's. The figures are inflated by the profiler, several
    times over: compare them with one another, not with the timings.
    """
    workers: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start_worker(*_: Any) -> None:
        worker = cProfile.Profile()
        with lock:
            workers.append(worker)
        sys.setprofile(None)
        worker.enable()

    main = cProfile.Profile()
    threading.setprofile(start_worker)
    main.enable()
    try:
        run()
    finally:
        main.disable()
        threading.setprofile(None)
    stats = pstats.Stats(main)
    for worker in workers:
        worker.create_stats()
        stats.add(worker)
    print(f"cProfile of {label} ({len(workers)} worker threads), by own time:")
    stats.sort_stats("tottime").print_stats(top)
    print("the controller's functions, by cumulative time:")
    stats.sort_stats("cumulative").print_stats("retryctl", top)
