"""`retryctl serve` against a fixed-latency upstream: throughput and latency beside calling the upstream
directly, at concurrency 1, 16 and 64; then what an adaptive request costs in samples.

    .venv/bin/python bench/gateway_throughput.py [--latency 0.2] [--concurrency 1 16 64] [--waves 10]
                                                 [--rounds 6] [--adaptive 64] [--max-samples 8]
                                                 [--profile PATH] [--quick] [--json]

Three processes on 127.0.0.1: the upstream (``bench/_latency_server.py``, every completion answered after
exactly ``--latency`` seconds), the gateway (``python -m retryctl.cli serve --upstream ... --upstream-model
latency --log ...``, one uvicorn worker, ``--max-concurrency`` twice the bench's), and this client, which
sends the same chat body to both. Per concurrency level C: C keep-alive connections to each (opened and
used once before the first round), then ``--rounds`` rounds, direct and via the gateway by turns (D G G D
D G: a load that comes and goes on the shared cores falls on both alike). In a round each connection sends
``--waves`` requests back to back; the connections start ``latency / C`` apart, as independent clients
would be, not in one burst: with a fixed latency a burst never spreads out, and every wave would queue
C requests at the gateway at the same instant, a lock-step no real load keeps. Requests per second are
each connection's requests over its own run, summed. Per level it prints requests/s direct and via the
gateway, their ratio, the p50 and p90 latency of each, the added p50 (gateway minus direct), and the
gateway's CPU per request (``/proc`` ticks of 10 ms: meaningful over hundreds of requests, not the 30 of
concurrency 1, where the gateway's idle upkeep shows too). Targets: via the gateway >= 95 % of the direct
throughput at concurrency 64; added p50 <= 2 ms (judged at every level).

Adaptive: ``--adaptive N`` requests with ``"adaptive": true, "retryctl": {"max_samples": M}`` (at
concurrency 16, or the highest level below it). The upstream's answers are all the same, so the default
stopping rule stops early: the figure is samples per request, read from each response's
``retryctl.samples_used`` and cross-checked against the choices the upstream counted (``GET /stats``),
printed beside the M samples per question of calling the upstream with self-consistency SC-M; then the
adaptive requests' p50 latency beside the upstream time of their sequential calls (calls x latency), the
difference being what the gateway adds, and the decision records each request wrote (verdicts and
summaries in the log, matched by ``run_id``).

The client is raw asyncio streams (HTTP/1.1, Content-Length or chunked bodies), not httpx: the three
processes share two cores, and a client's CPU is CPU the gateway under test does not get. Measured here at
concurrency 16, an ``httpx.AsyncClient`` spent 1.7 ms of CPU per request, more than the gateway itself;
this client spends 36 µs (prebuilt request bytes, one write and one read per request).

Headline latency 0.2 s: a short completion at the fast end of real ones (0.2-0.5 s to a first token), so
64 connections make 320 requests/s through one worker, stricter than the 1 s a typical completion takes.
``--profile PATH`` runs the gateway under cProfile while the timed rounds run and writes the stats to PATH
on shutdown (``python -m pstats PATH``). Figures move with the machine's load: the 1-minute load average is
printed beside them. Timing is never asserted; a missed target is printed as NOT met.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGET_RATIO = 0.95
TARGET_AT = 64
TARGET_ADDED_P50_MS = 2.0
MODEL = "latency"
SERVER = Path(__file__).with_name("_latency_server.py")
ROOT = Path(__file__).resolve().parent.parent
ORDER = "DGGD"
"""One cycle of rounds (direct, gateway, gateway, direct): repeated, each side gets as many early and
late rounds as the other."""

BODY = {
    "model": MODEL,
    "messages": [
        {"role": "system", "content": "You are a careful assistant. Answer with 'The answer is N.'"},
        {"role": "user", "content": "What is 6 times 7?"},
    ],
    "temperature": 0.7,
    "max_tokens": 32,
}


# The gateway under cProfile, profiling only while the timed rounds run (SIGUSR1 on, SIGUSR2 off), so
# its start-up imports are not in the figures. Not ``python -m cProfile``: uvicorn, once it has finished
# its requests on SIGTERM, raises the signal again under the handler it found, which would kill the
# process before cProfile writes; the handler found is this one, which writes the stats and exits.
_PROFILED = """
import cProfile, signal, sys
out = sys.argv[1]
profile = cProfile.Profile()
def done(*_):
    profile.disable()
    profile.dump_stats(out)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
signal.signal(signal.SIGUSR2, lambda *_: profile.disable())
sys.argv = ["retryctl", *sys.argv[2:]]
from retryctl.cli import main
main()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get_json(url: str, *, data: bytes | None = None) -> dict[str, Any]:
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(request, timeout=5) as reply:
        found: dict[str, Any] = json.loads(reply.read() or b"{}")
    return found


class Upstream:
    """The latency server in a child process."""

    def __init__(self, latency_s: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--latency", str(latency_s)], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.proc.kill()
            raise RuntimeError(f"latency server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, Any]:
        return get_json(f"{self.base_url}/stats")

    def reset(self) -> None:
        get_json(f"{self.base_url}/stats/reset", data=b"")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class Gateway:
    """``retryctl serve`` in a child process, writing its decision records to ``log`` (under cProfile
    with ``profile``)."""

    def __init__(self, upstream: Upstream, max_concurrency: int, log: Path, profile: Path | None) -> None:
        self.port = free_port()
        self.log = log
        self.profiled = profile is not None
        serve = ["serve", "--upstream", upstream.base_url, "--upstream-model", MODEL, "--log", str(log)]
        serve += ["--port", str(self.port), "--max-concurrency", str(max_concurrency)]
        argv = [sys.executable, "-m", "retryctl.cli", *serve]
        if profile is not None:
            argv = [sys.executable, "-c", _PROFILED, str(profile), *serve]
        # Its stderr goes to a file, not a pipe nobody reads while it runs (a full pipe would block it).
        self.stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by stop())
        self.proc = subprocess.Popen(argv, cwd=ROOT, stderr=self.stderr, text=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                get_json(f"http://127.0.0.1:{self.port}/health")
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    self.proc.wait()
                    raise RuntimeError(f"the gateway did not start: {self.errors()[-500:]}") from None
                time.sleep(0.1)

    def cpu_s(self) -> float:
        """User + system CPU the gateway process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def profiling(self, on: bool) -> None:
        """Start or stop the gateway's profiler (when it runs under one)."""
        if self.profiled:
            self.proc.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().strip()

    def stop(self) -> None:
        self.proc.terminate()  # uvicorn finishes what is in flight, then exits (cProfile writes its file)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


def request_bytes(port: int, body: dict[str, Any]) -> bytes:
    raw = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
    )
    return head.encode() + raw


class Conn:
    """One keep-alive HTTP/1.1 connection: write a prebuilt request, read the status and body."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        return cls(reader, writer)

    async def call(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, chunked = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if not chunked:
            return status, await self.reader.readexactly(length)
        parts = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            parts.append(await self.reader.readexactly(size + 2))
            if size == 0:
                return status, b"".join(p[:-2] for p in parts)

    def close(self) -> None:
        self.writer.close()


@dataclass
class Round:
    side: str
    requests: int
    rps: float
    latencies_ms: list[float]
    failures: int
    gateway_cpu_s: float = 0.0


async def run_round(
    conns: list[Conn], request: bytes, each: int, side: str, *, spread_s: float = 0.0
) -> tuple[Round, list[bytes]]:
    """``each`` requests back to back on every connection, the connections starting ``spread_s /
    len(conns)`` apart; the requests per second (each connection's rate over its own run, summed), the
    latencies and the bodies."""
    latencies: list[float] = []
    bodies: list[bytes] = []
    rates: list[float] = []
    failures = 0

    async def client(conn: Conn, offset_s: float) -> None:
        nonlocal failures
        await asyncio.sleep(offset_s)
        first = time.perf_counter()
        for _ in range(each):
            began = time.perf_counter()
            status, body = await conn.call(request)
            latencies.append((time.perf_counter() - began) * 1000.0)
            bodies.append(body)
            failures += status != 200
        rates.append(each / (time.perf_counter() - first))

    step = spread_s / len(conns)
    await asyncio.gather(*(client(c, i * step) for i, c in enumerate(conns)))
    return Round(side, each * len(conns), sum(rates), latencies, failures), bodies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure_level(
    upstream: Upstream, gateway: Gateway, concurrency: int, waves: int, rounds: int, latency_s: float
) -> dict[str, Any]:
    ports = {"D": upstream.port, "G": gateway.port}
    conns = {s: [await Conn.open(p) for _ in range(concurrency)] for s, p in ports.items()}
    requests = {s: request_bytes(p, BODY) for s, p in ports.items()}
    try:
        for side in "DG":  # warm-up, untimed: every connection (and the gateway's upstream pool) in use
            await run_round(conns[side], requests[side], 1, side)
        done: list[Round] = []
        load_before = os.getloadavg()[0]
        gateway.profiling(True)
        for i in range(rounds):
            side = ORDER[i % len(ORDER)]
            cpu0 = gateway.cpu_s()
            r, _ = await run_round(conns[side], requests[side], waves, side, spread_s=latency_s)
            r.gateway_cpu_s = gateway.cpu_s() - cpu0
            done.append(r)
        gateway.profiling(False)
    finally:
        for held in conns.values():
            for c in held:
                c.close()
    out: dict[str, Any] = {"concurrency": concurrency, "load_1m_before": load_before}
    for side, key in (("D", "direct"), ("G", "gateway")):
        mine = [r for r in done if r.side == side]
        lat = [x for r in mine for x in r.latencies_ms]
        n = sum(r.requests for r in mine)
        out[key] = {
            "requests": n,
            "rps": statistics.mean(r.rps for r in mine),
            "p50_ms": statistics.median(lat),
            "p90_ms": pct(lat, 0.9),
            "failures": sum(r.failures for r in mine),
            "gateway_cpu_ms_per_request": 1000.0 * sum(r.gateway_cpu_s for r in mine) / n,
        }
    out["ratio"] = out["gateway"]["rps"] / out["direct"]["rps"]
    out["added_p50_ms"] = out["gateway"]["p50_ms"] - out["direct"]["p50_ms"]
    out["load_1m"] = os.getloadavg()[0]
    return out


async def measure_adaptive(
    upstream: Upstream, gateway: Gateway, concurrency: int, requests: int, max_samples: int, latency_s: float
) -> dict[str, Any]:
    body = {**BODY, "adaptive": True, "retryctl": {"max_samples": max_samples}}
    request = request_bytes(gateway.port, body)
    conns = [await Conn.open(gateway.port) for _ in range(concurrency)]
    each = max(1, -(-requests // concurrency))  # per connection, rounded up
    try:
        await run_round(conns, request, 1, "A")  # warm-up, untimed
        upstream.reset()
        gateway.profiling(True)
        r, bodies = await run_round(conns, request, each, "A", spread_s=latency_s)
        gateway.profiling(False)
    finally:
        for c in conns:
            c.close()
    stats = upstream.stats()
    requests = r.requests
    blocks = [json.loads(b).get("retryctl", {}) for b in bodies]
    runs = {b.get("run_id") for b in blocks}
    kinds: dict[str, int] = {}
    for line in gateway.log.read_text().splitlines():
        record = json.loads(line)
        if record.get("run_id") in runs:
            kinds[record["kind"]] = kinds.get(record["kind"], 0) + 1
    used = [int(b.get("samples_used", 0)) for b in blocks]
    calls = stats["requests"] / requests
    p50 = statistics.median(r.latencies_ms)
    return {
        "concurrency": concurrency,
        "requests": requests,
        "max_samples": max_samples,
        "failures": r.failures,
        "samples_per_request": sum(used) / requests,
        "samples_min": min(used),
        "samples_max": max(used),
        "upstream_choices_per_request": stats["choices"] / requests,
        "upstream_calls_per_request": calls,
        "sc_samples_per_request": max_samples,
        "fraction_of_sc": sum(used) / requests / max_samples,
        "rps": r.rps,
        "p50_ms": p50,
        "upstream_ms_per_request": calls * latency_s * 1000.0,
        "added_p50_ms": p50 - calls * latency_s * 1000.0,
        "accepted": sum(b.get("verdict") == "accept" for b in blocks),
        "verdicts_per_request": kinds.get("verdict", 0) / requests,
        "summaries_per_request": kinds.get("summary", 0) / requests,
    }


def describe(level: dict[str, Any]) -> str:
    d, g, c = level["direct"], level["gateway"], level["concurrency"]
    ratio = ""
    if c == TARGET_AT:
        ratio = f" (target >= {TARGET_RATIO:.0%}: {'met' if level['ratio'] >= TARGET_RATIO else 'NOT met'})"
    added_met = "met" if level["added_p50_ms"] <= TARGET_ADDED_P50_MS else "NOT met"
    failures = f"; FAILED requests: direct {d['failures']}, gateway {g['failures']}" * bool(
        d["failures"] or g["failures"]
    )
    return (
        f"concurrency {c:>3}: direct {d['rps']:7.1f} req/s, gateway {g['rps']:7.1f} req/s -> "
        f"{level['ratio']:6.1%}{ratio}; p50 {d['p50_ms']:.2f} / {g['p50_ms']:.2f} ms, "
        f"p90 {d['p90_ms']:.2f} / {g['p90_ms']:.2f} ms (direct / gateway); added p50 "
        f"{level['added_p50_ms']:+.2f} ms (target <= {TARGET_ADDED_P50_MS:g} ms: {added_met}); gateway CPU "
        f"{g['gateway_cpu_ms_per_request']:.2f} ms/request; {d['requests']}+{g['requests']} requests, "
        f"load {level['load_1m_before']:.2f} -> {level['load_1m']:.2f}{failures}"
    )


def describe_adaptive(a: dict[str, Any]) -> str:
    sc = a["sc_samples_per_request"]
    return (
        f"adaptive (max_samples {a['max_samples']}, concurrency {a['concurrency']}, {a['requests']} "
        f"requests, {a['accepted']} accepted, {a['failures']} failed): {a['samples_per_request']:.2f} "
        f"samples/request (min {a['samples_min']}, max {a['samples_max']}; the upstream served "
        f"{a['upstream_choices_per_request']:.2f} choices in {a['upstream_calls_per_request']:.2f} calls "
        f"per request) vs direct SC-{sc}: {sc} samples/question -> {a['fraction_of_sc']:.1%} of its "
        f"samples; {a['rps']:.1f} req/s, p50 {a['p50_ms']:.1f} ms vs {a['upstream_ms_per_request']:.1f} ms "
        f"of upstream calls ({a['added_p50_ms']:+.2f} ms added); decision records per request: "
        f"{a['verdicts_per_request']:.2f} verdicts, {a['summaries_per_request']:.2f} summaries"
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    upstream = Upstream(args.latency)
    tmp = tempfile.TemporaryDirectory()
    try:
        top = max([*args.concurrency, args.adaptive_concurrency])
        log = Path(tmp.name) / "decisions.jsonl"
        gateway = Gateway(upstream, max_concurrency=2 * top, log=log, profile=args.profile)
        try:
            levels = [
                await measure_level(upstream, gateway, c, args.waves, args.rounds, args.latency)
                for c in args.concurrency
            ]
            adaptive = await measure_adaptive(
                upstream, gateway, args.adaptive_concurrency, args.adaptive, args.max_samples, args.latency
            )
        finally:
            gateway.stop()
    finally:
        upstream.stop()
        tmp.cleanup()
    return {"levels": levels, "adaptive": adaptive}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per upstream completion")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--waves", type=int, default=10, help="requests per round = concurrency x waves")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per level, direct and gateway by turns")
    parser.add_argument("--adaptive", type=int, default=64, help="adaptive requests")
    parser.add_argument("--max-samples", type=int, default=8, help="the adaptive requests' max_samples")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the gateway into this file")
    parser.add_argument("--quick", action="store_true", help="short latency, few requests: check it runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    args = parser.parse_args()
    if args.quick:
        args.latency, args.waves, args.rounds, args.adaptive = 0.02, 2, 2, 8
    args.adaptive_concurrency = max([c for c in args.concurrency if c <= 16] or [min(args.concurrency)])
    load = os.getloadavg()
    result = asyncio.run(run(args))
    levels, adaptive = result["levels"], result["adaptive"]
    print(
        f"upstream latency {args.latency * 1000:.0f} ms; {args.rounds} rounds of concurrency x {args.waves} "
        f"requests per level; {os.cpu_count()} cores, load average {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}"
    )
    for level in levels:
        print(describe(level))
    print(describe_adaptive(adaptive))
    top = next((lv for lv in levels if lv["concurrency"] == TARGET_AT), levels[-1])
    ratio_met = top["ratio"] >= TARGET_RATIO
    added_met = all(lv["added_p50_ms"] <= TARGET_ADDED_P50_MS for lv in levels)
    print(
        f"headline: {top['ratio']:.1%} of direct throughput at concurrency {top['concurrency']} "
        f"({'met' if ratio_met else 'NOT met'}); added p50 at most "
        f"{max(lv['added_p50_ms'] for lv in levels):+.2f} ms ({'met' if added_met else 'NOT met'})"
    )
    if args.json:
        data = {
            "latency_s": args.latency,
            "levels": levels,
            "adaptive": adaptive,
            "ratio_met": ratio_met,
            "added_p50_met": added_met,
            "target_met": ratio_met and added_met,
        }
        print(json.dumps(data))


if __name__ == "__main__":
    main()
