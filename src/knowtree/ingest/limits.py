"""How far a compressed input may inflate: gzip files (`.jsonl.gz` records), the parts of a DOCX
(a zip). A compressed file small enough to upload must not cost more memory than the cap, so each
is read in bounded steps and refused, naming the file, at the first byte past the cap
(`InflateLimitError`). PDF streams are pypdf's own to bound (75 MB a stream in pypdf >= 5).

The cap is per thread of work: `max_inflated()` is the current one; `inflate_limit(n)` sets it for
a block (the server sets it from its upload limit around every job and upload check). Without
one, the library's `DEFAULT_MAX_INFLATED` applies (a local file is its owner's, but a bomb in a
downloaded archive still should not take the machine's memory).
"""

from __future__ import annotations

import contextlib
import gzip
import zipfile
import zlib
from collections.abc import Iterator
from contextvars import ContextVar

from knowtree.errors import InputError

DEFAULT_MAX_INFLATED = 1 << 30  # 1 GiB: the library's cap where no caller set one
_STEP = 1 << 20  # bytes inflated per step
_MAX_ZIP_PARTS = 10_000

_cap: ContextVar[int] = ContextVar("knowtree_max_inflated", default=DEFAULT_MAX_INFLATED)


class InflateLimitError(InputError):
    """A compressed file inflates past the cap (a decompression bomb, or simply too big)."""

    def __init__(self, path: str, limit: int, what: str = "it inflates") -> None:
        self.limit = limit
        super().__init__(path, f"{what} to over {limit:,} bytes, the limit for a compressed file")


def max_inflated() -> int:
    return _cap.get()


@contextlib.contextmanager
def inflate_limit(limit: int) -> Iterator[None]:
    """Every decompression in this block (this thread or task) stops at `limit` bytes."""
    if limit < 1:
        raise ValueError("the inflate limit must be at least 1 byte")
    token = _cap.set(limit)
    try:
        yield
    finally:
        _cap.reset(token)


def read_gzip(path: str, limit: int | None = None) -> bytes:
    """The inflated content of a gzip file, read in bounded steps; `InflateLimitError` past `limit`
    (default: `max_inflated()`), `InputError` when it is not gzip."""
    cap = max_inflated() if limit is None else limit
    out = bytearray()
    for chunk in _gzip_chunks(path):
        out += chunk
        if len(out) > cap:
            raise InflateLimitError(path, cap)
    return bytes(out)


def gzip_size(path: str, limit: int | None = None) -> int:
    """How many bytes a gzip file inflates to, counted without keeping them; raises past `limit`."""
    cap = max_inflated() if limit is None else limit
    total = 0
    for chunk in _gzip_chunks(path):
        total += len(chunk)
        if total > cap:
            raise InflateLimitError(path, cap)
    return total


def _gzip_chunks(path: str) -> Iterator[bytes]:
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(_STEP):  # GzipFile inflates at most _STEP bytes a read
                yield chunk
    except OSError as exc:  # BadGzipFile is one; a missing file another
        raise InputError(path, f"not a readable gzip file ({exc.strerror or exc})") from None
    except (EOFError, zlib.error) as exc:
        raise InputError(path, f"not a readable gzip file ({exc or 'truncated'})") from None


def check_zip(path: str, limit: int | None = None) -> int:
    """Check that the parts of a zip file (a DOCX) inflate to at most `limit` bytes in all, and to
    exactly the sizes its directory declares (readers size their reads by those: zipfile's
    `read()` inflates a part in one step); returns the total. A file that is not a zip is left to
    its reader's own error."""
    cap = max_inflated() if limit is None else limit
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        return 0
    total = 0
    with z:
        infos = z.infolist()
        if len(infos) > _MAX_ZIP_PARTS:
            raise InputError(path, f"a zip of {len(infos):,} parts (at most {_MAX_ZIP_PARTS:,})")
        for info in infos:
            declared = info.file_size
            if total + declared > cap:
                raise InflateLimitError(path, cap, "its parts inflate")
            info.file_size = cap - total + 1  # read the part's real length, whatever it declares
            size = 0
            try:
                with z.open(info) as f:
                    while chunk := f.read(_STEP):  # at most _STEP inflated a read
                        size += len(chunk)
                        if total + size > cap:
                            raise InflateLimitError(path, cap, "its parts inflate")
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as exc:
                raise InputError(path, f"corrupt zip part {info.filename!r} ({exc})") from None
            finally:
                info.file_size = declared
            if size != declared:
                raise InputError(
                    path, f"zip part {info.filename!r} inflates to {size:,} bytes, not the {declared:,} it declares"
                )
            total += size
    return total
