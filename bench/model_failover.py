"""A dead primary model with one fallback: retryctl's ``RetryController`` against LangChain's
``ModelFallbackMiddleware`` and ``ModelRetryMiddleware``, in one run.

    .venv/bin/python bench/model_failover.py [--turns 5] [--no-wait] [--json]

(about 100 s, most of it LangChain's waits; ``--no-wait`` takes a few seconds)

Each agent answers ``--turns`` user messages on one thread (``create_agent``, no tools). Its primary
model fails every call and its fallback answers. For each agent the script prints the calls that
reached the primary, the waits asked for (how many, and their seconds: the middleware's backoff and,
with ``ChatOpenAI``, the ``openai`` client's own), and the wall time of all turns, the waits slept
for real (``--no-wait``: recorded, not slept).

Two scenarios:

1. **Scripted**: the primary raises an error carrying an HTTP status, as SDK errors do: ``503``
   (transient) or ``401`` (terminal).
2. **ChatOpenAI** against a server on 127.0.0.1 (started here) that answers every request 503: the
   primary is a real ``ChatOpenAI`` with its default client retries; the HTTP requests the server
   received are counted, so retries stacked under the middleware show.

The agents: ``RetryController(fallback_models=[backup])`` (its default breaker per model) and
``RetryController(model_breaker=None)`` (no breaker: how it behaved before); LangChain's fallback
alone, the fallback around the retry (the order ``docs/middleware.md`` shows working, retry with
``on_failure="error"``), and the retry around the fallback. LangChain's own defaults are kept
(``max_retries=2``, ``initial_delay=1.0``, ``backoff_factor=2.0``, jitter), as retryctl's are.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import openai._base_client as openai_client
from langchain.agents import create_agent
from langchain.agents.middleware import ModelFallbackMiddleware, ModelRetryMiddleware
from langchain.agents.middleware import model_retry as langchain_retry
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import SecretStr

from retryctl.middleware import RetryController

_real_sleep = time.sleep


class Waits:
    """Every wait asked for, by whom; slept for real unless ``dry``."""

    def __init__(self, dry: bool) -> None:
        self.dry = dry
        self.asked: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.asked.append(seconds)
        if not self.dry:
            _real_sleep(seconds)


class StatusError(Exception):
    """An error with an HTTP status, the shape of an SDK's API errors (``status_code``)."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class Primary(BaseChatModel):
    """Fails every call with ``status``; counts its calls."""

    status: int
    calls: int = 0

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        raise StatusError(self.status)

    def bind_tools(self, tools: Any, **kw: Any) -> Any:
        return self

    @property
    def _llm_type(self) -> str:
        return "dead-primary"


class Backup(BaseChatModel):
    """Answers every call."""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("the backup answers"))])

    def bind_tools(self, tools: Any, **kw: Any) -> Any:
        return self

    @property
    def _llm_type(self) -> str:
        return "backup"


class Unavailable:
    """An HTTP server on 127.0.0.1 that answers every request 503, counting them."""

    def __init__(self) -> None:
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                owner.requests += 1
                body = b'{"error": {"message": "unavailable", "type": "server_error"}}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


Stack = Callable[[BaseChatModel, Waits], list[Any]]

STACKS: dict[str, Stack] = {
    "retryctl RetryController": lambda backup, waits: [
        RetryController(fallback_models=[backup], sleep=waits.sleep)
    ],
    "retryctl, model_breaker=None": lambda backup, waits: [
        RetryController(fallback_models=[backup], model_breaker=None, sleep=waits.sleep)
    ],
    "LangChain fallback only": lambda backup, waits: [ModelFallbackMiddleware(backup)],
    "LangChain fallback > retry": lambda backup, waits: [
        ModelFallbackMiddleware(backup),
        ModelRetryMiddleware(on_failure="error"),
    ],
    "LangChain retry > fallback": lambda backup, waits: [
        ModelRetryMiddleware(),
        ModelFallbackMiddleware(backup),
    ],
}


def run(name: str, primary: BaseChatModel, turns: int, waits: Waits) -> float:
    """``turns`` user messages through the agent of stack ``name``; the wall seconds they took."""
    agent = create_agent(
        primary, tools=[], middleware=STACKS[name](Backup(), waits), checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": name}}
    started = time.perf_counter()
    for i in range(turns):
        question: Any = {"messages": [("user", f"question {i}")]}
        out = agent.invoke(question, config)
        answer = str(out["messages"][-1].content)
        if answer != "the backup answers":
            raise SystemExit(f"{name}: turn {i} ended with {answer!r}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--no-wait", action="store_true", help="record the waits without sleeping")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    waits = Waits(dry=args.no_wait)
    # LangChain's retry and the openai client sleep through ``time.sleep`` of their modules: recorded.
    langchain_retry.time = SimpleNamespace(sleep=waits.sleep)  # type: ignore[assignment,attr-defined]
    openai_client.time = SimpleNamespace(sleep=waits.sleep)  # type: ignore[assignment,attr-defined]

    for status, kind in ((503, "transient"), (401, "terminal")):
        for name in STACKS:
            waits.asked.clear()
            primary = Primary(status=status)
            wall = run(name, primary, args.turns, waits)
            rows.append(_row(f"scripted {status} ({kind})", name, primary.calls, waits, wall))

    server = Unavailable()
    try:
        for name in (n for n in STACKS if n != "retryctl, model_breaker=None"):
            waits.asked.clear()
            before = server.requests
            model = ChatOpenAI(model="m", base_url=server.url, api_key=SecretStr("k"), timeout=5)
            wall = run(name, model, args.turns, waits)
            rows.append(_row("ChatOpenAI, server 503", name, server.requests - before, waits, wall))
    finally:
        server.close()

    if args.json:
        print(json.dumps({"turns": args.turns, "waits_slept": not args.no_wait, "rows": rows}))
        return
    slept = "recorded, not slept" if args.no_wait else "slept"
    print(f"{args.turns} turns, a dead primary and one fallback; waits {slept}")
    print(f"{'scenario':26} {'agent':30} {'primary calls':>13} {'waits':>6} {'wait s':>7} {'wall s':>7}")
    for r in rows:
        print(
            f"{r['scenario']:26} {r['agent']:30} {r['primary_calls']:>13} {r['waits']:>6} "
            f"{r['wait_s']:>7.2f} {r['wall_s']:>7.2f}"
        )
    print("(ChatOpenAI rows: primary calls are the HTTP requests the server received, client retries too)")


def _row(scenario: str, agent: str, calls: int, waits: Waits, wall: float) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "agent": agent,
        "primary_calls": calls,
        "waits": len(waits.asked),
        "wait_s": round(sum(waits.asked), 3),
        "wall_s": round(wall, 3),
    }


if __name__ == "__main__":
    main()
