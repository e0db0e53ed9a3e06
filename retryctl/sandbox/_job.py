"""A job on the wire: the checked request the host sends, and the result built from what comes back."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from retryctl.exceptions import ConfigError
from retryctl.sandbox._result import ExecResult, SandboxLimits, Tier

__all__ = [
    "FilesArg",
    "check_code",
    "check_files",
    "check_files_fit",
    "job_limits",
    "make_result",
]

FilesArg = Mapping[str, str | bytes] | None
_MAX_PATH = 255


def check_files(files: FilesArg) -> dict[str, bytes]:
    """Relative, normalised paths inside the work dir, contents as bytes; anything else is refused
    with a :class:`ConfigError` naming ``files``."""
    if files is None:
        return {}
    checked: dict[str, bytes] = {}
    for path, content in files.items():
        if not isinstance(path, str) or not path or len(path) > _MAX_PATH or "\0" in path:
            raise ConfigError(field="files", value=path, problem="a file name must be a short non-empty str")
        norm = posixpath.normpath(path)
        if norm.startswith("/") or norm == "." or norm.split("/")[0] == "..":
            raise ConfigError(
                field="files", value=path, problem="must be a relative path inside the work dir"
            )
        if isinstance(content, str):
            checked[norm] = content.encode()
        elif isinstance(content, bytes | bytearray):
            checked[norm] = bytes(content)
        else:
            raise ConfigError(
                field=f"files[{path!r}]", value=type(content).__name__, problem="must be str or bytes"
            )
    return checked


def check_files_fit(files: dict[str, bytes], limits: SandboxLimits) -> None:
    """The job's files alone must fit its disk quota and its file-size limit."""
    total = sum(len(content) for content in files.values())
    if total > limits.disk_mb << 20:
        raise ConfigError(
            field="files", value=f"{total} bytes", problem=f"more than disk_mb={limits.disk_mb} MiB"
        )
    for path, content in files.items():
        if len(content) > limits.max_file_mb << 20:
            raise ConfigError(
                field=f"files[{path!r}]", value=f"{len(content)} bytes",
                problem=f"larger than max_file_mb={limits.max_file_mb} MiB",
            )  # fmt: skip


def job_limits(base: SandboxLimits | None, *, timeout_s: float, memory_mb: int) -> SandboxLimits:
    """``base`` with the per-call limits applied (and validated: a bad value names its field)."""
    fields = (base or SandboxLimits()).model_dump()
    fields.update(timeout_s=timeout_s, memory_mb=memory_mb)
    return SandboxLimits(**fields)


def check_code(code: object) -> str:
    """The code must be a str."""
    if not isinstance(code, str):
        raise ConfigError(field="code", value=type(code).__name__, problem="must be a str")
    return code


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def make_result(
    *,
    tier: Tier,
    limits: SandboxLimits,
    exit_code: int,
    stdout: bytes,
    stderr: bytes,
    stdout_size: int,
    stderr_size: int,
    killed_by: str | None,
    duration_ms: float,
) -> ExecResult:
    """An :class:`ExecResult`, trusting no length the sandbox reported beyond the limits."""
    cap = limits.max_output_bytes
    return ExecResult(
        stdout=_decode(stdout[:cap]),
        stderr=_decode(stderr[:cap]),
        exit_code=exit_code,
        timed_out=killed_by == "timeout",
        duration_ms=duration_ms,
        isolation=tier,
        stdout_truncated=stdout_size > cap or len(stdout) > cap,
        stderr_truncated=stderr_size > cap or len(stderr) > cap,
        killed_by=killed_by if killed_by in ("timeout", "disk_quota") else None,
    )
