import subprocess
import sys


class TestControllerPurity:
    def test_importing_the_controller_loads_no_langgraph_or_openai(self):
        code = (
            "import sys, retryctl.controller, retryctl.controller.stopping;"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'langgraph', 'langchain_core', 'openai', 'llama_cpp'});"
            "print(','.join(bad))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == ""
