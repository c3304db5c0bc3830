"""File helpers of the readers and the writer: a whole file in owned memory, a JSON object
file, an atomic write.

No rlxc imports: :mod:`rlxc.gguf`, :mod:`rlxc.safetensors`, the folder loader and the tokenizer use them.
"""

from __future__ import annotations

import json
import mmap as _mmap
import os
import stat as _stat
import tempfile
from typing import Any, BinaryIO, Callable

__all__ = ["read_owned", "read_json_object", "write_atomically"]


def read_owned(path: str, size: int) -> _mmap.mmap:
    """The first ``size`` bytes of a file in an anonymous (page-aligned, owned) mapping: what the
    file becomes afterwards (truncated, overwritten) no longer reaches what was read."""
    buf = _mmap.mmap(-1, size)
    view, got = memoryview(buf), 0
    try:
        with open(path, "rb", buffering=0) as f:
            while got < size:
                n = f.readinto(view[got:])
                if not n:
                    raise ValueError(f"{path}: the file shrank while it was read ({got} of {size} bytes)")
                got += n
    finally:
        view.release()
    return buf


def read_json_object(path: str, missing_ok: bool = False) -> dict[str, Any]:
    """A JSON file that must hold an object ({} for an absent file with ``missing_ok``); invalid
    JSON, bad UTF-8, nesting too deep or another document raise ValueError naming the file."""
    if missing_ok and not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: nested too deep
        raise ValueError(f"{path}: not valid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path}: not a JSON object ({type(d).__name__})")
    return d


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:  # pragma: no cover - not Linux
        pass
    mask = os.umask(0o022)  # pragma: no cover - (racy with other threads: the fallback only)
    os.umask(mask)  # pragma: no cover
    return mask  # pragma: no cover


def write_atomically(path: str | os.PathLike[str], body: Callable[[BinaryIO], None]) -> None:
    """Write a file through ``body(f)`` (a binary file object) and put it at ``path`` at once.

    The data goes to a new private file in ``path``'s directory (``tempfile.mkstemp``: a random
    name created with O_EXCL, so no symlink or existing file is followed), which is renamed over
    ``path`` once complete: readers see the old file or the new one, never a partial one, and a
    model memory-mapping the old file keeps it. On any failure the temporary file is removed and
    ``path`` is left as it was. The file gets the permissions of the file it replaces, else
    those of a new file (0o666 less the umask); a symlink at ``path`` is replaced, not followed.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        st = os.lstat(path)
        mode = st.st_mode & 0o7777 if _stat.S_ISREG(st.st_mode) else 0o666 & ~_umask()
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            body(f)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:  # pragma: no cover
            pass
        raise
