"""llama.cpp builds with runtime CPU dispatch: load the CPU backend variant that fits this machine.

A llama-cpp-python wheel built with ``-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON`` has no
CPU backend linked in: it ships one ``libggml-cpu-<variant>.so`` per x86-64 level (``x64``,
``haswell`` (AVX2), ``skylakex`` / ``icelake`` (AVX-512, VNNI), ``sapphirerapids`` (AMX) ...), and
llama.cpp expects the program to load one before it loads a model ("no backends are loaded").
llama-cpp-python 0.3.36 never does (abetlen/llama-cpp-python#2069), so :func:`ensure_cpu_backend`
calls ggml's ``ggml_backend_load_all_from_path`` on the variants' folder (each variant scores
itself with ``ggml_backend_score``, 0 when this CPU lacks an instruction it needs; the best is
kept) or loads one variant by name, and reports which is in use. On a build with the CPU backend
linked in (the README's ``-DGGML_NATIVE=OFF`` build) it does nothing.

Only ``ctypes`` and the installed ``llama_cpp`` package are used, so the module also runs outside
the project's environment (``benchmarks/bench_cpu_build.py`` loads it by file path).
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from pathlib import Path

PREFIX, SUFFIX = "libggml-cpu-", ".so"


@dataclass(frozen=True)
class CpuBackend:
    """What :func:`ensure_cpu_backend` found: a linked-in backend, or the variant loaded at run time."""

    dynamic: bool  # a GGML_BACKEND_DL build (CPU variants as separate files)
    variant: str  # the variant in use ("" for a linked-in backend)
    available: tuple[str, ...] = ()  # the variant files the build has

    def describe(self) -> str:
        if not self.dynamic:
            return "CPU backend linked in (no runtime dispatch)"
        return f"CPU variant {self.variant or '?'} loaded at run time (of {' '.join(self.available)})"


def _package_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("llama-cpp-python is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def variant_dirs(package_dir: Path | None = None) -> list[Path]:
    """Where a wheel puts the variant files: ``llama_cpp/lib``, or ``bin/`` (CMAKE_INSTALL_BINDIR)."""
    pkg = package_dir or _package_dir()
    return [pkg / "lib", pkg.parent / "bin", Path(sys.prefix) / "bin"]


def variant_files(dirs: list[Path] | None = None) -> dict[str, Path]:
    """``variant name -> file`` for every ``libggml-cpu-<variant>.so`` in ``dirs`` (first found wins)."""
    found: dict[str, Path] = {}
    for d in dirs if dirs is not None else variant_dirs():
        for path in sorted(d.glob(f"{PREFIX}*{SUFFIX}")):
            found.setdefault(path.name[len(PREFIX) : -len(SUFFIX)], path)
    return found


def _ggml() -> ctypes.CDLL:
    """The libggml that libllama uses. A wheel holds copies, not links: ``libggml.so`` and ``libggml.so.0``
    are two files, and loading the first gives a second ggml whose backend registry llama.cpp never sees."""
    lib_dir = _package_dir() / "lib"
    names = ("libggml.so.0", "libggml.so")
    path = next((lib_dir / n for n in names if (lib_dir / n).exists()), lib_dir / names[-1])
    lib = ctypes.CDLL(str(path))  # libllama's DT_NEEDED soname: the copy already loaded, same handle
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    lib.ggml_backend_load.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_load.restype = ctypes.c_void_p
    lib.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    return lib


def mapped_variant(maps: Path = Path("/proc/self/maps")) -> str:
    """The variant whose file this process has mapped (ggml unloads the ones it scored and did not pick)."""
    try:
        text = maps.read_text()
    except OSError:  # not Linux
        return ""
    names = {Path(line.split()[-1]).name for line in text.splitlines() if PREFIX in line}
    variants = sorted(n[len(PREFIX) :].split(SUFFIX)[0] for n in names)
    return ",".join(variants)


def ensure_cpu_backend(variant: str | None = None) -> CpuBackend:
    """Load a CPU backend if the build has none yet: ``variant`` by name, else the best one for this CPU.

    The best one is ggml's own choice (``ggml_backend_load_all_from_path``: every variant scores
    itself, 0 when this CPU lacks an instruction it needs). Call it after ``import llama_cpp`` and
    before loading a model. Idempotent: a build that already has a CPU backend (linked in, or
    loaded by an earlier call) is left alone.
    """
    import llama_cpp  # noqa: F401  (loads libggml, which registers the linked-in backends)

    files = variant_files()
    if not files:  # the usual build: the CPU backend is linked in
        return CpuBackend(dynamic=False, variant="")
    ggml = _ggml()
    available = tuple(sorted(files))
    if ggml.ggml_backend_reg_count() == 0:
        if variant is None:
            ggml.ggml_backend_load_all_from_path(str(next(iter(files.values())).parent).encode())
        elif variant not in files:
            raise ValueError(f"no CPU backend variant {variant!r}; found {', '.join(available)}")
        elif not ggml.ggml_backend_load(str(files[variant]).encode()):
            raise RuntimeError(f"llama.cpp refused the CPU backend {files[variant]} (not for this CPU?)")
        if ggml.ggml_backend_reg_count() == 0:
            raise RuntimeError(f"no CPU backend variant of {', '.join(available)} loads on this CPU")
    return CpuBackend(dynamic=True, variant=mapped_variant(), available=available)
