"""The workspace on disk: which files belong to it, their size and mtime, their text.

Nothing here touches the store. Paths are relative to the workspace folder
and use ``/`` on every platform. Patterns are globs matched against those
paths: ``*`` and ``?`` stay within one path segment, ``**`` spans any number
of folders (``memory/**/*.md`` matches ``memory/a.md`` and
``memory/2025/11/a.md``), ``[abc]`` is a character class.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
import time
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import NamedTuple

from mnemex.records import dataclass

RACY_NS = 2_000_000_000  # a file modified this close before it was read is read again
MAX_REMEMBERED = 200_000  # paths whose selection is remembered between scans
_WILD = re.compile(r"[*?\[]")


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex that matches the relative paths the glob ``pattern`` matches."""
    segments = [s for s in pattern.strip().strip("/").split("/") if s and s != "."]
    out = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        out.append(_segment_regex(segment) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z")


def _segment_regex(segment: str) -> str:
    out = []
    index = 0
    while index < len(segment):
        char = segment[index]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            close = segment.find("]", index + 2)
            if close < 0:
                out.append(re.escape(char))
            else:
                body = segment[index + 1 : close]
                negate = body[:1] in ("!", "^")
                body = body[1:] if negate else body
                out.append(("[^" if negate else "[") + body.replace("\\", "\\\\") + "]")
                index = close
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


@functools.lru_cache(maxsize=64)
def any_regex(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex matching what any of the globs matches (None for no globs)."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{glob_regex(p).pattern})" for p in patterns))


def matches(path: str, patterns: Sequence[str]) -> bool:
    regex = any_regex(tuple(patterns))
    return regex is not None and regex.match(path) is not None


def ignored(path: str, ignore: Sequence[str], *, folder: bool = False) -> bool:
    """Whether an ignore pattern matches the path (a folder also as ``folder/``)."""
    regex = any_regex(tuple(ignore))
    if regex is None:
        return False
    return regex.match(path) is not None or (folder and regex.match(path + "/") is not None)


class Stat(NamedTuple):
    size: int
    mtime_ns: int


@dataclass
class Scan:
    """The files of a workspace that match its patterns, as found on disk."""

    files: dict[str, Stat] = field(default_factory=dict)
    unlisted: list[str] = field(default_factory=list)  # folders that could not be read
    errors: list[tuple[str, str]] = field(default_factory=list)  # (folder, message)

    def hides(self, path: str) -> bool:
        """Whether ``path`` lies in a folder that could not be listed (so it may exist)."""
        return any(path.startswith(folder + "/") or not folder for folder in self.unlisted)


def scan(root: Path, globs: Sequence[str], ignore: Sequence[str]) -> Scan:
    """Stat every file under ``root`` that a glob matches and no ignore pattern does.

    Only the folders a glob can reach are walked (``MEMORY.md`` needs no walk,
    ``memory/**/*.md`` walks ``memory/``, ``*.md`` reads one folder).
    Symbolic links to files are followed, to folders not (no cycles). A
    folder that cannot be listed is reported, and files under it are neither
    found nor presumed deleted. Raises ``FileNotFoundError`` when ``root`` is
    not a folder.
    """
    if not root.is_dir():
        raise FileNotFoundError(2, "no such folder", str(root))
    found = Scan()
    literals, walks = _plan_walks(tuple(globs))
    for folder, depth in walks.items():
        if not folder or not ignored(folder, ignore, folder=True):
            _walk(found, root, folder, depth, globs, ignore)
    listings: dict[str, list[str]] = {}
    for path in literals:
        stat_into(found, root, path, globs, ignore, listings)
    return found


@functools.lru_cache(maxsize=16)
def _chosen(globs: tuple[str, ...], ignore: tuple[str, ...]) -> dict[str, bool]:
    """Whether the patterns select each path seen so far (paths repeat from scan to scan)."""
    return {}


@functools.lru_cache(maxsize=64)
def _plan_walks(globs: tuple[str, ...]) -> tuple[list[str], dict[str, int]]:
    """Files named without wildcards, and the folders to walk with their depth (-1: all)."""
    literals: list[str] = []
    walks: dict[str, int] = {}
    for pattern in globs:
        segments = [s for s in pattern.split("/") if s and s != "."]
        fixed = 0
        while fixed < len(segments) and not _WILD.search(segments[fixed]):
            fixed += 1
        if fixed == len(segments):
            literals.append("/".join(segments))
            continue
        rest = segments[fixed:]
        depth = -1 if "**" in rest else len(rest)
        folder = "/".join(segments[:fixed])
        old = walks.get(folder)
        walks[folder] = depth if old is None else -1 if -1 in (old, depth) else max(old, depth)
    unlimited = [f for f, d in walks.items() if d == -1]
    return literals, {
        folder: depth
        for folder, depth in walks.items()
        if not any(u != folder and (not u or folder.startswith(u + "/")) for u in unlimited)
    }


def stat_into(
    found: Scan,
    root: Path,
    path: str,
    globs: Sequence[str],
    ignore: Sequence[str],
    listings: dict[str, list[str]] | None = None,
) -> None:
    """Add ``path`` to ``found`` if it is a regular file the patterns select."""
    if path in found.files or ignored(path, ignore):
        return
    parent, _, name = path.rpartition("/")
    listings = {} if listings is None else listings
    try:
        info = os.stat(root / path)
        if parent not in listings:
            listings[parent] = os.listdir(root / parent)
        if name not in listings[parent]:  # a case-insensitive file system
            return
    except FileNotFoundError:
        return
    except OSError as exc:
        found.errors.append((path, exc.strerror or str(exc)))
        return
    if stat.S_ISREG(info.st_mode) and matches(path, globs):
        found.files[path] = Stat(info.st_size, info.st_mtime_ns)


def _walk(
    found: Scan, root: Path, start: str, depth: int, globs: Sequence[str], ignore: Sequence[str]
) -> None:
    select = any_regex(tuple(globs))
    skip = any_regex(tuple(ignore))
    assert select is not None
    chosen = _chosen(tuple(globs), tuple(ignore))
    regular = stat.S_ISREG
    out = found.files
    pending = [(start, 1)]
    while pending:
        folder, level = pending.pop()
        try:
            with os.scandir(root / folder if folder else root) as entries:
                listed = list(entries)
        except FileNotFoundError:
            continue
        except OSError as exc:
            found.unlisted.append(folder)
            found.errors.append((folder or ".", exc.strerror or str(exc)))
            continue
        prefix = f"{folder}/" if folder else ""
        deeper = depth < 0 or level < depth
        for entry in listed:
            path = prefix + entry.name
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_folder = False
            if is_folder:
                if deeper and not (
                    skip is not None and (skip.match(path) or skip.match(path + "/"))
                ):
                    pending.append((path, level + 1))
                continue
            wanted = chosen.get(path)
            if wanted is None:
                if len(chosen) > MAX_REMEMBERED:
                    chosen.clear()
                wanted = chosen[path] = select.match(path) is not None and not (
                    skip is not None and skip.match(path)
                )
            if not wanted:
                continue
            try:
                info = entry.stat()
            except FileNotFoundError:
                continue  # a dangling link, or a file gone since the listing
            except OSError as exc:
                found.errors.append((path, exc.strerror or str(exc)))
                continue
            if regular(info.st_mode):
                out[path] = Stat(info.st_size, info.st_mtime_ns)


@dataclass(frozen=True, slots=True)
class FileText:
    """A file as read: its stat before the read, when it was read, its hash and text.

    ``text`` is ``None`` with an ``error`` when the file cannot be indexed;
    ``gone`` when it vanished before it could be read.
    """

    path: str
    size: int
    mtime_ns: int
    read_ns: int
    sha256: str | None
    text: str | None
    error: str | None = None
    gone: bool = False
    readable: bool = True  # False: the bytes could not be read (keep what was indexed)


def read(root: Path, path: str) -> FileText:
    """Read a workspace file as UTF-8 text (a BOM is dropped, CRLF becomes LF).

    The stat is taken before reading, so a change while reading shows as a
    newer mtime at the next sync. Never raises for a file's own problems:
    they are in ``error``.
    """
    now = time.time_ns()
    try:
        with open(root / path, "rb") as handle:
            info = os.fstat(handle.fileno())
            data = handle.read()
    except FileNotFoundError:
        return FileText(path, 0, 0, now, None, None, "vanished while syncing", gone=True)
    except IsADirectoryError:
        return FileText(path, 0, 0, now, None, None, "is a folder", gone=True)
    except OSError as exc:
        message = exc.strerror or str(exc)
        return FileText(path, 0, 0, now, None, None, f"cannot read: {message}", readable=False)
    digest = hashlib.sha256(data).hexdigest()
    size, mtime = info.st_size, info.st_mtime_ns
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return FileText(
            path, size, mtime, now, digest, None,
            f"not valid UTF-8 (byte {exc.start}); re-encode it as UTF-8",
        )  # fmt: skip
    if "\x00" in text:
        return FileText(path, size, mtime, now, digest, None, "contains NUL bytes: not a text file")
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    return FileText(path, size, mtime, now, digest, text)


def racy(mtime_ns: int, read_ns: int) -> bool:
    """Whether a file was modified so shortly before it was read that a later change in
    the same mtime tick could go unnoticed: such a file is read again, not trusted."""
    return mtime_ns + RACY_NS > read_ns
