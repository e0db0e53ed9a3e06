"""The public names of retryctl.tools are pinned."""

from __future__ import annotations

import retryctl.tools


class TestExports:
    def test_tools_exports(self):
        assert sorted(retryctl.tools.__all__) == [
            "CalculatorArgs", "CalculatorError", "CalculatorTool", "PythonArgs", "PythonRunReport",
            "PythonTool", "ToolRegistry", "build_test_harness", "calculate", "default_registry",
            "format_exact",
        ]  # fmt: skip
        for name in retryctl.tools.__all__:
            assert getattr(retryctl.tools, name) is not None
