"""The house's import rules, enforced: layers, forbidden pairs, no circles, where heavy libraries may go.

Every product .py file under the top-level packages is parsed with `ast`; every import statement counts,
including lazy imports inside functions and imports under `if TYPE_CHECKING:` (a type-only dependency on
a higher layer is still a dependency that points the wrong way). tests/ is not checked.

The checker is plain functions (`collect_imports`, `layer_of`, `order_violations`, `forbidden_violations`,
`third_party_violations`, `cycles`) so the real-tree tests and the synthetic tree that proves the checker
bites call the same code.

The last test is the Lambda handler's cold-start import budget, measured in fresh interpreters.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "merge", "lambda_worker", "router", "policy", "infra", "bench")
SKIP_DIRS = frozenset({"build", "dist", "__pycache__"})  # build/ holds copies made by pip, not product code


@dataclass(frozen=True)
class Layer:
    prefix: str
    reason: str


# Lowest first: a module may import its own layer or a lower one. The most specific prefix decides a
# module's layer, so `core` is the kernel: every core.* module except core.spark, core.drill and core.cli.
LAYERS: tuple[Layer, ...] = (
    Layer("core", "kernel: query API, plan, expr, rewrite, nexmark, wire, results, errors: needs nothing"),
    Layer("merge", "folds partial results into final ones: builds on the kernel's plan and types only"),
    Layer("lambda_worker", "the Lambda function: runs offloaded programs; cold-starts on kernel+merge only"),
    Layer("router", "VM agent, fleet, source router: ship batches to workers, run lambda_worker locally"),
    Layer("policy", "decides when and how much to offload, from observations; simulates it at scale"),
    Layer("core.spark", "the Spark lowering and runner: wires router, merge and policy into a streaming job"),
    Layer("core.drill", "the drill: runs Spark jobs through bursts and reports on them"),
    Layer("infra", "deploying the Lambda side (package, stack, status, LocalStack): kernel records only"),
    Layer("core.cli", "the sponge command: the top of the product (finds infra's commands by entry point)"),
    Layer("bench", "benchmarks: may use anything in the product"),
)

# Explicit rules on top of the order: (importer prefix, imported prefix, why).
FORBIDDEN: tuple[tuple[str, str, str], ...] = (
    ("core", "infra", "the CLI finds infra's commands by the sponge.commands entry point, not by import"),
    ("lambda_worker", "router", "the worker must not depend on the agent that dispatches to it"),
    ("policy", "core.drill", "the policy is what the drill exercises, never the other way round"),
    ("merge", "core.spark", "the fold code is engine-neutral; Spark lowering builds on it"),
)

# Third-party packages kept to some modules: top-level import name -> the module prefixes that may import it.
CONFINED: dict[str, tuple[str, ...]] = {
    "pyspark": ("core.spark", "merge.spark", "bench"),
    "boto3": ("infra", "router.invokers.lambda_api", "core.kinesis"),
    "botocore": ("infra", "router.invokers.lambda_api", "core.kinesis"),
}


@dataclass(frozen=True)
class Import:
    path: str  # relative to the tree's root, for messages
    line: int
    source: str  # the statement, unparsed
    importer: str  # the module doing the import
    name: str  # the absolute dotted name imported (for `from X import n`: X.n if that is a module, else X)
    target: str | None  # the product module it resolves to, or None for a third-party/stdlib import

    def where(self) -> str:
        return f"{self.path}:{self.line}: `{self.source}`"


def is_under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str, layers: tuple[Layer, ...] = LAYERS) -> int:
    """Index in `layers` of the most specific prefix that contains `module`."""
    matches = [(len(layer.prefix), i) for i, layer in enumerate(layers) if is_under(module, layer.prefix)]
    if not matches:
        raise ValueError(f"{module} is in no layer")
    return max(matches)[1]


def describe(index: int, layers: tuple[Layer, ...] = LAYERS) -> str:
    return f"{layers[index].prefix} (layer {index})"


def product_files(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the packages."""
    modules: dict[str, Path] = {}
    for package in packages:
        for dirpath, dirnames, filenames in os.walk(root / package):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
            for filename in sorted(filenames):
                if not filename.endswith(".py"):
                    continue
                parts = list((Path(dirpath) / filename).relative_to(root).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                modules[".".join(parts)] = Path(dirpath) / filename
    return modules


def _resolve(name: str, modules: set[str], packages: tuple[str, ...]) -> str | None:
    """The product module `name` lands in: itself, or its longest prefix that is a module."""
    if name.partition(".")[0] not in packages:
        return None
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def collect_imports(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    """Every import statement of every product file, resolved to absolute names and product modules."""
    files = product_files(root, packages)
    modules = set(files)
    found: list[Import] = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        package = module if is_package else module.rpartition(".")[0]
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".") if package else []
                    base_parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                    base = ".".join([*base_parts, *([node.module] if node.module else [])])
                else:
                    base = node.module or ""
                for alias in node.names:
                    candidate = f"{base}.{alias.name}" if base else alias.name
                    names.append(candidate if candidate in modules else base)
            else:
                continue
            source = ast.unparse(node)
            for name in dict.fromkeys(names):
                target = _resolve(name, modules, packages)
                found.append(Import(rel, node.lineno, source, module, name, target))
    return sorted(found, key=lambda i: (i.path, i.line, i.name))


def order_violations(imports: list[Import], layers: tuple[Layer, ...] = LAYERS) -> list[str]:
    out = []
    for imp in imports:
        if imp.target is None:
            continue
        mine, theirs = layer_of(imp.importer, layers), layer_of(imp.target, layers)
        if theirs > mine:
            out.append(
                f"{imp.where()}: {describe(mine, layers)} imports {imp.target} in {describe(theirs, layers)} "
                f"[{layers[theirs].prefix}: {layers[theirs].reason}]"
            )
    return out


def forbidden_violations(
    imports: list[Import],
    rules: tuple[tuple[str, str, str], ...] = FORBIDDEN,
    layers: tuple[Layer, ...] = LAYERS,
) -> list[str]:
    out = []
    for imp in imports:
        for importer, imported, why in rules:
            if imp.target is not None and is_under(imp.importer, importer) and is_under(imp.target, imported):
                out.append(
                    f"{imp.where()}: {imp.importer} in {describe(layer_of(imp.importer, layers), layers)} "
                    f"imports {imp.target} in {describe(layer_of(imp.target, layers), layers)}, "
                    f"but {importer}.* never imports {imported}.*: {why}"
                )
    return out


def third_party_violations(
    imports: list[Import], confined: dict[str, tuple[str, ...]] = CONFINED
) -> list[str]:
    out = []
    for imp in imports:
        top = imp.name.partition(".")[0]
        if (
            imp.target is None
            and top in confined
            and not any(is_under(imp.importer, p) for p in confined[top])
        ):
            out.append(f"{imp.where()}: {top} may be imported only under {', '.join(confined[top])}")
    return out


def cycles(imports: list[Import]) -> list[str]:
    """Each import circle between product modules (a strongly connected component), with the imports in it."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.importer, set())
        if imp.target is not None and imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
            graph.setdefault(imp.target, set())

    # Tarjan's algorithm, iterative so a deep chain cannot hit the recursion limit.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    out = []
    for component in sorted(components):
        members = set(component)
        edges = [
            f"    {imp.where()} -> {imp.target}"
            for imp in imports
            if imp.importer in members and imp.target in members and imp.target != imp.importer
        ]
        out.append(f"import circle between {', '.join(component)}:\n" + "\n".join(edges))
    return out


# --- the real tree ---------------------------------------------------------------------------------


@functools.cache
def real_imports() -> list[Import]:
    return collect_imports(ROOT)


def _report(title: str, problems: list[str]) -> str:
    return f"{len(problems)} {title}:\n" + "\n".join(problems)


def test_every_top_level_package_is_checked() -> None:
    found = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert found == set(PACKAGES), "a top-level package the layer table does not know (add it to LAYERS)"


def test_every_product_module_has_a_layer() -> None:
    imports = real_imports()
    modules = product_files(ROOT)
    assert len(modules) > 50 and {imp.importer for imp in imports} <= set(modules)
    for module in modules:
        layer_of(module)
    assert LAYERS[layer_of("core.wire.protocol")].prefix == "core"
    assert LAYERS[layer_of("core.spark.lower")].prefix == "core.spark"


def test_imports_follow_the_layer_order() -> None:
    imports = real_imports()
    problems = order_violations(imports)
    assert not problems, _report("imports of a higher layer", problems)


def test_forbidden_imports() -> None:
    imports = real_imports()
    problems = forbidden_violations(imports)
    assert not problems, _report("forbidden imports", problems)


def test_no_import_circles() -> None:
    imports = real_imports()
    problems = cycles(imports)
    assert not problems, _report("import circles", problems)


def test_heavy_third_party_packages_stay_where_they_belong() -> None:
    imports = real_imports()
    problems = third_party_violations(imports)
    assert not problems, _report("confined imports outside their place", problems)


# --- the checker bites ------------------------------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_reports_each_kind_of_violation(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/spark/__init__.py": "",
            "core/spark/lower.py": "x = 1\n",
            "core/plan.py": "def lower():\n    from core.spark.lower import x\n    return x\n",
            "core/query.py": "import pyspark.sql\n",
            "core/cli/__init__.py": "",
            "core/cli/main.py": "from infra import cli\n",
            "infra/__init__.py": "",
            "infra/cli.py": "import boto3\n",
            "lambda_worker/__init__.py": "",
            "lambda_worker/x.py": "import router.client\n",
            "router/__init__.py": "",
            "router/client.py": "from botocore.config import Config\n",
            # A circle through a relative import and the `from pkg import module` form.
            "merge/__init__.py": "",
            "merge/a.py": "from . import b\n",
            "merge/b.py": "from merge.a import thing\n",
            "infra/build/lib/copy.py": "import pyspark\n",
        },
    )
    imports = collect_imports(tmp_path)

    order = order_violations(imports)
    assert any(
        "core/plan.py:2: `from core.spark.lower import x`" in p
        and "core (layer 0)" in p
        and "core.spark (layer 5)" in p
        for p in order
    ), order
    assert any(
        "lambda_worker/x.py:1" in p and "lambda_worker (layer 2)" in p and "router (layer 3)" in p
        for p in order
    )
    assert len(order) == 2, order  # core.cli -> infra is upward-legal; only the explicit rule catches it

    forbidden = forbidden_violations(imports)
    assert any(p.startswith("core/cli/main.py:1: `from infra import cli`") for p in forbidden), forbidden
    assert any(p.startswith("lambda_worker/x.py:1: `import router.client`") for p in forbidden), forbidden
    assert len(forbidden) == 2, forbidden  # core.plan -> core.spark is the order's business, not a pair rule

    circles = cycles(imports)
    assert circles and circles[0].startswith("import circle between merge.a, merge.b:"), circles
    assert "merge/a.py:1: `from . import b` -> merge.b" in circles[0]
    assert "merge/b.py:1: `from merge.a import thing` -> merge.a" in circles[0]

    third = third_party_violations(imports)
    assert any(p.startswith("core/query.py:1: `import pyspark.sql`: pyspark") for p in third), third
    assert any(p.startswith("router/client.py:1") and "botocore" in p for p in third), third
    assert not any(p.startswith("infra/") for p in third)  # boto3 in infra/ is allowed; build/ is skipped
    assert len(third) == 2, third


def test_relative_imports_resolve_to_modules(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "router/__init__.py": "",
            "router/invokers/__init__.py": "from .base import Invoker\nfrom .. import stats\n",
            "router/invokers/base.py": "from ..stats import Stats\nfrom . import embedded\n",
            "router/invokers/embedded.py": "",
            "router/stats.py": "",
        },
    )
    got = {(imp.importer, imp.source): imp.target for imp in collect_imports(tmp_path)}
    assert got == {
        ("router.invokers", "from .base import Invoker"): "router.invokers.base",
        ("router.invokers", "from .. import stats"): "router.stats",
        ("router.invokers.base", "from ..stats import Stats"): "router.stats",
        ("router.invokers.base", "from . import embedded"): "router.invokers.embedded",
    }


# --- the Lambda handler's cold start ------------------------------------------------------------------

# An import-time budget, a bounded wait with a generous margin: best of RUNS fresh-interpreter imports of
# lambda_worker.handler (time.perf_counter around the import, interpreter start-up excluded). Measured on
# this 2-core machine (load average 2-4 from other runs): best of 5 was 31-48 ms in four rounds (single
# runs up to ~105 ms), ~26 ms of it Powertools. The budget is 5x the slowest best: room for a slower
# laptop or a loaded CI runner, yet it still fails when the X-Ray SDK (~430 ms) or polars and pyarrow
# together (~400 ms) sneak in. Which heavy modules stay out is checked by name below and in
# tests/lambda_worker/test_handler.py, so the budget need not be tight.
HANDLER_IMPORT_BUDGET_S = 0.25
RUNS = 5
KEPT_OUT_OF_THE_HANDLER = ("pyspark", "boto3", "duckdb", "matplotlib")

_MEASURE = (
    "import json, sys, time\n"
    "t = time.perf_counter()\n"
    "import lambda_worker.handler\n"
    "dt = time.perf_counter() - t\n"
    f"loaded = sorted(m for m in {KEPT_OUT_OF_THE_HANDLER!r} if m in sys.modules)\n"
    "print(json.dumps({'s': dt, 'loaded': loaded}))\n"
)


def test_the_handler_imports_within_its_cold_start_budget() -> None:
    # Like a worker's environment: no Lambda task root, tracing off (the embedded fleet sets it).
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "POWERTOOLS_TRACE_DISABLED": "true"}
    runs = []
    for _ in range(RUNS):
        p = subprocess.run(
            [sys.executable, "-c", _MEASURE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert p.returncode == 0, p.stderr[-2000:]
        runs.append(json.loads(p.stdout))
    assert all(r["loaded"] == [] for r in runs), f"importing the handler loaded {runs[0]['loaded']}"
    best = min(r["s"] for r in runs)
    assert best < HANDLER_IMPORT_BUDGET_S, (
        f"import lambda_worker.handler took {best * 1000:.0f} ms at best of {RUNS} "
        f"(budget {HANDLER_IMPORT_BUDGET_S * 1000:.0f} ms); see -X importtime for what grew"
    )
