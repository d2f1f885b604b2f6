"""The house's shape, read from the code's own imports (docs/architecture.md draws it): packages in layers that
import only downward, no import cycle, nothing on the daemon's side that loads torch, a small top, small modules."""

import ast
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

# Bottom to top: each package imports only from its own layer and the ones below.
LAYERS = ["spec", "hardware", "models", "protocol", "measure", "engines", "loadgen", "timed", "worker", "supervisor",
          "telemetry", "store", "daemon", "admission", "report", "api", "cli"]
BASE = {"benchd", "benchd.heap", "benchd.stopping"}  # the top's own small modules, below every layer
# Modules that run only in a worker process: they may import torch (where any module of a package does, its line
# says which). Everything else is the daemon's side too, and so is each engine's declaration (its folder's spec.py,
# which the daemon imports to know the engine: spec/engines.py).
WORKER_SIDE = ("benchd.models.loading", "benchd.models.convert", "benchd.models.quantize", "benchd.models.tokenizer",
               "benchd.engines.", "benchd.loadgen.", "benchd.timed", "benchd.worker.")


def worker_side(module: str) -> bool:
    return module.startswith(WORKER_SIDE) and not (module.startswith("benchd.engines.") and module.endswith(".spec"))
HEAVY = {"torch", "transformers", "torchao", "bitsandbytes"}
MAX_LINES = 400
MAX_TOP_MODULES = 10


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in (SRC / "benchd").rglob("*.py") if "migrations" not in p.parts}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


@cache
def imports(module: str) -> tuple[frozenset[str], frozenset[str]]:
    """(module-level imports, all imports) of benchd modules and third-party roots, TYPE_CHECKING blocks aside."""
    tree = ast.parse(MODULES[module].read_text())
    is_package = MODULES[module].name == "__init__.py"
    top: set[str] = set()
    every: set[str] = set()

    def targets(node) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - node.level + 1]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        return [f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in MODULES else prefix for alias in node.names]

    def visit(node, module_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for orelse in child.orelse:
                    visit(orelse, module_level)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for name in targets(child):
                    resolved = resolve(name)
                    every.add(resolved)
                    if module_level:
                        top.add(resolved)
            nested = module_level and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                                               ast.ClassDef))
            visit(child, nested or (module_level and isinstance(child, ast.ClassDef)))

    visit(tree, True)
    return frozenset(top), frozenset(every)


def resolve(name: str) -> str:
    """A benchd module's own name (an imported attribute resolves to its module), or a third-party root."""
    if not name.startswith("benchd"):
        return name.split(".")[0]
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and module not in BASE else None


def test_packages_import_only_their_own_layer_and_those_below():
    rank = {name: index for index, name in enumerate(LAYERS)}
    assert {package(m) for m in MODULES} - {None} == set(LAYERS), "a package missing from LAYERS, or gone"
    upward = []
    for module in MODULES:
        for imported in imports(module)[1]:
            if imported in MODULES and package(module) and package(imported):
                if rank[package(imported)] > rank[package(module)]:
                    upward.append(f"{module} → {imported}")
            elif imported in MODULES and module in BASE and package(imported):
                upward.append(f"{module} → {imported}")
    assert not upward, "\n".join(upward)


def test_no_module_imports_itself_through_others():
    graph = {m: {i for i in imports(m)[1] if i in MODULES and i != m} for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in graph:
        if v not in index:
            connect(v)
    assert not cycles, cycles


def test_nothing_on_the_daemons_side_loads_torch():
    """Statically: no module outside WORKER_SIDE reaches torch through module-level imports. Then for real: the
    daemon's app, the CLI and the report pages import without torch."""

    @cache
    def heavy(module: str) -> str | None:
        """The chain of module-level imports by which a module loads torch (or another heavy root); None if none."""
        top = imports(module)[0]
        if top & HEAVY:
            return f"{module} imports {sorted(top & HEAVY)[0]}"
        for imported in sorted(i for i in top if i in MODULES):
            if chain := heavy(imported):
                return f"{module} → {chain}"
        return None

    daemon_side = [m for m in MODULES if not worker_side(m)]
    assert any(m.endswith(".spec") and m.startswith("benchd.engines.") for m in daemon_side)
    assert not [chain for m in daemon_side if (chain := heavy(m))]
    check = ("import sys; import benchd.api, benchd.cli.main, benchd.daemon.service, benchd.report.outputs; "
             "from benchd.spec import engines; engines(); "
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_top_is_small_and_every_module_is_short():
    top = sorted(p.name for p in (SRC / "benchd").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_every_name_imported_from_benchd_is_there():
    """After a module moves, an import of it that only runs in a function (or in a bench script) fails only when
    called: every `from benchd… import name` in src/, tests/ and bench/ is checked here, in a process of its own."""
    check = """
import ast, importlib, sys
from pathlib import Path
missing = []
for root in ("src", "tests", "bench"):
    for path in sorted(Path(root).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("benchd"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    if not hasattr(module, alias.name):
                        try:
                            importlib.import_module(f"{node.module}.{alias.name}")
                        except ImportError:
                            missing.append(f"{path}:{node.lineno}: {node.module}.{alias.name}")
print("\\n".join(missing))
"""
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONPATH": f"{SRC}:{ROOT / 'bench'}:{ROOT}"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "", done.stdout


def test_no_code_outside_engines_names_an_engine():
    """What an engine is, the rest of benchd reads from its record and its spec (spec/engines.py): outside
    benchd/engines no module compares a spec's engine with a name, nor imports one engine's folder."""
    names = {path.name for path in (SRC / "benchd" / "engines").iterdir() if (path / "spec.py").is_file()}
    assert {"transformers", "static", "openai"} <= names
    found = []
    for module, path in MODULES.items():
        if module.startswith("benchd.engines"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                values = [node.left, *node.comparators]
                values += [e for v in values if isinstance(v, ast.Tuple | ast.List | ast.Set) for e in v.elts]
                if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                    found.append(f"{module}:{node.lineno} compares with an engine's name")
        found += [f"{module} imports {i}" for i in imports(module)[1] if i.startswith("benchd.engines.")
                  and i.split(".")[2] in names]
    assert not found, "\n".join(found)


def test_only_telemetry_touches_prometheus_and_opentelemetry():
    """Series, spans and GenAI metrics are telemetry/'s: elsewhere a module calls telemetry's methods (a run's
    outcome recorded, an error counted), never a family's .labels(), nor imports their libraries (but the text
    format's parser, which reads a server's page: measure/server_metrics.py)."""
    found = []
    for module, path in MODULES.items():
        if module.startswith("benchd.telemetry"):
            continue
        tree = ast.parse(path.read_text())
        found += [f"{module}:{node.lineno} calls .labels()" for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and isinstance(node.func, ast.Attribute) and node.func.attr == "labels"]
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{module}:{node.lineno} imports {name}" for name in names
                      if name.split(".")[0] in ("prometheus_client", "opentelemetry")
                      and name != "prometheus_client.parser"]
    assert not found, "\n".join(found)
