"""Which files a build may read: the one policy every confined build applies (the server's tree,
collection and knowledge-base builds, from server-side paths or uploads).

`ReadRoots.check(path)` resolves the path the way the operating system will when the file is
opened (every symbolic link, every `..`) and refuses it unless the result lies under one of the
roots. The loaders call it on every file they are about to read, the files found by walking a
folder or matching a glob included, so a link inside a root cannot lead a build out of it.

Hard links cannot be resolved: a hard link is the file itself under one more name, and nothing
tells which of its names is "the original" or where the others are. With `single_link=True` (the
server sets it for tenants) a regular file with more than one link is refused; whoever made the link
could already read the file, but the file may sit under another tenant's root too.

A build without roots (the CLI, the library by default) reads whatever the process can read, and
follows links: the local owner can open those files anyway.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from knowtree.errors import InputError

OUTSIDE = "leads outside the folders this build may read (a symbolic link, or '..'): not read"
HARD_LINKED = (
    "has {links} hard links, so it may be another folder's file under a second name: not read"
    " (copy the file instead of linking it)"
)


@dataclass(frozen=True)
class ReadRoots:
    """The folders (resolved) a build may read files from."""

    roots: tuple[Path, ...]
    single_link: bool = False

    @classmethod
    def of(cls, roots: Iterable[str | Path], *, single_link: bool = False) -> ReadRoots:
        return cls(tuple(Path(r).expanduser().resolve() for r in roots), single_link)

    def resolve(self, path: str | Path) -> Path | None:
        """The path as the system resolves it, when that lies under a root (None otherwise)."""
        resolved = Path(path).expanduser().resolve()
        for root in self.roots:
            if resolved == root or root in resolved.parents:
                return resolved
        return None

    def check(self, path: str | Path) -> None:
        """Raise `InputError` naming `path` unless reading it stays under a root (and, with
        `single_link`, it is not a regular file with several hard links). A missing path passes:
        the loader reports it as missing."""
        try:
            resolved = self.resolve(path)
        except (OSError, RuntimeError):  # a link loop: the loader names it
            return
        if resolved is None:
            raise InputError(str(path), OUTSIDE)
        if not self.single_link:
            return
        try:
            info = os.stat(resolved)
        except OSError:
            return
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            raise InputError(str(path), HARD_LINKED.format(links=info.st_nlink))
