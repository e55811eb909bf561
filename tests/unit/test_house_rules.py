"""Structural rules of the package, checked on the source: no import cycle inside horovod_torus/ (module
level or call time), and no module writing the environment for another module to read (only Horovod's own
stall variables, which Horovod reads from the environment alone, and TensorFlow's defaults, in one place)."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "horovod_torus"

#: file -> the environment variables it may write (and why).
ALLOWED_WRITES = {
    "horovod_torus/tensorflow/runtime.py": {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",   # for Horovod itself
                                            "HOROVOD_STALL_CHECK_TIME_SECONDS"},
    "horovod_torus/tf_defaults.py": {"TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL"},   # TensorFlow's defaults
    "horovod_torus/ompi_rules.py": {"OMPI_MCA_coll_tuned_use_dynamic_rules",   # for Open MPI itself
                                    "OMPI_MCA_coll_tuned_dynamic_rules_filename",
                                    "HOROVOD_TORUS_OMPI_RULES_WORLD"},   # marks the two as ours
}


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path, modules: set) -> set:
    """horovod_torus modules that ``path`` imports anywhere (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found |= {n for n in names if n in modules}
    return found


def test_no_import_cycle_inside_the_package():
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: imports_of(p, set(files)) - {m} for m, p in files.items()}
    assert len(graph) > 30 and graph["horovod_torus.tensorflow.torus"] >= {"horovod_torus.phases"}
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for n in sorted(graph[m]):
            if n.startswith(m + "."):    # a package importing its own submodules is not a cycle
                continue
            if state.get(n) == "open" and not m.startswith(n + "."):
                cycles.append(stack[stack.index(n):] + [n] if n in stack else [m, n])
            elif n not in state:
                visit(n, stack + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, f"import cycles inside horovod_torus: {cycles}"


def environment_writes(path: pathlib.Path) -> set:
    """Names written with environ[NAME] = ..., environ.setdefault(NAME, ...), os.putenv(NAME, ...)."""
    tree = ast.parse(path.read_text())
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                 for t in n.targets if isinstance(t, ast.Name)}
    names = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t for t in node.targets if isinstance(t, ast.Subscript)]
        for t in targets:
            if "environ" in ast.unparse(t.value):
                key = ast.unparse(t.slice)
                names.add(constants.get(key, key.strip("'\"")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if (node.func.attr in ("setdefault", "update") and "environ" in owner) or node.func.attr == "putenv":
                names.add(ast.unparse(node.args[0]).strip("'\"") if node.args else "?")
    return names


def test_only_horovods_and_tensorflows_variables_are_written():
    written = {}
    for path in list(PACKAGE.rglob("*.py")) + list((ROOT / "keras_app").rglob("*.py")):
        names = environment_writes(path)
        if names:
            written[str(path.relative_to(ROOT))] = names
    assert "horovod_torus/tf_defaults.py" in written          # the scanner sees the writes that exist
    bad = {f: n - ALLOWED_WRITES.get(f, set()) for f, n in written.items() if n - ALLOWED_WRITES.get(f, set())}
    assert not bad, f"environment written for another module to read: {bad}"
