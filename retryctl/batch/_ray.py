"""The batch on a Ray cluster: a pool of actors, each building the job once (``retryctl[ray]``).

Public shape::

    from retryctl.batch import GraphJob, RayExecutor, run_batch

    executor = RayExecutor(address="local", workers=None, max_in_flight=None, per_worker=4)
    await run_batch(GraphJob(spec=...), tasks, results, config=config, executor=executor, log=log)

    retryctl batch TASKS --out R --log L --ray                   # a cluster started for the run
    retryctl batch TASKS --out R --log L --ray 127.0.0.1:6379    # an existing one (or auto, ray://...)

``address`` is what ``ray.init`` takes: ``local`` starts a cluster on this machine for the run (bound to
127.0.0.1, no dashboard, no usage stats; stopped at the end), ``auto`` finds the one ``ray start`` made
here, ``HOST:PORT`` (or ``ray://HOST:PORT``) connects to one, after :mod:`~retryctl.batch._ray_probe`
found a Ray cluster answering there (``ray.init`` would retry for ever). ``workers`` actors (default:
the cluster's CPUs over ``worker_cpus``) are placed with Ray's ``SPREAD`` strategy; each builds the
job once (the graph, and with it the embedded model: one load per worker process) and runs up to
``per_worker`` tasks at once on its event loop. The driver keeps at most ``max_in_flight`` tasks out (default
``workers x per_worker``), each on the least-loaded actor.

Faults. An actor whose process dies is restarted by Ray (``max_restarts=-1``: it builds the job again)
and its unfinished calls are retried there (``max_task_retries=retries``); its captured records die with
it, so a retried task's records in the log are those of the try that finished. A call that still fails
(Ray gave up: the actor or its node is gone) is submitted again by the driver to another actor, up to
``retries`` times in all, then written as an error line (``--resume`` runs it again); the actor it
failed on gets no more tasks (measured: a node's raylet killed with ``kill -9`` mid-batch, 60 tasks
on two one-CPU nodes, every task written once, the rest finished on the surviving node). A task id is the
idempotency key (:func:`~retryctl.batch._executor.drive`): whatever comes back twice is written once.
An actor of a lost node restarts where there is room for its ``worker_cpus`` (``0``: anywhere, without
reserving a CPU); until then the others take its tasks.

Ray is imported here only, when a run starts (``import retryctl.batch`` never imports it).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping
from typing import Any

from retryctl._extras import require_extra
from retryctl.batch._executor import Done, Job
from retryctl.batch._files import Task
from retryctl.batch._ray_probe import probe_cluster
from retryctl.exceptions import ConfigError

__all__ = ["AUTO", "LOCAL", "RayExecutor", "check_address"]

LOCAL = "local"
"""The address that starts a cluster on this machine for the run (``ray.init(address="local")``)."""

AUTO = "auto"
"""The address of the cluster ``ray start`` made on this machine."""

_ADDRESS = re.compile(r"(?:ray://)?(?P<host>[^\s:/]+|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})")
"""``HOST:PORT`` or ``ray://HOST:PORT`` (an IPv6 host in brackets)."""


def check_address(address: str, *, field: str = "address") -> str:
    """``address`` if Ray can take it (``local``, ``auto``, ``HOST:PORT``, ``ray://HOST:PORT``); else a
    ``ConfigError`` naming ``field``, before anything connects (a word that is not an address, such as
    a task file taken for one, would otherwise reach ``ray.init``)."""
    value = address.strip() if isinstance(address, str) else address
    if value in (LOCAL, AUTO):
        return value
    match = _ADDRESS.fullmatch(value) if isinstance(value, str) else None
    if match is None or not 0 < int(match["port"]) < 65536:
        raise ConfigError(
            field=field, value=address, problem="give local, auto, HOST:PORT or ray://HOST:PORT"
        )
    return value


_LOCAL_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
"""For a cluster started for the run: no token written under ~/.ray, no usage report."""

_DRIVER_ENV = {"RAY_enable_output_error_log_if_still_retry": "0"}
"""For this process's Ray (the owner of the tasks), whatever the cluster: a call that fails and will be
retried is not announced. Ray prints "(raylet) Task _Worker.run failed. There are 3 retries remaining"
for each call out when its actor is killed, which the end of a run (Ctrl-C, a paused batch: the actors
are killed with calls still out) always does (measured: gone with this set, Ray 2.60); a call Ray gives
up on still comes back as an error and is written as one."""


class _Worker:
    """One actor: the job built once, its tasks run on the actor's event loop."""

    def __init__(self, job: Job) -> None:
        import ray

        from retryctl.audit._capture import CapturedLog

        self.job = job
        self.log = CapturedLog() if job.logs else None
        self.built = job.build(self.log)
        self.node = str(ray.get_runtime_context().get_node_id())[:8]
        self.pid = os.getpid()

    async def where(self) -> tuple[str, int]:
        """The node (first 8 characters of its id) and process the actor runs in."""
        return self.node, self.pid

    async def run(self, task: Task) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
        """One task: its line, its records, this node."""
        try:
            line = await self.job.run(self.built, task)
        except Exception as exc:
            line = self.job.failed(task, exc)
        records = self.log.take(task.id) if self.log is not None else []
        return line, records, self.node


def _positive(name: str, value: Any, *, kind: type = int, zero: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int | float if kind is float else int)
    if not ok or value < 0 or (value == 0 and not zero):
        what = "a number >= 0" if zero else f"a positive {kind.__name__}"
        raise ConfigError(field=name, value=value, problem=f"must be {what}")


class RayExecutor:
    """Runs a job's tasks on a Ray cluster's actors (see the module docstring)."""

    def __init__(
        self,
        *,
        address: str = LOCAL,
        workers: int | None = None,
        max_in_flight: int | None = None,
        per_worker: int = 4,
        worker_cpus: float = 1.0,
        retries: int = 3,
        num_cpus: int | None = None,
        runtime_env: Mapping[str, Any] | None = None,
    ) -> None:
        check_address(address)
        for name, value in (("workers", workers), ("max_in_flight", max_in_flight), ("num_cpus", num_cpus)):
            if value is not None:
                _positive(name, value)
        _positive("per_worker", per_worker)
        _positive("retries", retries)
        _positive("worker_cpus", worker_cpus, kind=float, zero=True)
        self.address = address.strip()
        """Where the cluster is (``local``: started for the run)."""
        self.workers = workers
        """Actors in the pool (``None``: the cluster's CPUs over ``worker_cpus``, set at start)."""
        self.per_worker = per_worker
        """Tasks one actor runs at once."""
        self.worker_cpus = worker_cpus
        """CPUs each actor reserves (what places one actor per CPU)."""
        self.retries = retries
        """Tries of a task whose actor died (Ray's retries, then the driver's resubmissions)."""
        self.num_cpus = num_cpus
        """CPUs of a cluster started for the run (``None``: Ray's count of this machine's)."""
        self.runtime_env = dict(runtime_env) if runtime_env is not None else None
        """Ray's runtime environment for the actors (``None``: this process's ``PYTHONPATH``, if set)."""
        self.max_in_flight = max_in_flight or 0
        """Tasks out at once (``None`` given: ``workers x per_worker``, set at start)."""
        self._given_in_flight = max_in_flight
        self._started_ray = False
        self._job: Job | None = None
        self._actors: list[Any] = []
        self._load: list[int] = []
        self._down: set[int] = set()
        self._out: dict[asyncio.Future[Any], tuple[Task, int]] = {}
        self._tries: dict[str, int] = {}

    # -- the executor protocol --------------------------------------------------------------------

    async def start(self, job: Job) -> None:
        """Connect to (or start) the cluster and bring the actors up, each building ``job`` once."""
        require_extra("ray", feature="--ray (retryctl.batch.RayExecutor)")
        import ray

        self._job = job
        if not ray.is_initialized():
            self._init(ray)
        cpus = float(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
        per_cpu = self.worker_cpus or 1.0  # 0 reserves nothing: still one actor per CPU
        workers = self.workers or max(1, int(cpus / per_cpu))
        self.workers = workers
        self.max_in_flight = self._given_in_flight or workers * self.per_worker
        actor = ray.remote(_Worker).options(
            max_restarts=-1,
            max_task_retries=self.retries,
            max_concurrency=self.per_worker,
            num_cpus=self.worker_cpus,
            scheduling_strategy="SPREAD",
            runtime_env=self._runtime_env(),
        )
        self._actors = [actor.remote(job) for _ in range(workers)]
        self._load = [0] * workers
        # Wait until every actor has built its job: a factory that fails, fails here, once.
        try:
            await asyncio.gather(*(asyncio.wrap_future(a.where.remote().future()) for a in self._actors))
        except Exception as exc:
            await self.close()
            first = next(iter(str(exc).strip().splitlines()[-1:]), type(exc).__name__)
            problem = f"a worker could not build it: {first}"
            raise ConfigError(
                field="job", value=getattr(job, "spec", type(job).__name__), problem=problem
            ) from exc

    def submit(self, task: Task) -> None:
        """Send ``task`` to the least-loaded actor not known to be down."""
        up = [i for i in range(len(self._actors)) if i not in self._down] or range(len(self._actors))
        index = min(up, key=self._load.__getitem__)
        self._load[index] += 1
        self._tries[task.id] = self._tries.get(task.id, 0) + 1
        ref = self._actors[index].run.remote(task)
        self._out[asyncio.wrap_future(ref.future())] = (task, index)

    async def next_done(self) -> Done:
        """The first task to come back; a call Ray gave up on is submitted again, up to ``retries``."""
        assert self._job is not None, "start() first"
        while True:
            finished, _ = await asyncio.wait(self._out, return_when=asyncio.FIRST_COMPLETED)
            future = finished.pop()
            task, index = self._out.pop(future)
            self._load[index] -= 1
            exc = future.exception()
            if exc is None:
                line, records, node = future.result()
                return Done(task_id=task.id, line=line, records=records, node=node)
            # Ray gave up on this actor (its node is gone, or it cannot restart): send it nothing more,
            # else its empty queue would draw every task to it. When all are down, try them all again.
            self._down.add(index)
            if len(self._down) == len(self._actors):
                self._down.clear()
            if self._tries[task.id] < self.retries:
                self.submit(task)
                continue
            return Done(task_id=task.id, line=self._job.failed(task, exc))

    async def release(self) -> None:
        """Stop the actors and keep the cluster: the next :meth:`start` (another job) reuses it."""
        for future in self._out:
            future.cancel()
        self._out.clear()
        self._down.clear()
        if not self._actors:
            return
        import ray

        for actor in self._actors:
            ray.kill(actor)
        self._actors = []

    async def close(self) -> None:
        """Stop the actors, and the cluster if it was started (or connected to) for the run."""
        await self.release()
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False

    # -- helpers ----------------------------------------------------------------------------------

    def _init(self, ray: Any) -> None:
        kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
        for key, value in _DRIVER_ENV.items():
            os.environ.setdefault(key, value)  # read by Ray's core worker when ray.init starts it
        if self.address == LOCAL:
            for key, value in _LOCAL_ENV.items():
                os.environ.setdefault(key, value)
            kwargs.update(include_dashboard=False, _node_ip_address="127.0.0.1", num_cpus=self.num_cpus)
        elif self.num_cpus is not None:
            raise ConfigError(
                field="num_cpus",
                value=self.num_cpus,
                problem="sets the CPUs of a cluster started for the run only",
            )
        probe_cluster(self.address, field="ray")  # ray.init retries an address nobody answers at for ever
        try:
            ray.init(address=self.address, **kwargs)
        except ConnectionError as exc:
            raise ConfigError(field="ray", value=self.address, problem=f"cannot connect: {exc}") from exc
        self._started_ray = True

    def _runtime_env(self) -> dict[str, Any] | None:
        if self.runtime_env is not None:
            return self.runtime_env
        path = os.environ.get("PYTHONPATH")
        # A checkout run with PYTHONPATH (as the tests are): the actors import the same retryctl.
        return {"env_vars": {"PYTHONPATH": path}} if path else None
