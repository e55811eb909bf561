"""Atomic file writes: a reader of the destination sees the old file or the whole new one, never a part.

Every function writes into a temporary file in the destination's directory (``.NAME.<random>.tmp``: a
hidden name, so glob patterns such as ``train-*`` never match it), flushes and fsyncs it, then renames it
over the destination with :func:`os.replace` (atomic on POSIX, as both lie on one file system). The
destination's directory is created when missing. On any failure (an error raised while writing, by the
caller's code inside :func:`open_atomic`, or by the rename) the temporary file is removed, the destination
is left as it was, and the error propagates unchanged (``OSError`` for file-system errors; ``TypeError`` /
``ValueError`` from :mod:`json` for an object it cannot encode).

The new file's permission bits are those :func:`open` would give (0o666 less the umask) unless ``mode`` is
given.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid

__all__ = ["open_atomic", "write_bytes_atomic", "write_text_atomic", "write_json_atomic", "copy_file_atomic",
           "save_figure_atomic"]


@contextlib.contextmanager
def open_atomic(path: str, *, binary: bool = False, mode: int | None = None, encoding: str = "utf-8"):
    """Context manager: a new file object (``binary``: bytes, else text in ``encoding``) whose content
    replaces ``path`` when the ``with`` block ends without an exception; an exception leaves ``path`` as it
    was and propagates. ``mode``: the new file's permission bits (e.g. ``0o755``)."""
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding=encoding)) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_bytes_atomic(path: str, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` by ``data`` (bytes), atomically. ``mode``: permission bits of the new file."""
    with open_atomic(path, binary=True, mode=mode) as fh:
        fh.write(data)


def write_text_atomic(path: str, text: str, *, mode: int | None = None, encoding: str = "utf-8") -> None:
    """Replace ``path`` by ``text`` (written as is, in ``encoding``), atomically."""
    with open_atomic(path, mode=mode, encoding=encoding) as fh:
        fh.write(text)


def write_json_atomic(path: str, obj, *, indent: int | None = 1, mode: int | None = None, **dumps_kwargs) -> None:
    """Replace ``path`` by ``json.dumps(obj, indent=indent, **dumps_kwargs)`` and a final newline, atomically
    (``indent=1``: the layout of the project's result files). The object is encoded before the file is
    opened, so an object json cannot encode (TypeError / ValueError) leaves no trace."""
    write_text_atomic(path, json.dumps(obj, indent=indent, **dumps_kwargs) + "\n", mode=mode)


def copy_file_atomic(src: str, dst: str, *, mode: int | None = None) -> None:
    """Replace ``dst`` by a copy of the bytes of ``src`` (not its permission bits or times), atomically.
    Raises FileNotFoundError (and leaves ``dst`` as it was) when ``src`` does not exist."""
    with open(src, "rb") as source, open_atomic(dst, binary=True, mode=mode) as fh:
        shutil.copyfileobj(source, fh, 1 << 20)


def save_figure_atomic(fig, path: str, **savefig_kwargs) -> None:
    """``fig.savefig`` (a matplotlib figure) into ``path``, atomically; the image format is the path's
    extension (``png`` without one) unless ``format`` is given."""
    savefig_kwargs.setdefault("format", os.path.splitext(path)[1].lstrip(".").lower() or "png")
    with open_atomic(path, binary=True) as fh:
        fig.savefig(fh, **savefig_kwargs)
