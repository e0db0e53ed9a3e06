"""What a sandboxed run returns, the limits it runs under, and the isolation tiers."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ExecResult", "SandboxLimits", "Tier"]


class Tier(StrEnum):
    """How a job is isolated, strongest first."""

    BUBBLEWRAP = "bubblewrap"
    """All namespaces (no network at all), read-only system, tmpfs work dir, seccomp, rlimits."""
    LANDLOCK = "landlock"
    """Landlock filesystem/network/signal rules, seccomp, rlimits and a uid of its own; where user
    namespaces work, also a root of the system only and per-job pid namespaces and tmpfs."""
    UNSAFE = "unsafe"
    """Rlimits only: isolates nothing. Runs only with an explicit ``unsafe=True``."""


class SandboxLimits(BaseModel):
    """Resource limits of one job. Validated on construction; a bad value names its field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(default=10.0, gt=0, le=3600)
    """Wall-clock limit; the job's whole process tree is killed when it passes."""
    memory_mb: int = Field(default=512, ge=16, le=65536)
    """Address-space limit (``RLIMIT_AS``) of every process of the job, in MiB. Memory a job could
    fill without mapping it is refused or counted elsewhere: ``memfd_create`` and SysV shared memory
    are refused by seccomp, files count against ``disk_mb``."""
    max_output_bytes: int = Field(default=1 << 20, ge=1024, le=1 << 28)
    """How much of stdout and of stderr (each) is returned; the rest is dropped and flagged."""
    max_file_mb: int = Field(default=16, ge=1, le=4096)
    """Largest file a job may write (``RLIMIT_FSIZE``: writing past it raises ``SIGXFSZ``, which
    Python ignores, so the write fails with ``EFBIG``), and most stdout and stderr (each) a job may
    write: past it the output pipe is closed and the next write fails with ``EPIPE``."""
    disk_mb: int = Field(default=64, ge=1, le=65536)
    """Total disk the job's work dir may use: the size of a tmpfs of its own (the kernel refuses the
    next byte with ``ENOSPC``, unlinked and unreadable files included)."""
    max_files: int = Field(default=10_000, ge=16, le=1_000_000)
    """Files and directories the job's work dir may hold (each costs kernel memory even when empty):
    its tmpfs has ``max_files + 2`` inodes (the kernel refuses more with ``ENOSPC``), and a job found
    holding more than ``max_files`` (checked every 50 ms) is killed with ``killed_by="disk_quota"``."""
    nproc: int = Field(default=64, ge=1, le=4096)
    """Processes and threads the job may have at once (``RLIMIT_NPROC``)."""
    nofile: int = Field(default=256, ge=16, le=65536)
    """Open file descriptors per process (``RLIMIT_NOFILE``)."""

    def as_wire(self) -> dict[str, int | float]:
        """The limits as the in-sandbox program reads them (bytes where it needs bytes)."""
        return {
            "timeout_s": self.timeout_s,
            "memory_mb": self.memory_mb,
            "max_output_bytes": self.max_output_bytes,
            "max_file_bytes": max(self.max_file_mb << 20, self.max_output_bytes),
            "disk_bytes": self.disk_mb << 20,
            "max_files": self.max_files,
            "nproc": self.nproc,
            "nofile": self.nofile,
        }


class ExecResult(BaseModel):
    """The outcome of one sandboxed run. Failures of the *code* are results, never exceptions."""

    model_config = ConfigDict(frozen=True)

    stdout: str
    """Standard output, decoded as UTF-8 (undecodable bytes replaced), at most ``max_output_bytes``."""
    stderr: str
    """Standard error, the same way; a Python traceback ends up here."""
    exit_code: int
    """The process exit status; negative is the signal that killed it (``-9`` on a timeout)."""
    timed_out: bool
    """The wall-clock limit was reached and the job was killed."""
    duration_ms: float
    """Wall-clock time of the whole call as the caller saw it, sandbox start-up included."""
    isolation: Tier
    """The tier that ran the job."""
    stdout_truncated: bool = False
    """More stdout was written than was kept."""
    stderr_truncated: bool = False
    """More stderr was written than was kept."""
    killed_by: str | None = None
    """``"timeout"``, ``"disk_quota"`` or ``None``: why the sandbox killed the job, if it did."""

    @property
    def ok(self) -> bool:
        """Exited with status 0 on its own."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def truncated(self) -> bool:
        """Either output was cut."""
        return self.stdout_truncated or self.stderr_truncated
