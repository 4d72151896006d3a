"""The sandbox's child program: confine this process, then run ``main.py`` as ``__main__``.

The parent (:func:`puppeteer.tools.sandbox.run_python`) starts it by path as
``python -I -S -B sandbox_child.py <marshalled config, hex>`` in a fresh scratch directory.
Before any user code runs it applies the OS-level layers (namespaces, read-only mounts,
rlimits, uid drop, no-new-privs), reports the ones that took effect on the pipe
``cfg["report_fd"]``, installs the audit-hook guard and then executes ``cfg["main"]``.

It runs in an isolated interpreter without site-packages, so it imports only the standard
library and nothing from ``puppeteer``. Importing this module has no side effects; the
work happens only when it runs as ``__main__``. The config keys are written by
``puppeteer.tools.sandbox._execute``.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import sys
from typing import Any

Config = dict[str, Any]


def _prepare(cfg: Config) -> list[str]:
    """Apply the OS-level layers that this host allows; return the names of those that took effect."""
    import ctypes
    import resource

    class Libc:
        """libc functions by name; a missing one (not Linux) fails like a refused call."""

        def __init__(self) -> None:
            self._lib = ctypes.CDLL(None, use_errno=True)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._lib, name, None) or (lambda *args: -1)

    libc = Libc()
    done: list[str] = []
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    scratch, needed = cfg["scratch"], cfg["needed"]
    drop = cfg["uid"] if root else None
    enc = os.fsencode

    def mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> bool:
        return (
            libc.mount(
                src and enc(src), enc(dst), fstype and enc(fstype), ctypes.c_ulong(flags), data and enc(data)
            )
            == 0
        )

    class Attr(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "prop", "userns")]

    def mount_setattr(path: str, flags: int, to_set: int, to_clear: int) -> bool:
        attr = Attr(to_set, to_clear, 0, 0)
        return (
            libc.syscall(
                ctypes.c_long(442),
                ctypes.c_int(-100),
                enc(path),
                ctypes.c_uint(flags),
                ctypes.byref(attr),
                ctypes.c_size_t(ctypes.sizeof(attr)),
            )
            == 0
        )

    def capset(mask: int) -> bool:
        class Hdr(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

        data = (Data * 2)()
        data[0].effective = data[0].permitted = mask
        return libc.capset(ctypes.byref(Hdr(0x20080522, 0)), data) == 0

    def blocked(path: str) -> str | None:
        cur = ""
        for part in path.strip("/").split("/")[:-1]:
            cur += "/" + part
            try:
                if not os.stat(cur).st_mode & 0o001:
                    return cur
            except OSError:
                return None
        return None

    privileged = root and cfg["namespaces"]
    if not root and cfg["namespaces"] and libc.unshare(0x10000000) == 0:
        try:
            maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
            for name, text in maps:
                with open("/proc/self/" + name, "w") as fh:
                    fh.write(text)
            done.append("userns")
            privileged = True
        except OSError:
            pass
    if privileged:
        for flag, name in ((0x40000000, "netns"), (0x20000, "mountns"), (0x20000000, "pidns")):
            if libc.unshare(flag) == 0:
                done.append(name)

    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 4096, 16384, 1 << 18
    if "mountns" in done and mount(None, "/", None, MS_REC | MS_PRIVATE):
        binds = {scratch: os.open(scratch, os.O_PATH)}
        hides = set()
        if drop is not None:
            for path in needed:
                top = blocked(path)
                if top and os.path.isdir(path):
                    hides.add(top)
                    binds.setdefault(path, os.open(path, os.O_PATH))
        hidden = [
            top
            for top in sorted(hides)
            if mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
        ]
        bound = True
        for path, fd in sorted(binds.items()):
            with contextlib.suppress(OSError):
                os.makedirs(path, exist_ok=True)
            bound = mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC) and bound
            os.close(fd)
        if not bound:
            for top in hidden:
                libc.umount2(enc(top), 2)
        elif mount_setattr("/", 0x8000, 1, 0) and mount_setattr(scratch, 0, 0, 1):
            done.append("readonly-fs")

    def limit(res: int, value: int) -> bool:
        try:
            hard = resource.getrlimit(res)[1]
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(res, (value, value))
            return True
        except (OSError, ValueError):
            return False

    R = resource
    basic = [
        (R.RLIMIT_CPU, cfg["cpu_s"]),
        (R.RLIMIT_AS, cfg["memory_bytes"]),
        (R.RLIMIT_FSIZE, cfg["file_bytes"]),
        (R.RLIMIT_CORE, 0),
    ]
    if all([limit(res, value) for res, value in basic]):
        done.append("rlimits")
    if drop is not None and limit(R.RLIMIT_NPROC, cfg["nproc"]):
        done.append("nproc")

    if "pidns" in done:
        pid = os.fork()
        if pid:
            os.close(cfg["report_fd"])
            libc.prctl(38, 1, 0, 0, 0)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            if code < 0:
                import signal

                if -code not in (signal.SIGKILL, signal.SIGSTOP):
                    signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            os._exit(code if code >= 0 else 128 - code)
        if "mountns" in done and mount("proc", "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC):
            done.append("private-proc")

    if drop is not None:
        need_dac = any(blocked(p) for p in [*needed, scratch] if os.path.exists(p))
        if need_dac:
            libc.prctl(8, 1, 0, 0, 0)
        try:
            os.setgroups([])
            os.setresgid(drop, drop, drop)
            os.setresuid(drop, drop, drop)
            done.append("uid-drop")
            if need_dac and capset(1 << 2):
                done.append("dac-read-search")
        except OSError:
            pass
    elif privileged and capset(0):
        done.append("caps-dropped")
    if libc.prctl(38, 1, 0, 0, 0) == 0:
        done.append("no-new-privs")
    return done


def _guard(scratch: str, readable: list[str]) -> None:
    """Install the audit-hook guard (a mitigation, see ``puppeteer.tools.sandbox``)."""
    realpath, fsdecode, fspath, readlink = os.path.realpath, os.fsdecode, os.fspath, os.readlink
    dirname, basename, join, isdir = os.path.dirname, os.path.basename, os.path.join, os.path.isdir
    me = os.getpid()
    writes = (scratch,)
    reads = (*tuple(realpath(p) for p in readable), realpath("/proc/self"), scratch)
    wflags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    entry_events = {
        "os.remove": (0,),
        "os.rmdir": (0,),
        "os.mkdir": (0,),
        "os.rename": (0, 1),
        "os.link": (0, 1),
        "os.symlink": (1,),
        "shutil.rmtree": (0,),
    }
    content_events = {
        "os.chmod",
        "os.chown",
        "os.truncate",
        "os.utime",
        "os.setxattr",
        "os.removexattr",
        "os.chflags",
        "os.lchflags",
        "shutil.chown",
    }
    list_events = {"os.listdir", "os.scandir", "os.chdir"}
    denied = {
        "os.fork",
        "os.forkpty",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.startfile",
        "subprocess.Popen",
        "pty.spawn",
        "os.killpg",
        "resource.setrlimit",
        "resource.prlimit",
        "webbrowser.open",
        "sqlite3.enable_load_extension",
        "sqlite3.load_extension",
    }
    denied_imports = {"_posixsubprocess"}
    # ctypes may be imported (numpy and sympy do) but not used to call C or poke memory.
    denied_ctypes = {
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.call_function",
        "ctypes.cdata",
        "ctypes.string_at",
        "ctypes.wstring_at",
    }

    def under(path: str, roots: tuple[str, ...]) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

    def full(path: Any) -> str:
        if isinstance(path, int):
            try:
                return readlink(f"/proc/self/fd/{path}")
            except OSError:
                return f"fd {path}"
        return realpath(fsdecode(fspath(path)))

    def entry(path: Any) -> str:
        if isinstance(path, int):
            return full(path)
        text = fsdecode(fspath(path)).rstrip("/") or "/"
        return join(realpath(dirname(text) or "."), basename(text))

    def deny(what: str) -> None:
        raise PermissionError(f"sandbox: {what} is not allowed")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int):
                return
            target = full(path)
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & wflags
            )
            if writing:
                if not under(target, writes):
                    deny(f"writing {target}")
            elif not under(target, reads):
                deny(f"reading {target}")
            elif mode is None and not under(target, writes) and isdir(target):
                deny(f"opening directory {target}")
        elif event in entry_events:
            for i in entry_events[event]:
                target = entry(args[i])
                if not under(target, writes):
                    deny(f"{event} on {target}")
        elif event in content_events:
            target = full(args[0])
            if not under(target, writes):
                deny(f"{event} on {target}")
        elif event in list_events:
            if args[0] is not None and not isinstance(args[0], int) and not under(full(args[0]), reads):
                deny(f"{event} on {full(args[0])}")
        elif event == "os.kill":
            if args[0] != me:
                deny(f"signalling process {args[0]}")
        elif event == "import":
            if args[0] in denied_imports:
                deny(f"importing {args[0]}")
        elif event == "sqlite3.connect":
            db = fsdecode(fspath(args[0])) if args[0] is not None else ""
            if db not in ("", ":memory:") and (db.startswith("file:") or not under(full(db), writes)):
                deny(f"opening database {db}")
        elif event == "ctypes.dlopen":
            if args[0] is not None:
                deny(f"loading {args[0]}")
        elif (
            event in denied
            or event in denied_ctypes
            or (event.startswith("socket.") and event != "socket.gethostname")
        ):
            deny(event)

    import _posixsubprocess

    def no_fork_exec(*args: Any, **kwargs: Any) -> None:
        raise PermissionError("sandbox: starting processes is not allowed")

    _posixsubprocess.fork_exec = no_fork_exec
    sys.addaudithook(hook)


def _fail(exc: BaseException, namespace: dict[str, Any], exit_memory: int) -> None:
    """Print the user's traceback without this module's frames and exit (``exit_memory`` on MemoryError)."""
    memory = isinstance(exc, MemoryError)
    if memory:
        namespace.clear()
        tb = exc.__traceback__
        while tb is not None:
            with contextlib.suppress(RuntimeError):
                tb.tb_frame.clear()
            tb = tb.tb_next
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
    try:
        import traceback

        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        report = traceback.TracebackException(type(exc), exc, tb)
        pending, seen = [report], set()
        while pending:
            item = pending.pop()
            if id(item) in seen:
                continue
            seen.add(id(item))
            item.stack = traceback.StackSummary.from_list([f for f in item.stack if f.filename != __file__])
            pending += [x for x in (item.__cause__, item.__context__) if x is not None]
            pending += list(getattr(item, "exceptions", None) or ())
        sys.stderr.write("".join(report.format()))
        sys.stderr.flush()
    except BaseException:
        os.write(2, (type(exc).__name__ + "\n").encode())
    os._exit(exit_memory if memory else 1)


def _main(cfg: Config, done: list[str]) -> None:
    """Report the layers, install the guard and run ``cfg["main"]`` as ``__main__``."""
    import builtins

    scratch = cfg["scratch"]
    os.chdir(scratch)
    sys.path[:0] = [scratch]
    sys.path.extend(cfg["site"])
    sys.dont_write_bytecode = True
    builtins.exit = builtins.quit = sys.exit
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(encoding="utf-8", errors="backslashreplace")
    with open(cfg["main"], encoding="utf-8") as fh:
        source = fh.read()
    if cfg["audit"]:
        _guard(scratch, [*cfg["readable"], *sys.path])
        done.append("audit-hook")
    os.write(cfg["report_fd"], " ".join(done).encode())
    os.close(cfg["report_fd"])
    missing = [p for p in cfg["require"] if p not in done]
    if missing:
        sys.stderr.write(f"sandbox: required protections unavailable: {', '.join(missing)}\n")
        sys.stderr.flush()
        os._exit(cfg["exit_setup"])
    namespace = {
        "__name__": "__main__",
        "__file__": cfg["main"],
        "__builtins__": builtins,
        "__doc__": None,
        "__spec__": None,
        "__loader__": None,
        "__package__": None,
    }
    try:
        exec(compile(source, cfg["main"], "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as exc:
        _fail(exc, namespace, cfg["exit_memory"])


def run(hex_config: str) -> None:
    """Decode the parent's config, confine this process and run the user's program."""
    cfg = marshal.loads(bytes.fromhex(hex_config))
    sys.argv[:] = [cfg["main"]]
    done = _prepare(cfg)
    for name in [m for m in sys.modules if m in ("ctypes", "_ctypes") or m.startswith("ctypes.")]:
        del sys.modules[name]
    _main(cfg, done)


if __name__ == "__main__":
    run(sys.argv[1])
