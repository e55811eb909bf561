"""horovod_torus.atomic: writes replace the file whole or not at all, leave no temporary file, and are the
only os.replace in the package, the app and the tools."""
import ast
import glob
import json
import os
import stat

import pytest

from horovod_torus.atomic import (
    copy_file_atomic, open_atomic, save_figure_atomic, write_bytes_atomic, write_json_atomic, write_text_atomic,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_writes_create_the_directory_and_replace_the_file(tmp_path):
    path = tmp_path / "sub" / "doc.json"
    write_json_atomic(str(path), {"b": 1, "a": [1, 2]})
    assert path.read_text() == json.dumps({"b": 1, "a": [1, 2]}, indent=1) + "\n"
    write_json_atomic(str(path), {"b": 2, "a": 1}, indent=2, sort_keys=True)
    assert path.read_text() == '{\n  "a": 1,\n  "b": 2\n}\n'
    write_text_atomic(str(path), "text")
    assert path.read_text() == "text"
    write_bytes_atomic(str(path), b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert os.listdir(path.parent) == ["doc.json"]


def test_mode_sets_the_permission_bits(tmp_path):
    path = tmp_path / "run.sh"
    write_text_atomic(str(path), "#!/bin/sh\n", mode=0o755)
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    write_text_atomic(str(path), "#!/bin/sh\n", mode=0o644)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "doc.json"
    write_json_atomic(str(path), {"old": True})
    old = path.read_text()
    with pytest.raises(RuntimeError, match="midway"):
        with open_atomic(str(path)) as fh:
            fh.write("partial")
            raise RuntimeError("midway")
    with pytest.raises(TypeError):
        write_bytes_atomic(str(path), "not bytes")
    with pytest.raises(TypeError):
        write_json_atomic(str(path), {"x": object()})
    assert path.read_text() == old
    assert os.listdir(tmp_path) == ["doc.json"]
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError):                      # the rename itself fails: a directory is in the way
        write_text_atomic(str(tmp_path / "dir"), "x")
    assert sorted(os.listdir(tmp_path)) == ["dir", "doc.json"] and os.listdir(tmp_path / "dir") == []


def test_copy_file_copies_the_bytes_or_nothing(tmp_path):
    src, dst = tmp_path / "train-00000", tmp_path / "out" / "train-00000"
    src.write_bytes(os.urandom(3 << 20))
    copy_file_atomic(str(src), str(dst))
    assert dst.read_bytes() == src.read_bytes()
    with pytest.raises(FileNotFoundError):
        copy_file_atomic(str(tmp_path / "missing"), str(dst))
    assert dst.read_bytes() == src.read_bytes() and os.listdir(dst.parent) == ["train-00000"]
    assert glob.glob(str(dst.parent / "train-*")) == [str(dst)]


def test_save_figure_takes_the_format_from_the_extension(tmp_path):
    class Figure:
        def savefig(self, fh, format, dpi):
            fh.write(f"{format} {dpi}".encode())

    save_figure_atomic(Figure(), str(tmp_path / "a.png"), dpi=90)
    save_figure_atomic(Figure(), str(tmp_path / "b.SVG"), dpi=72)
    assert (tmp_path / "a.png").read_bytes() == b"png 90" and (tmp_path / "b.SVG").read_bytes() == b"svg 72"


def _os_replace_calls(path):
    tree = ast.parse(open(path).read(), path)
    names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "os"
             for a in n.names if a.name == "replace"}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and (
        (isinstance(n.func, ast.Attribute) and n.func.attr == "replace" and isinstance(n.func.value, ast.Name)
         and n.func.value.id == "os") or (isinstance(n.func, ast.Name) and n.func.id in names))]


def test_atomic_is_the_only_os_replace_in_the_source_tree():
    found = {}
    for package in ("horovod_torus", "keras_app", "tools"):
        for path in glob.glob(os.path.join(ROOT, package, "**", "*.py"), recursive=True):
            lines = _os_replace_calls(path)
            if lines:
                found[os.path.relpath(path, ROOT)] = lines
    assert list(found) == [os.path.join("horovod_torus", "atomic.py")] and len(found[list(found)[0]]) == 1, found
