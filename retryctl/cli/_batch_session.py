"""How ``retryctl batch`` runs its pending tasks: the graph loaded (or named, for ``--ray``'s workers),
the results file opened, the tasks run with a progress bar (on a terminal) or one line per finished
task (elsewhere), under ``--ray`` with the per-node tally. The command (``_batch``) checks its input
first and prints the summary after.
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from retryctl.audit import DecisionLog
from retryctl.batch import (
    BatchConfig,
    BatchOutcome,
    GraphJob,
    Invocable,
    ResultsFile,
    Task,
    load_graph,
    run_batch,
)
from retryctl.cli._console import grade_mark
from retryctl.cli._ray_option import node_counts
from retryctl.exceptions import ConfigError

if TYPE_CHECKING:
    from retryctl.batch._ray import RayExecutor

__all__ = ["USAGE_EXIT", "GraphSpec", "Run", "describe", "fail", "session"]

USAGE_EXIT = 2


def fail(message: str) -> NoReturn:
    """One ``error:`` line on stderr, exit 2 (a usage error)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(USAGE_EXIT)


def describe(line: dict[str, Any]) -> str:
    """A finished task in one line: ``q3: accepted '7' (confidence 0.97)``, its mark and budget."""
    if line["status"] == "error":
        return f"{line['id']}: error after {line['tries']} tries: {line['error']}"
    conf = "" if line.get("confidence") is None else f" (confidence {line['confidence']:.2f})"
    mark = grade_mark(line)
    budget = " [at max budget]" if line.get("at_max_budget") else ""
    answer = "no answer" if line.get("answer") is None else repr(line["answer"])  # as `eval` says it
    return f"{line['id']}: {line['status']} {answer}{conf}{mark}{budget}"


@dataclass(frozen=True, kw_only=True)
class GraphSpec:
    """What to load, and with what."""

    spec: str
    factory_kwargs: dict[str, Any]
    checkpoints: Path | None


@asynccontextmanager
async def _graph(graph: GraphSpec) -> AsyncIterator[Invocable]:
    """The graph, loaded inside the event loop; with ``--checkpoints`` on an ``AsyncSqliteSaver`` over
    that file (it can only be made in a running loop), closed on the way out."""
    async with AsyncExitStack() as stack:
        checkpointer = None
        if graph.checkpoints is not None:
            # Imported here: the other commands never load the SQLite checkpointer.
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            name = os.fspath(graph.checkpoints)
            try:
                checkpointer = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(name))
                await checkpointer.setup()  # a file that is not SQLite fails here, not in every task
            except sqlite3.Error as exc:
                fail(f"{name}: cannot use as --checkpoints: {exc}")
        try:
            loaded = load_graph(graph.spec, checkpointer=checkpointer, **graph.factory_kwargs)
        except ConfigError as exc:
            fail(str(exc))
        except Exception as exc:  # the factory's own failure: name it in one line, not a traceback
            lines = str(exc).splitlines()
            detail = f": {lines[0]}" if lines else ""
            fail(f"--graph {graph.spec}: loading the graph raised {type(exc).__name__}{detail}")
        yield loaded


@contextmanager
def _usage_errors() -> Iterator[None]:
    """A ``ConfigError`` raised while the batch starts (under ``--ray``, a worker that cannot build the
    graph) exits 2 naming it, as one raised before."""
    try:
        yield
    except ConfigError as exc:
        fail(str(exc))


@dataclass(frozen=True, kw_only=True)
class Run:
    """How the pending tasks run: in this process, or on ``executor``'s workers (``--ray``)."""

    config: BatchConfig
    console: Console
    executor: RayExecutor | None = None
    log: DecisionLog | None = None


async def session(
    graph_spec: GraphSpec, *, tasks: list[Task], pending: list[Task], out: Path, run: Run
) -> BatchOutcome | None:
    """Load the graph (when a task is pending), open the results file, run the pending tasks."""
    console = run.console
    async with AsyncExitStack() as stack:
        graph: Invocable | GraphJob | None = None
        if pending and run.executor is not None:  # each worker builds it
            graph = GraphJob(spec=graph_spec.spec, factory_kwargs=graph_spec.factory_kwargs)
        elif pending:
            if run.log is not None:  # the graph writes it (under --ray, the driver does)
                kwargs = {**graph_spec.factory_kwargs, "log": run.log}
                graph_spec = GraphSpec(
                    spec=graph_spec.spec, factory_kwargs=kwargs, checkpoints=graph_spec.checkpoints
                )
            graph = await stack.enter_async_context(_graph(graph_spec))
        results = ResultsFile(out)
        stack.callback(results.close)
        if results.cut_bytes:
            console.print(
                f"[yellow]{out}: cut a torn last line ({results.cut_bytes} bytes) left by a crash; "
                "its task runs again[/yellow]",
                soft_wrap=True,
            )
        skipped = len(tasks) - len(pending)
        if skipped:
            console.print(
                f"resuming: {skipped} of {len(tasks)} tasks already finished in {out}", soft_wrap=True
            )
        if graph is None:
            return None
        return await _run(graph, pending, results, run, done=skipped, total=len(tasks))


async def _run(
    graph: Invocable | GraphJob,
    pending: list[Task],
    results: ResultsFile,
    run: Run,
    *,
    done: int,
    total: int,
) -> BatchOutcome:
    console = run.console
    # On a terminal a live bar; elsewhere (CI, a pipe) one line per finished task, which logs well.
    live = console.is_terminal
    progress = Progress(
        TextColumn("[bold]batch"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=console,
        disable=not live,
    )
    bar = progress.add_task("batch", total=total, completed=done, last="")
    counter = [done]
    nodes: Counter[str] = Counter()

    def on_done(line: dict[str, Any]) -> None:
        counter[0] += 1
        text = describe(line)
        if "node" in line:  # under --ray: where the tasks ran, per node
            nodes[str(line["node"])] += 1
            text = f"[{node_counts(nodes)}] {text}"
        progress.update(bar, advance=1, last=text[: 60 if not nodes else 120])
        if not live:
            console.print(f"[{counter[0]}/{total}] {text}", markup=False, highlight=False, soft_wrap=True)

    with progress, _usage_errors():
        return await run_batch(
            graph,
            pending,
            results,
            config=run.config,
            on_done=on_done,
            executor=run.executor,
            log=run.log if run.executor is not None else None,  # else the graph holds it
        )
