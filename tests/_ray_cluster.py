"""A real Ray cluster of several nodes on this machine, started with ``ray start`` and stopped by its owner.

    cluster = RayCluster(nodes=2)        # a head and a second node, --num-cpus 1 each
    cluster.start()
    ... retryctl batch TASKS --ray cluster.address ...
    cluster.kill_workers(1)              # the second node's worker processes, SIGKILL
    cluster.kill_node(1)                 # every process of the second node, SIGKILL
    cluster.stop()                       # every process it started, and nothing else

Each node is one ``ray start`` (``--head`` for the first, ``--address`` for the others) with
``--node-ip-address 127.0.0.1``, its own ``--temp-dir`` under a private directory in /tmp (short:
Ray's unix sockets live under it, and a socket path has a 107-byte limit), free ports where Ray's
defaults are fixed ones another cluster on the machine may hold (the head's port, its client server's
10001, each node's agent's 52365), no dashboard, no usage stats, and ``RAY_AUTH_MODE=disabled`` (else
Ray writes a token under ~/.ray). On Linux Ray turns ``127.0.0.1`` into the address this machine
reaches others from (``ray._private.services.resolve_ip_for_localhost``): the nodes register under
that address of this machine's own, and nothing leaves it.

Why not ``ray stop``: it stops every Ray process on the machine, other clusters' too. Instead each
``ray start`` runs in a new session (``setsid``), and Ray does not start new sessions for what it
spawns: the node's GCS, raylet, agents and every worker the raylet forks later carry the session id
of the ``ray start`` that made them, long after it exited. :meth:`RayCluster.stop` signals exactly the
processes of those sessions (SIGTERM, then SIGKILL after a grace period), and :meth:`leftovers` says
whether any survived. Processes are read from /proc: Linux only (as the tests' CI is).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NodeProcess", "RayCluster", "free_port"]

_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")
"""Per-node helper processes whose titles start like a worker's."""
START_TIMEOUT_S = 180.0
"""A node's ``ray start`` on two busy cores takes 6-10 s; this only bounds a hung one."""


_RAY_CLI = (sys.executable, "-c", "import sys, ray.scripts.scripts as s; sys.argv[0] = 'ray'; s.main()")
"""The ``ray`` command of this interpreter's Ray (its console script's entry point), wherever that is."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (another process may take it before Ray binds it: rare)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class NodeProcess:
    """One live process of a node."""

    pid: int
    """Its process id."""
    argv: list[str]
    """Its command line (a Ray worker's is its title: ``ray::IDLE``, ``ray::_Worker.run``)."""

    @property
    def is_worker(self) -> bool:
        """A worker the raylet forked (idle, or an actor or task running), not the node's own services."""
        first = self.argv[0] if self.argv else ""
        if first.startswith(_AGENTS):
            return False
        return first.startswith("ray::") or any(arg.endswith("default_worker.py") for arg in self.argv)


def _session_processes(sessions: set[int]) -> list[NodeProcess]:
    """The live (not zombie) processes whose session id is one of ``sessions``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue  # it ended while we looked
        # The command name in parentheses may hold spaces: the fields after the last ')' are fixed.
        fields = stat[stat.rindex(")") + 2 :].split()
        state, session = fields[0], int(fields[3])
        if session in sessions and state != "Z":
            found.append(NodeProcess(int(entry), [a for a in raw.decode(errors="replace").split("\0") if a]))
    return found


class RayCluster:
    """``nodes`` Ray nodes on this machine, ``cpus`` CPUs each (see the module docstring)."""

    def __init__(self, *, nodes: int = 2, cpus: int = 1, grace_s: float = 10.0) -> None:
        self.nodes = nodes
        """Nodes to start: the head and ``nodes - 1`` more."""
        self.cpus = cpus
        """CPUs each node offers Ray."""
        self.grace_s = grace_s
        """Seconds between SIGTERM and SIGKILL on :meth:`stop`."""
        self.root = Path(tempfile.mkdtemp(prefix="rc.", dir="/tmp"))
        """The private directory of every node's ``--temp-dir`` and ``ray start`` output."""
        self.port = free_port()
        """The head's GCS port."""
        self.address = f"127.0.0.1:{self.port}"
        """What ``ray.init`` and ``retryctl --ray`` take."""
        self.sessions: list[int] = []
        """The session id of each node's processes, head first."""
        self.node_ids: list[str] = []
        """Each node's Ray node id (hex), head first."""
        self.env = {
            **os.environ,
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        """The environment of the nodes, and the one a driver should run with."""

    def start(self) -> None:
        """Start every node; on a failure stop what started and raise with the ``ray start`` output."""
        try:
            for index in range(self.nodes):
                self._start_node(index)
        except BaseException:
            self.stop()
            raise

    def _start_node(self, index: int) -> None:
        temp = self.root / f"n{index}"
        temp.mkdir()
        common = [
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.cpus}",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
            f"--dashboard-agent-listen-port={free_port()}",
        ]
        if index == 0:
            role = [
                "--head",
                f"--port={self.port}",
                f"--ray-client-server-port={free_port()}",
                "--include-dashboard=false",
            ]
        else:
            role = [f"--address={self.address}"]
        output = self.root / f"start-{index}.log"
        with output.open("w") as out:
            # A new session: the node's processes keep its id, which is how stop() finds them.
            proc = subprocess.Popen(
                [*_RAY_CLI, "start", *role, *common],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.sessions.append(proc.pid)
        try:
            code = proc.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = None
        if code != 0:
            raise RuntimeError(f"ray start (node {index}) ended with {code}:\n{output.read_text()[-3000:]}")
        self.node_ids.append(self._node_id(index))

    def _node_id(self, index: int) -> str:
        for proc in self.processes(index):
            for arg in proc.argv:
                if arg.startswith("--node_id="):  # the raylet's
                    return arg.split("=", 1)[1]
        raise RuntimeError(f"node {index}: no raylet after ray start")

    def processes(self, index: int | None = None) -> list[NodeProcess]:
        """The live processes of node ``index`` (``None``: of every node)."""
        sessions = set(self.sessions) if index is None else {self.sessions[index]}
        return _session_processes(sessions)

    def worker_pids(self, index: int) -> list[int]:
        """The pids of node ``index``'s worker processes (its actors' and idle workers')."""
        return [p.pid for p in self.processes(index) if p.is_worker]

    def kill_workers(self, index: int) -> list[NodeProcess]:
        """SIGKILL node ``index``'s worker processes, as a crash would; the node's raylet lives on."""
        killed = [p for p in self.processes(index) if p.is_worker]
        for proc in killed:
            with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
                os.kill(proc.pid, signal.SIGKILL)
        return killed

    def kill_node(self, index: int) -> list[NodeProcess]:
        """SIGKILL every process of node ``index`` (raylet, agents, workers), as a lost machine; not the
        head's (``index`` 0: the cluster's GCS lives there)."""
        if index == 0:
            raise ValueError("the head holds the cluster's GCS: killing it ends the cluster")
        killed = self.processes(index)
        for proc in killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        return killed

    def leftovers(self) -> list[NodeProcess]:
        """Processes of this cluster still alive (none after :meth:`stop`)."""
        return self.processes() if self.sessions else []

    def stop(self) -> None:
        """End every process of every node: SIGTERM, SIGKILL after ``grace_s``; then remove the directory.

        Only this cluster's sessions are signalled: other clusters on the machine live on."""
        for sig, wait_s in ((signal.SIGTERM, self.grace_s), (signal.SIGKILL, 5.0)):
            alive = self.leftovers()
            for proc in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, sig)
            deadline = time.monotonic() + wait_s
            while self.leftovers() and time.monotonic() < deadline:
                time.sleep(0.1)
        if not self.leftovers():
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, chars: int = 4000) -> str:
        """The end of every node's raylet and GCS logs: what to print when a test fails."""
        parts = []
        for path in sorted(self.root.glob("n*/session_latest/logs/*")):
            if path.name in ("raylet.out", "gcs_server.out", "raylet.err") and path.is_file():
                parts.append(f"== {path}\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)
