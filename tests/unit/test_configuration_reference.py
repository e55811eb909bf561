"""docs/configuration.md matches the code: every environment variable the package, the app, the tools and
the job scripts read (or set) is listed there, and so is every parameter of ``init`` and of the numpy API.

The scan is static (``ast`` for Python, a regular expression for the shell scripts): nothing is imported
but the two pure modules that hold variable names in tables (:mod:`horovod_torus.settings`,
:mod:`horovod_torus.launch`).
"""
from __future__ import annotations

import ast
import pathlib
import re

from horovod_torus import launch, settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"
PYTHON_TREES = ("horovod_torus", "keras_app", "tools", "examples")
SCRIPTS = ROOT / "mpi_scripts"

#: ``${NAME:-x}``, ``${NAME:=x}``, ``${NAME-x}``, ``${NAME=x}``, ``${NAME:?x}``, ``${NAME?x}``, ``${NAME:+x}``
_SHELL_READ = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?[-=?+])")


def _is_environ(node: ast.AST, aliases: set[str]) -> bool:
    """``environ`` / ``os.environ`` / any ``<x>.environ``, or a name bound to a copy of it (``aliases``)."""
    if isinstance(node, ast.Name):
        return node.id == "environ" or node.id in aliases
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _copies_environ(value: ast.AST) -> bool:
    """``dict(os.environ ...)`` or ``{**os.environ, ...}``: an environment handed to child processes."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict":
        return any(_is_environ(n, set()) for a in value.args for n in ast.walk(a))
    if isinstance(value, ast.Dict):
        return any(k is None and _is_environ(v, set()) for k, v in zip(value.keys, value.values))
    return False


def python_environment_names(source: str) -> dict[str, list[int]]:
    """Variable name -> line numbers of every environment access with a literal name in ``source``:
    ``environ[...]`` (read or write), ``environ.get/setdefault/pop(...)``, ``[os.]getenv(...)``,
    ``"NAME" in environ``, keys of ``{**os.environ, "NAME": ...}``; "environ" is any name or attribute so
    called, or a name assigned ``dict(os.environ)``. A module-level string constant whose name ends in
    ``_ENV`` or ``_VAR`` counts as a literal where it is used as the key."""
    tree = ast.parse(source)
    constants = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for t in node.targets if isinstance(t, ast.Name) and t.id.endswith(("_ENV", "_VAR"))}
    aliases = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and _copies_environ(node.value)
               for t in node.targets if isinstance(t, ast.Name)}

    def literal(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    found: dict[str, list[int]] = {}
    for node in ast.walk(tree):
        keys = []
        if isinstance(node, ast.Subscript) and _is_environ(node.value, aliases):
            keys = [node.slice]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            method = isinstance(func, ast.Attribute) and func.attr in ("get", "setdefault", "pop")
            getenv = (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) == "getenv"
            if getenv or (method and _is_environ(func.value, aliases)):
                keys = [node.args[0]]
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            keys = [node.left] if _is_environ(node.comparators[0], aliases) else []
        elif isinstance(node, ast.Dict) and _copies_environ(node):
            keys = [k for k in node.keys if k is not None]
        for key in keys:
            name = literal(key)
            if name:
                found.setdefault(name, []).append(node.lineno)
    return found


def shell_environment_names(text: str) -> dict[str, list[int]]:
    """Variable name -> line numbers of every ``${NAME:-...}``-style read (upper-case names) in ``text``."""
    found: dict[str, list[int]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        for name in _SHELL_READ.findall(line):
            found.setdefault(name, []).append(number)
    return found


def scan() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(Python names, shell names), each name -> ``["path:line", ...]`` where it is read."""
    python: dict[str, list[str]] = {}
    for tree in PYTHON_TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            for name, lines in python_environment_names(path.read_text()).items():
                python.setdefault(name, []).extend(f"{path.relative_to(ROOT)}:{n}" for n in lines)
    for where, table in (("horovod_torus/settings.py ENVIRONMENT", settings.ENVIRONMENT),
                         ("horovod_torus/launch.py _VARIABLES", launch._VARIABLES)):
        for name in (n for names in table.values() for n in names):  # read by name from a table
            python.setdefault(name, []).append(where)
    shell: dict[str, list[str]] = {}
    for path in sorted(SCRIPTS.glob("*.sh")):
        for name, lines in shell_environment_names(path.read_text()).items():
            shell.setdefault(name, []).extend(f"{path.relative_to(ROOT)}:{n}" for n in lines)
    return python, shell


def parameters(path: str, qualname: str) -> list[str]:
    """Parameter names of function ``qualname`` (``"f"`` or ``"Class.f"``) in ``path``, from its source
    (``**kwargs`` as ``**kwargs``; ``self``/``cls`` left out)."""
    body = ast.parse((ROOT / path).read_text()).body
    for part in qualname.split("."):
        node = next(n for n in body if getattr(n, "name", None) == part)
        body = node.body
    a = node.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
    return names + ([f"**{a.kwarg.arg}"] if a.kwarg else [])


def _missing(names, page: str) -> list[str]:
    return sorted(n for n in names if f"`{n}`" not in page)


def test_scanner_sees_every_pattern():
    source = '''
import os
from os import environ, getenv
KEY_VAR = "V_CONST"
os.environ.get("V_GET"); os.environ["V_SUB"]; environ.get("V_BARE"); getenv("V_GETENV")
os.getenv("V_OSGETENV", "1"); x = "V_IN" in os.environ; y = "V_NOTIN" not in environ
os.environ.setdefault("V_SETDEFAULT", "1"); environ.pop("V_POP", None); os.environ["V_WRITE"] = "1"
def f(environ):
    return environ[KEY_VAR], environ.get(name), config.get("NOT_ENV"), "NOT_IN" in options
env = dict(os.environ); env["V_CHILD"] = "1"; env.setdefault("V_CHILD_DEFAULT", "2")
child = {**os.environ, "V_DICT": "1"}; other = {"NOT_DICT": 1}
'''
    assert set(python_environment_names(source)) == {
        "V_CONST", "V_GET", "V_SUB", "V_BARE", "V_GETENV", "V_OSGETENV", "V_IN", "V_NOTIN", "V_SETDEFAULT",
        "V_POP", "V_WRITE", "V_CHILD", "V_CHILD_DEFAULT", "V_DICT"}
    script = 'A=${S_DASH:-1} B=${S_EQ:=x} ${S_PLAIN-y} ${S_NEED:?unset} ${S_PLUS:+z} ${1:?usage} ${!v:-} ${lower:-x}'
    assert set(shell_environment_names(script)) == {"S_DASH", "S_EQ", "S_PLAIN", "S_NEED", "S_PLUS"}


def test_scan_finds_the_known_variables():
    python, shell = scan()
    assert {"HOROVOD_TORUS_GRID", "HOROVOD_TORUS_TRANSPORT", "HOROVOD_TORUS_BACKEND", "HOROVOD_TORUS_MIN_BYTES",
            "HOROVOD_TORUS_COLUMN_RING", "HOROVOD_TORUS_COLUMN_ALGORITHM", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
            "HOROVOD_STALL_CHECK_TIME_SECONDS",
            "OMPI_COMM_WORLD_RANK", "HOROVOD_GLOO_RENDEZVOUS_PORT", "TF_ENABLE_ONEDNN_OPTS",
            "TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES", "HOROVOD_TORUS_CLUSTER_DIR"} <= set(python)
    assert {"NP", "GRID", "DRY_RUN", "HOSTFILE", "NPERNODE", "PYTHON", "MPI_EXTRA"} <= set(shell)


def test_page_lists_every_environment_variable():
    page = PAGE.read_text()
    problems = [f"  {name}: read at {', '.join(found[name])}" for found in scan()
                for name in _missing(found, page)]
    assert not problems, ("docs/configuration.md lacks these environment variables (add each as `NAME`, "
                          "with its meaning):\n" + "\n".join(problems))


def test_page_lists_every_parameter():
    page = PAGE.read_text()
    for path, function in (("horovod_torus/tensorflow/runtime.py", "init"),
                           ("horovod_torus/mpi.py", "TorusComm.create"),
                           ("horovod_torus/mpi.py", "torus_allreduce")):
        names = parameters(path, function)
        assert "grid" in names
        missing = _missing(names, page)
        assert not missing, f"docs/configuration.md lacks {function}'s parameter(s) {missing} ({path})"
