"""Run untrusted (LLM-written) Python code in a confined child process.

Layers, strongest first. Each run reports the ones that took effect in
``SandboxResult.protections``; ``SandboxLimits.require`` refuses to run code when a
named layer is missing.

OS level (the real boundary):

* a fresh ``python -I -S -B`` process in its own session/process group, started with
  an empty environment (only ``PATH``, ``HOME``/``TMPDIR`` = scratch, locale and
  thread-count variables), inside a fresh scratch directory that is removed afterwards;
* ``netns``: a new network namespace with only a down loopback (no network at all);
* ``mountns`` + ``readonly-fs``: a private mount namespace in which every mount is
  read-only except the scratch directory;
* ``pidns`` + ``private-proc``: a new PID namespace (the code runs as PID 1 of it, sees
  no other process, and everything it starts dies with it) with its own ``/proc``;
* ``uid-drop`` (when the parent is root): the code runs as a random unprivileged uid
  with no capabilities, so it cannot signal the parent, read other processes'
  environments, raise its limits, or write root's files; ``nproc`` then also caps the
  number of processes and threads. Directories that this uid may not traverse but that
  Python needs (e.g. a Python under ``/root``) are replaced by an empty tmpfs into which
  only the Python install is bind-mounted back (``dac-read-search`` is recorded instead
  when that fails and the read-bypass capability had to be kept);
* ``userns`` (when the parent is not root): an unprivileged user namespace, which makes
  the namespaces above available where the kernel allows it;
* ``rlimits``: CPU seconds, address space, file size, no core dumps;
* ``no-new-privs``; the parent kills the whole process group on timeout or output
  overflow, caps captured output while reading, and enforces a wall-clock deadline.

Python level (a mitigation, not a security boundary):

* ``audit-hook``: a ``sys.addaudithook`` guard installed before the user code runs. It
  refuses writes outside the scratch directory, reads outside Python's own files, a few
  system paths and the scratch directory, process creation (fork/exec/spawn/subprocess),
  signals to other processes, sockets, ctypes and rlimit changes. Code can defeat
  audit hooks in several ways (the CPython docs say as much); the guard exists so that
  ordinary mistakes fail fast and so that hosts without namespaces still get some
  protection.

Namespaces need root or unprivileged user namespaces; each layer is best effort and
the rest still apply when one is unavailable.
"""

from __future__ import annotations

import contextlib
import logging
import marshal
import os
import secrets
import selectors
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from puppeteer.tools import sandbox_child

logger = logging.getLogger(__name__)

SandboxStatus = Literal["ok", "error", "timeout", "memory", "output_limit", "killed"]

PROTECTIONS = (
    "userns",
    "netns",
    "mountns",
    "pidns",
    "readonly-fs",
    "private-proc",
    "rlimits",
    "nproc",
    "uid-drop",
    "dac-read-search",
    "caps-dropped",
    "no-new-privs",
    "audit-hook",
)

_EXIT_MEMORY = 113
_EXIT_SETUP = 114
_MAIN = "main.py"
_CHUNK = 65536
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "out of memory", "std::bad_alloc")
_SYSTEM_READ_ROOTS = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/ld.so.cache",
    "/dev/null",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/sys/devices/system/cpu",
)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits and policy for one sandboxed run.

    ``site_packages`` makes the parent's installed packages (numpy, sympy, ...) importable.
    ``namespaces`` allows the Linux namespaces (turn off only where creating them
    misbehaves; rlimits, uid drop and audit hook still apply). ``audit_hook`` turns the
    Python-level guard on (keep it on; turning it off is for testing that the OS layers
    hold on their own). ``extra_read_paths`` widens what the guard lets the code read.
    ``require`` names protections (see ``PROTECTIONS``) without which the code must not run.
    ``max_processes`` caps processes + threads, enforced only with the uid drop (root parent).
    """

    timeout_s: float = 5.0
    cpu_s: int = 5
    memory_mb: int = 512
    max_output_bytes: int = 64_000
    max_processes: int = 32
    max_file_mb: int = 64
    site_packages: bool = True
    namespaces: bool = True
    audit_hook: bool = True
    extra_read_paths: tuple[str, ...] = ()
    require: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_s", "memory_mb", "max_output_bytes", "max_processes", "max_file_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive")
        unknown = set(self.require) - set(PROTECTIONS)
        if unknown:
            raise ValueError(f"unknown protections in require: {sorted(unknown)}; known: {PROTECTIONS}")


DEFAULT_LIMITS = SandboxLimits()


@dataclass(frozen=True)
class SandboxResult:
    """What a run produced.

    ``stdout`` + ``stderr`` hold at most ``max_output_bytes`` bytes (``truncated`` says
    whether more was printed). ``cpu_s`` and ``max_rss_mb`` come from the reaped process
    tree (they can undercount processes killed on a timeout; ``max_rss_mb`` can include the
    parent's own RSS, which Linux carries into a forked child). ``protections`` lists the
    layers that took effect; ``pid`` is the sandbox's process (and process group) id.
    """

    status: SandboxStatus
    stdout: str
    stderr: str
    returncode: int | None
    wall_s: float
    cpu_s: float = 0.0
    max_rss_mb: float = 0.0
    truncated: bool = False
    protections: tuple[str, ...] = ()
    pid: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# The child program (puppeteer/tools/sandbox_child.py) runs by path as
# ``python -I -S -B sandbox_child.py <marshalled config, hex>`` before any user code: it applies
# the OS-level layers, reports them on a pipe, installs the audit hook and then executes
# scratch/main.py as ``__main__``. Isolated mode keeps the package directory off its sys.path.
_CHILD = os.path.abspath(sandbox_child.__file__)


@dataclass(frozen=True)
class _Captured:
    stdout: bytes
    stderr: bytes
    report: bytes
    reason: Literal["timeout", "output_limit"] | None
    truncated: bool


def run_python(
    code: str,
    *,
    limits: SandboxLimits = DEFAULT_LIMITS,
    stdin: str = "",
    files: Mapping[str, str | bytes] | None = None,
) -> SandboxResult:
    """Run ``code`` as ``__main__`` in a fresh confined process and report what happened.

    ``files`` are written into the scratch directory (relative paths) before the run;
    ``stdin`` is fed to the process. Never raises for anything the code does.
    """
    start = time.monotonic()
    scratch = os.path.realpath(tempfile.mkdtemp(prefix="puppeteer-sbx-"))
    try:
        uid = _sandbox_uid() if os.geteuid() == 0 else None
        _write_inputs(scratch, code, files or {}, uid)
        return _execute(scratch, uid, limits, stdin.encode("utf-8", errors="replace"), start)
    finally:
        _remove_tree(scratch)


def run_python_patiently(
    code: str,
    *,
    limits: SandboxLimits = DEFAULT_LIMITS,
    retries: int = 2,
    stdin: str = "",
    files: Mapping[str, str | bytes] | None = None,
) -> SandboxResult:
    """:func:`run_python`, run again with twice the wall-clock limit when a run hit the wall clock
    while its CPU time stayed under half the CPU limit, up to ``retries`` times.

    On a loaded machine the wall clock runs out while a program waits for a core: a HumanEval test
    that needs 0.06 s of CPU took 5.7 s of wall time to start and finish on a shared core. A grade, an
    answer signal or a tool's output read by a model must not depend on the machine's load, so those
    callers use this. A program that computes past its CPU limit is not run again; one that sleeps
    is, and times out at the last, longest limit.
    """
    result = run_python(code, limits=limits, stdin=stdin, files=files)
    for _ in range(retries):
        if result.status != "timeout" or result.cpu_s >= 0.5 * limits.cpu_s:
            break
        limits = replace(limits, timeout_s=2 * limits.timeout_s)
        logger.info(
            "sandbox: wall clock ran out after %.1fs with %.2fs of CPU (a loaded machine); again with %gs",
            result.wall_s,
            result.cpu_s,
            limits.timeout_s,
        )
        result = run_python(code, limits=limits, stdin=stdin, files=files)
    return result


def _execute(
    scratch: str, uid: int | None, limits: SandboxLimits, stdin: bytes, start: float
) -> SandboxResult:
    needed = _python_paths(limits)
    report_r, report_w = os.pipe()
    config = {
        "scratch": scratch,
        "main": _MAIN,
        "uid": uid,
        "report_fd": report_w,
        "cpu_s": int(limits.cpu_s),
        "memory_bytes": limits.memory_mb << 20,
        "file_bytes": limits.max_file_mb << 20,
        "nproc": limits.max_processes,
        "needed": needed,
        "readable": [*_SYSTEM_READ_ROOTS, *needed],
        "site": _site_dirs() if limits.site_packages else [],
        "namespaces": limits.namespaces,
        "audit": limits.audit_hook,
        "require": list(limits.require),
        "exit_memory": _EXIT_MEMORY,
        "exit_setup": _EXIT_SETUP,
    }
    argv = [sys.executable, "-I", "-S", "-B", _CHILD, marshal.dumps(config).hex()]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=scratch,
            env=_child_env(scratch),
            start_new_session=True,
            pass_fds=(report_w,),
            close_fds=True,
        )
    except BaseException:
        os.close(report_r)
        raise
    finally:
        os.close(report_w)
    captured: _Captured | None = None
    try:
        captured = _pump(proc, stdin, report_r, start + limits.timeout_s, limits.max_output_bytes)
    finally:
        _kill_group(proc.pid)
        _, wait_status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        os.close(report_r)
        protections = _parse_report(captured.report if captured is not None else b"")
        if uid is not None and "pidns" not in protections:
            _kill_uid(uid)
        _reap_leftovers(proc.pid, uid)
    assert captured is not None
    cpu = usage.ru_utime + usage.ru_stime
    stderr = captured.stderr.decode("utf-8", errors="replace")
    status = _classify(captured.reason, proc.returncode, cpu, limits, stderr)
    if status != "ok" and status != "error":
        logger.debug("sandbox run ended with %s (rc=%s, cpu=%.2fs)", status, proc.returncode, cpu)
    return SandboxResult(
        status=status,
        stdout=captured.stdout.decode("utf-8", errors="replace"),
        stderr=stderr,
        returncode=proc.returncode,
        wall_s=time.monotonic() - start,
        cpu_s=cpu,
        max_rss_mb=usage.ru_maxrss / 1024.0,
        truncated=captured.truncated,
        protections=protections,
        pid=proc.pid,
    )


def _pump(proc: subprocess.Popen[bytes], data: bytes, report_fd: int, deadline: float, cap: int) -> _Captured:
    """Feed stdin and read stdout/stderr/report until EOF, the deadline, or the output cap."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd, in_fd = proc.stdout.fileno(), proc.stderr.fileno(), proc.stdin.fileno()
    buffers = {out_fd: bytearray(), err_fd: bytearray(), report_fd: bytearray()}
    sel = selectors.DefaultSelector()
    for fd in buffers:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    if data:
        os.set_blocking(in_fd, False)
        sel.register(in_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    pidfd = _pidfd(proc.pid)
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ)
    sent = used = 0
    reason: Literal["timeout", "output_limit"] | None = None
    exited = False
    try:
        while reason is None and (not exited or any(fd in buffers for fd in sel.get_map())):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                reason = None if exited else "timeout"
                break
            for key, _ in sel.select(remaining if pidfd is not None else min(remaining, 0.02)):
                fd = key.fd
                if fd == pidfd:
                    sel.unregister(fd)
                    exited = True
                elif fd == in_fd:
                    try:
                        sent += os.write(fd, data[sent : sent + _CHUNK])
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        sent = len(data)
                    if sent >= len(data):
                        sel.unregister(fd)
                        proc.stdin.close()
                else:
                    try:
                        chunk = os.read(fd, _CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                    elif fd == report_fd:
                        buffers[fd] += chunk[: max(0, 4096 - len(buffers[fd]))]
                    else:
                        buffers[fd] += chunk[: max(0, cap - used)]
                        used += len(chunk)
                        if used > cap:
                            reason = "output_limit"
                            break
            if not exited and pidfd is None:
                exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            if exited and deadline > time.monotonic() + 0.5:
                # The main process is gone: kill leftovers holding the pipes and drain briefly.
                _kill_group(proc.pid)
                deadline = time.monotonic() + 0.5
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
    if reason is not None:
        _kill_group(proc.pid)
    _drain(report_fd, buffers[report_fd], 4096 - len(buffers[report_fd]))
    for fd in (out_fd, err_fd):
        used += _drain(fd, buffers[fd], max(0, cap - used))
    return _Captured(
        bytes(buffers[out_fd]),
        bytes(buffers[err_fd]),
        bytes(buffers[report_fd]),
        reason,
        truncated=used > cap,
    )


def _drain(fd: int, buffer: bytearray, budget: int) -> int:
    """Read what is left in a non-blocking pipe (up to 1 MiB); keep ``budget`` bytes."""
    seen = 0
    while seen < (1 << 20):
        try:
            chunk = os.read(fd, _CHUNK)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        buffer += chunk[: max(0, budget - seen)]
        seen += len(chunk)
    return seen


def _classify(
    reason: Literal["timeout", "output_limit"] | None,
    returncode: int | None,
    cpu_s: float,
    limits: SandboxLimits,
    stderr: str,
) -> SandboxStatus:
    if reason is not None:
        return reason
    if returncode == 0:
        return "ok"
    if returncode == _EXIT_MEMORY:
        return "memory"
    if returncode is None:
        return "killed"
    if returncode < 0:
        sig = -returncode
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= limits.cpu_s - 0.05):
            return "timeout"
        if any(marker in stderr for marker in _MEMORY_MARKERS):
            return "memory"
        return "killed"
    return "error"


def _parse_report(raw: bytes) -> tuple[str, ...]:
    names = raw.decode("ascii", errors="replace").split()
    return tuple(n for n in names if n in PROTECTIONS)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _reap_leftovers(leader: int, uid: int | None, patience_s: float = 5.0) -> None:
    """Return only once no process of the run is alive: SIGKILL is asynchronous, and a PID
    namespace's members (or a fork bomb's children) can run on for seconds after the group kill.

    A process belongs to the run when its process group or session is ``leader`` or, with a
    private ``uid``, when it runs as that uid. Zombies are dead (they only await reaping).
    """
    deadline = time.monotonic() + patience_s
    while True:
        victims = [pid for pid in _pids() if _belongs(pid, leader, uid)]
        if not victims:
            return
        if time.monotonic() > deadline:
            logger.warning(
                "sandbox: %d process(es) of run %d outlived %.0fs of SIGKILLs",
                len(victims),
                leader,
                patience_s,
            )
            return
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)


def _belongs(pid: int, leader: int, uid: int | None) -> bool:
    """``pid`` is alive (not a zombie) and in ``leader``'s group or session, or runs as ``uid``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    if fields[0] in ("Z", "X"):
        return False
    if leader in (int(fields[2]), int(fields[3])):
        return True
    return uid is not None and _real_uid(pid) == uid


def _kill_uid(uid: int, rounds: int = 5) -> None:
    """SIGKILL every process whose real uid is the run's private uid (escapees of the group)."""
    for _ in range(rounds):
        victims = [pid for pid in _pids() if _real_uid(pid) == uid]
        if not victims:
            return
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _real_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _sandbox_uid() -> int:
    """A random unprivileged uid/gid that no real account uses (one per run)."""
    return (1 << 30) + secrets.randbelow(1 << 29)


def _write_inputs(scratch: str, code: str, files: Mapping[str, str | bytes], uid: int | None) -> None:
    targets: dict[str, str | bytes] = {_MAIN: code}
    for name, text in files.items():
        norm = os.path.normpath(name)
        if os.path.isabs(norm) or norm.startswith("..") or norm in (".", _MAIN):
            raise ValueError(f"sandbox file names must be relative, inside scratch, not {_MAIN}: {name!r}")
        targets[norm] = text
    for name, text in targets.items():
        path = os.path.join(scratch, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(text.encode("utf-8") if isinstance(text, str) else text)
    if uid is not None:
        for dirpath, dirnames, filenames in os.walk(scratch):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in (*dirnames, *filenames))]:
                os.chown(name, uid, uid)


def _remove_tree(path: str) -> None:
    def unlock(func: object, target: str, _exc: object) -> None:
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target, ignore_errors=True)
            else:
                os.unlink(target)
        except OSError:
            logger.warning("sandbox: could not remove %s", target)

    shutil.rmtree(path, onerror=unlock)


def _child_env(scratch: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": scratch,
        "TMPDIR": scratch,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }


def _site_dirs() -> list[str]:
    found = [
        *site.getsitepackages(),
        *(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")),
    ]
    return _existing_unique(found)


def _python_paths(limits: SandboxLimits) -> list[str]:
    """Directories the child must be able to read: the stdlib, site-packages, extras."""
    paths = sysconfig.get_paths()
    found = [paths["stdlib"], paths["platstdlib"], os.path.join(paths["platstdlib"], "lib-dynload")]
    if limits.site_packages:
        found += _site_dirs()
    found += list(limits.extra_read_paths)
    unique = _existing_unique(found)
    return [p for p in unique if not any(p != q and p.startswith(q.rstrip(os.sep) + os.sep) for q in unique)]


def _existing_unique(paths: list[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        real = os.path.realpath(p)
        if os.path.exists(real) and real not in out:
            out.append(real)
    return out
