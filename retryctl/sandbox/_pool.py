"""``Sandbox``: a warm pool of workers, each forking one confined child per job."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from types import TracebackType

from retryctl.exceptions import ConfigError
from retryctl.sandbox._errors import SandboxError
from retryctl.sandbox._job import (
    FilesArg,
    check_code,
    check_files,
    check_files_fit,
    job_limits,
    make_result,
)
from retryctl.sandbox._probe import probe_tiers
from retryctl.sandbox._result import ExecResult, SandboxLimits, Tier
from retryctl.sandbox._run import resolve_tier
from retryctl.sandbox._worker import WorkerProcess

__all__ = ["Sandbox"]

_POLL_S = 0.5


class Sandbox:
    """A context manager holding ``workers`` pre-started sandboxed workers.

    Each job runs in a process set up by a worker ahead of the job, from a state that holds no job's
    data: pid 2 of a pid namespace of its own, on a tmpfs of its own, confined on its own (rlimits,
    a Landlock domain over its work dir, seccomp), and everything it started dies with it (see
    ``_inside_worker``). A worker is replaced after a crash, after a job that timed out and after
    ``max_jobs_per_worker`` jobs. ``run`` is thread-safe; with one worker, calls queue up.

    ``tier``, ``unsafe`` and ``limits`` mean what they mean for :func:`run_code`; ``limits.disk_mb``,
    ``max_files`` and ``max_file_mb`` size each job's tmpfs and each worker's output files, so they
    are fixed for the pool's life.
    """

    def __init__(
        self,
        *,
        tier: Tier | str | None = None,
        unsafe: bool = False,
        workers: int = 1,
        max_jobs_per_worker: int = 200,
        limits: SandboxLimits | None = None,
    ) -> None:
        if not isinstance(workers, int) or not 1 <= workers <= 64:
            raise ConfigError(field="workers", value=workers, problem="must be an int in [1, 64]")
        if not isinstance(max_jobs_per_worker, int) or max_jobs_per_worker < 1:
            raise ConfigError(
                field="max_jobs_per_worker", value=max_jobs_per_worker, problem="must be an int >= 1"
            )
        self.tier = resolve_tier(tier, unsafe=unsafe)
        """The tier every job of this pool runs in."""
        self.limits = limits or SandboxLimits()
        """The default limits (per-call ``timeout_s`` and ``memory_mb`` override theirs)."""
        self.workers = workers
        self.max_jobs_per_worker = max_jobs_per_worker
        self.restarts = 0
        """How many workers were replaced (crash, timeout or job count)."""
        self._idle: queue.Queue[WorkerProcess] = queue.Queue()
        self._all: list[WorkerProcess] = []
        self._lock = threading.Lock()
        self._closed = True

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _spawn(self, *, start: bool = True) -> WorkerProcess:
        worker = WorkerProcess(self.tier, self.limits, probe_tiers().landlock_abi)
        with self._lock:
            self._all.append(worker)
        if start:
            worker.start()
        return worker

    def start(self) -> None:
        """Start the workers (``__enter__`` does it); a no-op when already started."""
        if not self._closed:
            return
        self._closed = False
        try:
            for _ in range(self.workers):
                self._idle.put(self._spawn())
        except BaseException:
            self.close()
            raise

    def run(
        self, code: str, *, timeout_s: float = 10.0, memory_mb: int = 512, files: FilesArg = None
    ) -> ExecResult:
        """Run ``code`` in a warm worker; same arguments and result as :func:`run_code`."""
        code = check_code(code)
        checked = check_files(files)
        lim = job_limits(self.limits, timeout_s=timeout_s, memory_mb=memory_mb)
        check_files_fit(checked, lim)
        if self._closed:
            raise SandboxError(tier=self.tier.value, problem="the Sandbox is not started (use `with`)")
        started = time.perf_counter()
        worker = self._take()
        fields = None
        try:
            if not worker.alive:  # it crashed while idle, or its restart failed: start it now
                self.restarts += 1
                worker.start()
            fields = worker.run(code, checked, lim)
        finally:
            self._release(worker, healthy=fields is not None and fields["killed_by"] is None)
        return make_result(
            tier=self.tier, limits=lim, duration_ms=(time.perf_counter() - started) * 1000, **fields
        )

    async def arun(
        self, code: str, *, timeout_s: float = 10.0, memory_mb: int = 512, files: FilesArg = None
    ) -> ExecResult:
        """:meth:`run` in a thread, for async callers."""
        return await asyncio.to_thread(self.run, code, timeout_s=timeout_s, memory_mb=memory_mb, files=files)

    def _take(self) -> WorkerProcess:
        """An idle worker; waits for one, but not past :meth:`close`."""
        while True:
            try:
                return self._idle.get(timeout=_POLL_S)
            except queue.Empty:
                if self._closed:
                    raise SandboxError(tier=self.tier.value, problem="the Sandbox was closed") from None

    def _release(self, worker: WorkerProcess, *, healthy: bool) -> None:
        if healthy and worker.alive and worker.jobs < self.max_jobs_per_worker:
            self._idle.put(worker)
            return
        worker.close()
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)
        if self._closed:
            return
        self.restarts += 1
        fresh = self._spawn(start=False)
        try:
            fresh.start()
        except SandboxError:  # the job's result stands; the next run starts this worker again
            pass
        finally:
            self._idle.put(fresh)

    def close(self) -> None:
        """Stop every worker. Jobs running in other threads fail with :class:`SandboxError`."""
        self._closed = True
        with self._lock:
            workers, self._all = list(self._all), []
        for worker in workers:
            worker.close()
        while not self._idle.empty():
            self._idle.get_nowait()
