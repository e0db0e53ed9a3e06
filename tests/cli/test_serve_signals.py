"""``retryctl serve`` ends as the other commands do (issue 29, item 5): Ctrl-C finishes the requests in
progress, says so in one ``stopped:`` line and exits 130; SIGTERM drains the same way, says the same, and
ends by the signal, as a supervisor expects."""

from __future__ import annotations

import signal

from tests.gateway._support import serving
from tests.gateway.test_serve_process import one_in_progress, slow_upstream

__all__ = ["slow_upstream"]  # the fixture, used by name


class TestServeSignals:
    def test_ctrl_c_drains_says_stopped_and_exits_130(self, slow_upstream: str) -> None:
        with serving("--upstream", slow_upstream, "--upstream-model", "slow") as (url, proc):
            with one_in_progress(url, "slow") as answers:
                proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 130
            err = proc.stderr.read()
        assert [a.status_code for a in answers] == [200]  # the request in progress was finished
        lines = [line for line in err.splitlines() if not line.startswith("retryctl gateway:")]
        assert lines == ["stopped: Ctrl-C; new connections refused, requests in progress finished"]

    def test_sigterm_drains_says_stopped_and_ends_by_the_signal(self, slow_upstream: str) -> None:
        with serving("--upstream", slow_upstream, "--upstream-model", "slow") as (url, proc):
            with one_in_progress(url, "slow") as answers:
                proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == -signal.SIGTERM
            err = proc.stderr.read()
        assert [a.status_code for a in answers] == [200]
        assert "stopped: SIGTERM; new connections refused, requests in progress finished" in err
        assert "Traceback" not in err
