"""``retryctl eval``: the demo agent and its plain baselines over graded tasks, in one run, with the
figures that say how far its ``accept`` can be trusted (docs/evals.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from retryctl._paths import PathError, check_input, check_output
from retryctl._scores import FIGURES, LABELS, cell
from retryctl.cli._console import grade_mark, table_console
from retryctl.cli._interrupt import again_command, interrupted
from retryctl.cli._model_check import require_embedded_build, require_extra
from retryctl.cli._quiet_stdout import run_quietly
from retryctl.cli._ray_option import RayOption, ray_executor
from retryctl.exceptions import ConfigError, TaskFormatError

if TYPE_CHECKING:
    from retryctl.batch import Task
    from retryctl.controller import Policy
    from retryctl.evals._choice import CalibrationChoice

__all__ = ["eval_"]

_USAGE_EXIT = 2
_COLUMNS = ("n", *FIGURES)
"""Every figure of `--json` per system, by the names of `retryctl._scores.FIGURES` (labels: ``LABELS``)."""


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(_USAGE_EXIT)


def _table(title: str, rows: dict[str, dict[str, Any]]) -> Table:
    table = Table(title=title)
    table.add_column("system", no_wrap=True)
    for column in _COLUMNS:
        table.add_column(LABELS.get(column, column), justify="right", no_wrap=True)
    for name, row in rows.items():
        cells = [str(row[c]) if c == "n" else cell(row.get(c)) for c in _COLUMNS]
        table.add_row(name, *cells)
    return table


def progress_line(kind: str, line: dict[str, Any]) -> str:
    """One finished task: the agent's verdict and answer, or each baseline's majority and its share."""
    if kind != "baselines":
        answer = line.get("answer")
        shown = "no answer" if answer is None else repr(answer)
        return f"{kind} {line['id']}: {line.get('status')} {shown}{grade_mark(line)}"
    votes = [
        f"{name} {'no answer' if s.get('answer') is None else repr(s['answer'])}"
        f" ({s.get('confidence', 0.0):.3f} agree){grade_mark(s)}"
        for name, s in line.get("systems", {}).items()
    ]
    return f"baselines {line['id']}: " + ("; ".join(votes) or "no systems")


def _policy(calibration: str | None, base_url: str | None) -> tuple[Policy, CalibrationChoice]:
    """The demo policy with the ``--calibration`` asked for (``ConfigError`` naming a bad one)."""
    from retryctl.agent._graph import demo_policy
    from retryctl.evals._choice import choose_calibration

    choice = choose_calibration(calibration, embedded=base_url is None)
    return demo_policy(choice.calibration), choice


def _graded_tasks(path: Path) -> list[Task]:
    """The task file's tasks, every one with gold; exit 2 naming the problem otherwise."""
    from retryctl.batch import load_tasks

    try:
        check_input(path, what="task file")
        tasks = load_tasks(path)
    except (PathError, TaskFormatError) as exc:
        _fail(str(exc))
    ungraded = [t.id for t in tasks if t.gold is None]
    if ungraded:
        _fail(f"{path}: task {ungraded[0]!r} has no 'gold'; an evaluation needs every answer")
    return tasks


def eval_(
    ctx: typer.Context,
    tasks_path: Annotated[
        Path,
        typer.Argument(metavar="TASKS.jsonl", help="Graded tasks: {id, question, gold, stratum?} a line."),
    ],
    *,
    out: Annotated[
        Path, typer.Option("--out", help="Directory for agent.jsonl and baselines.jsonl (a rerun continues).")
    ],
    samples: Annotated[int, typer.Option("--samples", min=1, help="Samples of the bare model's vote.")] = 20,
    tool_samples: Annotated[
        int, typer.Option("--tool-samples", min=1, help="Expressions per tool member's own vote.")
    ] = 8,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Agent tasks at once.")] = 2,
    calibration: Annotated[
        str | None,
        typer.Option(
            "--calibration",
            help="'shipped' (the embedded model's; its default), 'none' (raw fused confidence) or a "
            "calibration file (retryctl calibrate). With --base-url and none given: uncalibrated.",
        ),
    ] = None,
    baselines: Annotated[bool, typer.Option("--baselines/--no-baselines", help="Run the baselines.")] = True,
    agent: Annotated[bool, typer.Option("--agent/--no-agent", help="Run the agent.")] = True,
    base_url: Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible server.")] = None,
    model_name: Annotated[str | None, typer.Option("--model-name", help="Model on that server.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write a page with the reliability diagram.")
    ] = None,
    ray: RayOption = None,
) -> None:
    """Run the demo agent beside its baselines on graded tasks: accuracy, coverage, precision, ECE, AUROC."""
    from retryctl.agent._graph import demo_model
    from retryctl.batch import read_results
    from retryctl.evals._report import evaluation, render_html
    from retryctl.evals._run import AGENT_FILE, BASELINES_FILE, EvalPlan, run_eval

    if not agent and not baselines:
        _fail("--no-agent with --no-baselines leaves nothing to evaluate; drop one of them")
    tasks = _graded_tasks(tasks_path)
    if out.exists() and not out.is_dir():
        _fail(f"--out {out}: not a directory")
    if html is not None:
        try:
            results = [(out / AGENT_FILE, "agent results"), (out / BASELINES_FILE, "baseline results")]
            check_output(html, what="--html page", inputs=[(tasks_path, "task file"), *results])
        except PathError as exc:
            _fail(str(exc))
    if base_url is not None:
        require_extra("openai", "retryctl eval --base-url")
    try:
        policy, choice = _policy(calibration, base_url)
        model = demo_model(base_url, model_name)
    except ConfigError as exc:
        _fail(str(exc))
    if base_url is None:
        require_embedded_build("retryctl eval")
    console = Console(stderr=True)

    def on_done(kind: str, line: dict[str, Any]) -> None:
        console.print(progress_line(kind, line), markup=False, highlight=False, soft_wrap=True)

    console.print(choice.describe(), markup=False, highlight=False, soft_wrap=True)
    plan = EvalPlan(
        samples=samples,
        tool_samples=tool_samples,
        concurrency=concurrency,
        baselines=baselines,
        agent=agent,
        calibration=choice.label,
    )
    ids = {t.id for t in tasks}
    executor = ray_executor(ray, per_worker=concurrency, command="retryctl eval")
    # Under --ray the workers build the model from where it is (base_url, model_name) themselves.
    remote: dict[str, Any] = {"executor": executor, "base_url": base_url, "model_name": model_name}
    try:
        # Stdout is the report alone: Ray's driver would print to it from its thread (_quiet_stdout).
        run = run_eval(tasks, out, model=model, policy=policy, plan=plan, on_done=on_done, **remote)
        run_quietly(run, quiet=executor is not None)
    except KeyboardInterrupt:
        kept = ", ".join(
            f"{len(ids & set(read_results(out / name).finished))} of {len(ids)} in {name}"
            for name, wanted in ((AGENT_FILE, agent), (BASELINES_FILE, baselines))
            if wanted and (out / name).exists()
        )
        interrupted(f"kept under {os.fspath(out)}: {kept or 'nothing yet'}", again_command(ctx))

    def lines(name: str) -> list[dict[str, Any]]:
        path = out / name
        return [r for r in read_results(path).results if str(r.get("id")) in ids] if path.exists() else []

    report = evaluation(lines(AGENT_FILE), lines(BASELINES_FILE))
    report["calibration"] = choice.label
    if html is not None:
        html.write_text(render_html(report, title=f"retryctl eval: {tasks_path.name}"), encoding="utf-8")
    _print_report(report, title=f"retryctl eval: {tasks_path.name} ({len(tasks)} tasks)", as_json=as_json)
    if not as_json:
        stdout = table_console()
        stdout.print(choice.describe(), markup=False, highlight=False, soft_wrap=True)
        stdout.print(f"results: {os.fspath(out)}", soft_wrap=True)


def _print_report(report: dict[str, Any], *, title: str, as_json: bool) -> None:
    if as_json:
        # Each system's risk–coverage curve; the reliability diagram is the HTML page's.
        curves = {name: c["risk_coverage"] for name, c in report["curves"].items()}
        shown = {k: v for k, v in report.items() if k != "curves"}
        typer.echo(json.dumps({**shown, "risk_coverage": curves}, indent=2))
        return
    stdout = table_console()
    stdout.print(_table(title, report["systems"]))
    for stratum, rows in report["strata"].items():
        stdout.print(_table(f"stratum {stratum}", rows))
    _print_selective(stdout, report["selective"])


def _print_selective(console: Console, figures: dict[str, Any]) -> None:
    """Precision at fixed coverages for every system and the oracle, then the agent's operating point
    against its members' curves (computed in :mod:`retryctl.evals._frontier`)."""
    coverages = [str(c) for c in figures["coverages"]]
    table = Table(title="risk–coverage: precision (P) answering the most confident first")
    table.add_column("system", no_wrap=True)
    for c in coverages:
        table.add_column(f"P@{c}", justify="right", no_wrap=True)
    table.add_column("coverage", justify="right", no_wrap=True)
    table.add_column("precision", justify="right", no_wrap=True)
    for name, row in figures["systems"].items():
        cells = [cell(row["precision_at"][c]) for c in coverages]
        table.add_row(name, *cells, f"{row['coverage']:.3f}", cell(row["precision"]))
    for kind, row in figures["oracle"].items():
        label = "oracle: a majority right" if kind == "majority" else "oracle: a sample right"
        cells = [cell(row["precision_at"][c]) for c in coverages]
        table.add_row(label, *cells, f"{row['answerable']:.3f}", "1.000")
    console.print(table)
    agent = figures.get("agent")
    if agent is None:
        return
    best = agent["best_member"]
    line = f"agent at coverage {agent['coverage']:.3f}: precision {cell(agent['precision'])}"
    if best is not None:
        line += (
            f"; best member's curve there: {best} {cell(agent['best_member_precision'])} "
            f"(gap {agent['gap']:+.3f})"
        )
    oracle = agent["oracle_precision"]
    if "majority" in oracle:
        line += f"; oracle {cell(oracle['majority'])}"
    console.print(line, markup=False, highlight=False, soft_wrap=True)
