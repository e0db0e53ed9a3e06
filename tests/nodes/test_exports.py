"""retryctl.testing hands users the very backend the models package defines (the names are pinned in
tests/test_public_api.py)."""

from __future__ import annotations

import retryctl.testing


class TestExports:
    def test_testing_reexports_the_models_scripted_backend(self) -> None:
        from retryctl.models import ScriptedBackend

        assert retryctl.testing.ScriptedBackend is ScriptedBackend
