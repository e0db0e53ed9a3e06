from __future__ import annotations

import asyncio
import threading

import pytest

import retryctl.models as models
from retryctl.exceptions import ConfigError, RuntimeFailure
from retryctl.models import (
    BackendError,
    MalformedResponse,
    ModelBackend,
    ScriptedBackend,
    TerminalBackendError,
    TransientBackendError,
)
from retryctl.models._base import LoopThread


class TestModelBackend:
    def test_built_in_backends_satisfy_the_protocol(self):
        assert isinstance(ScriptedBackend(["x"]), ModelBackend)

    def test_k_must_be_a_positive_int(self):
        backend = ScriptedBackend(["x"])
        for bad in (0, -1, True, 1.5):
            with pytest.raises(ConfigError, match="k="):
                backend.sample_sync([{"role": "user", "content": "q"}], k=bad)  # type: ignore[arg-type]

    def test_sync_twin_works_inside_a_running_loop(self):
        backend = ScriptedBackend(["x"])

        async def caller() -> str:
            # A notebook-style caller: sync call while a loop runs in this thread.
            return backend.sample_sync([{"role": "user", "content": "q"}])[0].text

        assert asyncio.run(caller()) == "x"
        backend.close()


class TestLoopThread:
    def test_runs_coroutines_on_one_other_thread_and_restarts_after_close(self):
        runner = LoopThread()

        async def where() -> int:
            return threading.get_ident()

        first, second = runner.run(where()), runner.run(where())
        assert first == second != threading.get_ident()
        runner.close()
        assert runner.run(where()) != threading.get_ident()
        runner.close()

    def test_errors_propagate(self):
        runner = LoopThread()

        async def boom() -> None:
            raise KeyError("x")

        with pytest.raises(KeyError):
            runner.run(boom())
        runner.close()


class TestBackendErrors:
    def test_kinds_and_fields(self):
        t = TransientBackendError("x", backend="b", status_code=429, retry_after_s=2.0)
        assert t.error_class == "transient" and t.retryable and t.status_code == 429
        assert "retry_after=2s" in str(t) and isinstance(t, RuntimeFailure)
        m = MalformedResponse("x", backend="b", body="y" * 900)
        assert m.error_class == "validation" and not m.retryable and len(m.body) == 500
        assert TerminalBackendError("x", backend="b").error_class == "terminal"
        assert issubclass(models.BackendTimeout, TransientBackendError)
        assert issubclass(models.ReplayExhausted, TerminalBackendError)
        assert issubclass(models.BackendUnavailable, BackendError)

        assert all(hasattr(models, name) for name in models.__all__)

    def test_importing_does_not_load_the_local_extra(self):
        import subprocess
        import sys

        code = "import sys, retryctl.models; print('llama_cpp' in sys.modules, 'numpy' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["False", "False"]


class TestSampleBlocking:
    def test_uses_the_sync_twin_when_there_is_one(self):
        from retryctl.models import ScriptedBackend, sample_blocking

        backend = ScriptedBackend(["a", "b"])
        assert [c.text for c in sample_blocking(backend, [{"role": "user", "content": "q"}], k=2)] == [
            "a",
            "b",
        ]

    def test_drives_an_async_only_backend_without_a_running_loop(self):
        from retryctl.models import Candidate, sample_blocking

        class AsyncOnly:
            name = "async-only"

            async def sample(self, messages, params=None, *, k=1):
                return [Candidate(text=f"t{i}", model=self.name) for i in range(k)]

        assert [c.text for c in sample_blocking(AsyncOnly(), [{"role": "user", "content": "q"}], k=3)] == [
            "t0",
            "t1",
            "t2",
        ]
