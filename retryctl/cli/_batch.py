"""``retryctl batch``: run the demo agent (or any graph) over a JSONL task file.

Exit codes: 0 every task finished; 1 some tasks failed on infrastructure after their retries (run
again with ``--resume``); 2 a usage error (a malformed task file names its line) or an embedded model
that cannot run on this CPU (a ``problem:`` line says how to rebuild it); 3 the batch breaker
paused the batch (it says why; ``--resume`` continues); 130 interrupted by Ctrl-C (one line says how many
tasks were kept and the command that resumes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from retryctl._paths import PathError, check_input, check_output
from retryctl._scores import cell, figure_rows
from retryctl.audit import DecisionLog
from retryctl.batch import (
    DEFAULT_GRAPH,
    BatchConfig,
    Task,
    TaskFormatError,
    load_tasks,
    read_results,
    summarise_results,
)
from retryctl.cli._batch_session import GraphSpec, Run, session
from retryctl.cli._batch_session import fail as _fail
from retryctl.cli._interrupt import again_command, interrupted
from retryctl.cli._logs import TORN_TAIL, open_verified
from retryctl.cli._model_check import require_embedded_build, require_extra
from retryctl.cli._quiet_stdout import run_quietly
from retryctl.cli._ray_option import RayOption, ray_executor
from retryctl.cli._token_log_option import Keep, TokenLogMaxOption, TokenLogOption, token_log_of
from retryctl.exceptions import ConfigError, LogIntegrityError, UsageError

if TYPE_CHECKING:
    from retryctl.controller import Policy
    from retryctl.evals._choice import CalibrationChoice

__all__ = ["batch"]

_ERRORS_EXIT = 1
_PAUSED_EXIT = 3


def _print_summary(summary: dict[str, Any], console: Console) -> None:
    table = Table(title="batch summary", title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    acc = summary["accuracy"]
    avg = summary["avg_samples_finishing_try"]
    # The labels and cells of retryctl._scores (LABELS, MISSING): the same run's figures read the same,
    # by the same labels, in `batch`, `eval` and `audit`.
    rows = [
        ("tasks in results", str(summary["tasks"])),
        ("finished", str(summary["finished"])),
        ("infrastructure errors", str(summary["errors"])),
        ("tasks with gold", str(summary["graded"])),
        *(figure_rows(summary) if acc is not None else []),
        # Of the try that gave each result: `audit`'s "average samples (all tries)" also counts what an
        # interrupted try drew before a --resume ran the task again (docs/batch.md).
        ("average samples (finishing try)", cell(avg) if avg is None else f"{avg:.2f}"),
        ("cost (usd)", f"{summary['usd']:.4f}"),
        ("ended at max budget", str(summary["at_max_budget"])),
    ]
    rows += [(f"status: {k}", str(v)) for k, v in summary["statuses"].items()]
    if "calibration" in summary:
        rows.append(("calibration", summary["calibration"]))
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)


def _check_paths(tasks_path: Path, out: Path, log: Path | None, checkpoints: Path | None) -> None:
    """Every file of the batch is a regular file (or can be made), and no output is another file of it."""
    try:
        check_input(tasks_path, "task file")
        seen: list[tuple[Path, str]] = [(tasks_path, "the task file")]
        for path, what in ((out, "--out"), (log, "--log"), (checkpoints, "--checkpoints")):
            if path is not None:
                check_output(path, what, inputs=seen)
                seen.append((path, what))
    except PathError as exc:
        _fail(str(exc))


def _pending(
    tasks_path: Path, out: Path, *, resume: bool
) -> tuple[list[Task], list[Task], list[dict[str, Any]]]:
    """All tasks, those without a finished result in ``out``, and the results already there; usage
    errors exit 2."""
    try:
        tasks = load_tasks(tasks_path)
    except FileNotFoundError:
        _fail(f"{tasks_path}: no such task file")
    except TaskFormatError as exc:
        _fail(str(exc))
    except OSError as exc:  # a directory, no permission: say so in one line, not a traceback
        _fail(f"{tasks_path}: cannot read the task file: {exc.strerror or exc}")
    try:
        state = read_results(out)  # first: a file that is not ours is named as such
    except TaskFormatError as exc:
        _fail(f"cannot {'resume' if resume else 'write to --out'}: {exc}")
    if not resume and out.exists() and out.stat().st_size > 0:
        _fail(f"{out} already has results; pass --resume to continue it, or choose another --out")
    finished = state.finished
    return tasks, [t for t in tasks if t.id not in finished], state.results


def _check_same_calibration(
    out: Path, results: list[dict[str, Any]], choice: CalibrationChoice | None
) -> None:
    """Refuse a ``--resume`` under another calibration than that of the ``results`` already in ``out``:
    the summary would label answers with a calibration none of them was judged under."""
    if choice is None:
        return
    used = {str(r["calibration"]) for r in results if "calibration" in r}
    if used and used != {choice.label}:
        _fail(
            f"--calibration {choice.label}: the results already in {out} were judged under "
            f"{', '.join(sorted(used))}; resume with that, or write the new run to another --out"
        )


def _check_checkpoints(path: Path | None, *, resume: bool) -> None:
    """Refuse a directory, and earlier checkpoints without ``--resume``: their threads are named by task
    id alone, so a new batch would find another batch's threads and take their state as its own."""
    if path is None:
        return
    if path.is_dir():
        _fail(f"{path}: --checkpoints is a directory; give the SQLite file's path")
    if not resume and path.exists() and path.stat().st_size > 0:
        _fail(
            f"{path} already holds checkpoints; pass --resume to continue that batch, "
            "or choose another --checkpoints"
        )


def _open_log(path: Path, console: Console, *, resume: bool) -> DecisionLog:
    """The decision log, opened for appending.

    On ``--resume`` a torn last line in the log (a write cut short by the crash being resumed from) is
    cut, the cut is recorded in the log itself, and one line says so; otherwise it is an error naming
    the line. A log whose chain is broken anywhere else, or a file that is not a decision log, is
    never appended to: exit 2, its bytes unchanged.
    """
    try:
        decision_log = open_verified(path, repair=resume)
    except OSError as exc:
        _fail(f"--log {path}: cannot read the decision log: {exc.strerror or exc}")
    except UsageError as exc:
        _fail(str(exc))
    except LogIntegrityError as exc:
        if exc.problem.startswith(TORN_TAIL):
            hint = " (pass --resume to continue a crashed batch: a torn last line is then cut and recorded)"
        else:
            hint = "; not appending to a broken chain (or to a file that is not a decision log)"
        _fail(f"decision log: {exc}{hint}")
    if decision_log.repaired_bytes:
        console.print(
            f"[yellow]{path}: repaired a torn last line left by a crash: cut "
            f"{decision_log.repaired_bytes} bytes and wrote a repair record saying so[/yellow]",
            soft_wrap=True,
        )
    return decision_log


def _factory_kwargs(
    *, base_url: str | None, model_name: str | None, breakers: str | None, policy: Policy | None
) -> dict[str, Any]:
    """What the graph factory is passed besides ``log`` and ``checkpointer``: the options given. A
    ``--breakers`` value that is no store (``retryctl serve --breakers``'s syntax) exits 2."""
    kwargs: dict[str, Any] = {}
    if base_url is not None or model_name is not None:
        kwargs.update(base_url=base_url, model_name=model_name)
    if breakers is not None:
        from retryctl.runtime._stores import check_breakers

        try:
            kwargs["breakers"] = check_breakers(breakers, field="--breakers")
        except ConfigError as exc:
            _fail(str(exc))
    if policy is not None:
        kwargs["policy"] = policy
    return kwargs


def _calibration(value: str | None, graph_spec: str, base_url: str | None) -> CalibrationChoice | None:
    """The demo agent's calibration (``None`` for a graph of one's own, which sets its own policy);
    a bad ``--calibration`` exits 2 before anything is written."""
    if graph_spec != DEFAULT_GRAPH:
        if value is not None:
            _fail(
                f"--calibration {value}: applies to the demo agent (the default --graph); a graph of "
                "your own applies one with Policy(calibration=load_calibration(FILE))"
            )
        return None
    from retryctl.evals._choice import choose_calibration

    try:
        return choose_calibration(value, embedded=base_url is None)
    except ConfigError as exc:
        _fail(str(exc))


def _demo_agent_policy(
    choice: CalibrationChoice | None, keep: Keep | None, max_tokens: int | None
) -> Policy | None:
    """The demo agent's policy under ``choice`` with the ``--token-log`` options on top (its tuned
    samples and threshold stay); ``None`` for a graph of one's own, where those options exit 2."""
    if choice is None:
        if keep is not None or max_tokens is not None:
            _fail(
                "--token-log/--token-log-max: apply to the demo agent (the default --graph); a graph of "
                "your own sets Policy(token_log=...) itself"
            )
        return None
    from retryctl.agent._graph import demo_policy

    policy = demo_policy(choice.calibration)
    tokens = token_log_of(keep, max_tokens, policy.token_log)
    return policy if tokens is None else policy.model_copy(update={"token_log": tokens})


def batch(
    ctx: typer.Context,
    tasks_path: Annotated[
        Path, typer.Argument(metavar="TASKS.jsonl", help="Tasks: {id, question, gold?} a line.")
    ],
    *,
    out: Annotated[Path, typer.Option("--out", help="Results JSONL, one line per finished task.")],
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Tasks running at once.")] = 4,
    resume: Annotated[bool, typer.Option("--resume", help="Skip tasks already finished in --out.")] = False,
    graph_spec: Annotated[
        str,
        typer.Option(
            "--graph",
            # The default said in words: as one [default: ...] word it is cut at 80 columns.
            help="module:attr of a compiled graph or a factory returning one. Default: the demo agent "
            "(module retryctl.agent, attr build_demo_graph).",
            show_default=False,
        ),
    ] = DEFAULT_GRAPH,
    retries: Annotated[
        int, typer.Option("--retries", min=1, help="Tries per task on infrastructure failure.")
    ] = 3,
    retry_wait: Annotated[
        float, typer.Option("--retry-wait", min=0.0, help="Backoff multiplier, seconds.")
    ] = 1.0,
    breaker: Annotated[
        int,
        typer.Option("--breaker", min=0, help="Pause after K consecutive tasks at max budget (0: never)."),
    ] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    log: Annotated[
        Path | None,
        typer.Option("--log", help="Decision log for every verdict (passed to the graph factory)."),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="OpenAI-compatible server (passed to the factory).")
    ] = None,
    model_name: Annotated[
        str | None, typer.Option("--model-name", help="Model on that server (passed to the factory).")
    ] = None,
    checkpoints: Annotated[
        Path | None,
        typer.Option(
            "--checkpoints",
            help="SQLite file of LangGraph checkpoints (passed to the factory as checkpointer=): "
            "a task run again continues its thread instead of starting over.",
        ),
    ] = None,
    calibration: Annotated[
        str | None,
        typer.Option(
            "--calibration",
            help="The demo agent's calibration: 'shipped' (the embedded model's; its default), 'none' "
            "(raw fused confidence) or a file (retryctl calibrate). With --base-url and none given: "
            "uncalibrated.",
        ),
    ] = None,
    token_log: TokenLogOption = None,
    token_log_max: TokenLogMaxOption = None,
    ray: RayOption = None,
    breakers: Annotated[
        str | None,
        typer.Option(
            "--breakers",
            metavar="STORE",
            help="Where the graph's circuit breakers keep their state (passed to the factory as "
            "breakers=): memory, sqlite:PATH or redis://host:port/db (on Redis one state for every worker "
            "on every node).",
        ),
    ] = None,
) -> None:
    """Run a graph over every task with adaptive per-task budgets; results are appended as tasks finish."""
    console = Console(stderr=as_json)
    _check_paths(tasks_path, out, log, checkpoints)
    choice = _calibration(calibration, graph_spec, base_url)
    factory_kwargs = _factory_kwargs(
        base_url=base_url,
        model_name=model_name,
        breakers=breakers,
        policy=_demo_agent_policy(choice, token_log, token_log_max),
    )
    tasks, pending, earlier = _pending(tasks_path, out, resume=resume)
    _check_same_calibration(out, earlier, choice)
    if pending and graph_spec == DEFAULT_GRAPH and base_url is None:
        # the demo agent offline: a missing extra or a native crash would stop every task
        require_embedded_build("retryctl batch")
    elif pending and graph_spec == DEFAULT_GRAPH:
        require_extra("openai", "retryctl batch --base-url")
    _check_checkpoints(checkpoints, resume=resume)
    executor = ray_executor(
        ray if pending else None,
        per_worker=concurrency,
        command="retryctl batch",
        refused={"--checkpoints": checkpoints},
    )
    try:
        config = BatchConfig(
            concurrency=concurrency,
            retries=retries,
            retry_wait_s=retry_wait,
            breaker_k=breaker or None,
            line_fields={} if choice is None else {"calibration": choice.label},
        )
    except ConfigError as exc:
        _fail(str(exc))
    if choice is not None:
        console.print(choice.describe(), markup=False, highlight=False, soft_wrap=True)
    decision_log = _open_log(log, console, resume=resume) if pending and log is not None else None
    graph = GraphSpec(spec=graph_spec, factory_kwargs=factory_kwargs, checkpoints=checkpoints)
    run = Run(config=config, console=console, executor=executor, log=decision_log)
    try:
        # Under --json stdout is the summary alone; under --ray Ray's driver prints to it from its thread
        # while the run goes, so the run's lines go to stderr and the summary after it to stdout
        # (_quiet_stdout).
        main = session(graph, tasks=tasks, pending=pending, out=out, run=run)
        outcome = run_quietly(main, quiet=as_json or executor is not None)
    except KeyboardInterrupt:
        finished = len(read_results(out).finished)
        interrupted(
            f"{finished} of {len(tasks)} tasks finished and kept in {os.fspath(out)}",
            again_command(ctx, add=["--resume"]),
        )
    finally:
        if decision_log is not None:
            decision_log.close()
    summary = summarise_results(read_results(out).results)
    if choice is not None:
        summary["calibration"] = choice.label
    if as_json:
        typer.echo(
            json.dumps(
                {
                    **summary,
                    "paused": outcome.paused if outcome else None,
                    "not_started": outcome.not_started if outcome else [],
                },
                indent=2,
            )
        )
    else:
        _print_summary(summary, console)
        console.print(f"results: {os.fspath(out)}", soft_wrap=True)
    if outcome is not None and outcome.paused is not None:
        console.print(f"[bold red]{outcome.paused}[/bold red]", soft_wrap=True)
        console.print(f"{len(outcome.not_started)} tasks not started.")
        raise typer.Exit(_PAUSED_EXIT)
    if summary["errors"]:
        console.print(
            f"problem: {summary['errors']} of {summary['tasks']} tasks failed on infrastructure (a dead or "
            "unreachable server, a crashed sandbox); --resume runs them again",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(_ERRORS_EXIT)
