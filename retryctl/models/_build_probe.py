"""The child of :func:`retryctl.models._build_check.check_embedded_build`: load, decode, exit 0.

Run as ``python -m retryctl.models._build_probe``. A native crash kills this process, not its parent;
anything Python can catch is written to stderr in one line and exits 1.
"""

from __future__ import annotations

import sys

# Longer than one token on purpose: the AMX crash needs a batch of several tokens to show.
_PROMPT = "Mia has 7 boxes of 8 crayons. How many crayons does she have?"


def main() -> int:
    """Decode a few tokens of a multi-token prompt with one thread and a small context."""
    from retryctl.models import EmbeddedBackend, SamplingParams

    backend = EmbeddedBackend(n_threads=1, n_ctx=256)
    try:
        params = SamplingParams(temperature=0.0, max_tokens=2, seed=0)
        backend.sample_sync([{"role": "user", "content": _PROMPT}], params, k=1)
    except Exception as exc:  # the parent reports the last stderr line as the problem
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{type(exc).__name__}: {message}", file=sys.stderr)
        return 1
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
