"""The core package stays framework-free: importing it (and its stores and tasks) never imports Django,
and it names no class of the Django app, which plugs its ``django://`` scheme in through the registry. The packages
keep their shape: no import cycle, each layer of ``mutexcron`` importing only its own and those below it, short
parameter lists, small modules, and docs/architecture.md naming every module."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "mutexcron"


def python_prints(code: str) -> str:
    """What ``code`` prints in a fresh interpreter (nothing imported yet, nothing registered by hand)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_core_does_not_import_django() -> None:
    code = (  # listing the store schemes reads the entry points (mutexcron_django's too) and imports none
        "import sys, mutexcron, mutexcron.stores, mutexcron.stores.redis, mutexcron.stores.mongo, "
        "mutexcron.tasks, mutexcron.tasks.backends.redis, mutexcron.tasks.backends.rabbitmq, mutexcron.testing; "
        "list(mutexcron.stores.SCHEMES); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'mutexcron_django')))"
    )
    assert python_prints(code) == "[]"


def test_the_package_ships_its_type_marker() -> None:
    import importlib.resources

    assert importlib.resources.files("mutexcron").joinpath("py.typed").is_file()


def test_the_core_names_no_django_class_and_imports_no_django_module() -> None:
    offending = [
        f"{path.relative_to(CORE.parent)}:{number}: {line.strip()}"
        for path in sorted(CORE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bDjango[A-Z]\w*|^\s*(from|import)\s+(mutexcron_)?django\b|[\"']mutexcron_django\.", line)
    ]
    assert offending == []


def test_the_django_app_plugs_in_django_urls_through_entry_points() -> None:
    """In a process where the app is installed but never imported, ``django://`` resolves to its classes."""
    code = (
        "import sys; from mutexcron.stores import SCHEMES; from mutexcron.tasks.queue import BACKENDS; "
        "from mutexcron.tasks.records.base import SCHEMES as RECORDS; "
        "print(SCHEMES['django'], BACKENDS['django'], RECORDS['django'], 'mutexcron_django' in sys.modules)"
    )
    printed = python_prints(code)
    from mutexcron_django.apps import BACKENDS

    expected = [BACKENDS["lock_store"], BACKENDS["task_backend"], BACKENDS["record_store"], "False"]
    assert printed.split() == expected


def test_the_public_names_stay_where_they_are() -> None:
    """Users' names in mutexcron.tasks, backend authors' in mutexcron.tasks.backends and mutexcron.backend_helpers, the
    URL helpers and the registry in their modules: a change to these lists is a change to the public API."""
    import mutexcron.tasks
    import mutexcron.tasks.backends
    from mutexcron import backend_helpers, plugins, urls
    from mutexcron.tasks.records import base as cancel_marks

    assert sorted(mutexcron.tasks.__all__) == [
        "Delivery", "DuplicateTaskHandler", "Handler", "HandlerRegistry", "InvalidTaskType", "NewTask", "PayloadError",
        "RetryLater", "TaskBackend", "TaskError", "TaskHandlerError", "TaskInfo", "TaskQueue", "TaskStatus",
        "UnknownTaskType", "backend_from_url", "default_handlers", "task_handler",
    ]
    assert sorted(mutexcron.tasks.backends.__all__) == [
        "Claim", "ClaimHeartbeat", "ClaimedDelivery", "ClaimingBackend", "ClaimingConsumer", "ConsumeRequest",
        "Delivery", "NewTask", "RunningConsumers",
        "TaskBackend", "TaskInfo", "TaskRecord", "TaskRecordStore", "TaskStatus", "Verdict", "cancel_store_from_url",
        "consumed_types", "run_batch", "warn_stale_settle",
    ]
    assert sorted(urls.__all__) == [
        "MASK", "check_host_and_port", "check_userinfo", "mask_url", "pop_query_options", "scrub", "seconds_option",
        "shown", "url_scheme", "url_secrets",
    ]
    assert sorted(backend_helpers.__all__) == [
        "MAX_ERROR_CHARS", "SignalFlag", "as_utc", "clip_error", "duration_ms", "epoch_ms", "ms_to_datetime",
        "positive_duration", "store_errors", "unavailable",
    ]
    assert {"ENTRY_POINT_GROUP", "KINDS", "register", "schemes"} <= set(plugins.__all__)
    for module in (mutexcron.tasks, mutexcron.tasks.backends, urls, plugins, backend_helpers):
        assert [name for name in module.__all__ if not hasattr(module, name)] == []
    assert mutexcron.tasks.backends.TaskRecordStore is cancel_marks.TaskRecordStore
    assert mutexcron.tasks.Delivery is mutexcron.tasks.backends.Delivery


# -- the shape of the packages: no import cycle, short parameter lists, small modules ---------------------------

ROOT = CORE.parent
PACKAGES = ("mutexcron", "mutexcron_django")

# Import edges allowed to close a cycle: none (issue 20 removed the last, in the Redis and SQL task backends: a
# consumer declares what it uses of its backend as a Protocol). Keep it empty: break a new cycle instead.
KNOWN_CYCLE_EDGES: set[tuple[str, str]] = set()

# Signatures longer than MAX_PARAMETERS on purpose: the public option lists, each a keyword-only list of options.
LONG_SIGNATURES = {"mutexcron/registry.py:mutex_cron", "mutexcron/scheduling/scheduler.py:Scheduler.__init__",
                   "mutexcron/scheduling/scheduler.py:Scheduler.add_schedule",
                   "mutexcron/tasks/queue.py:TaskQueue.__init__"}
# Longer than MAX_PARAMETERS for no reason of their own: none (issue 20 shortened the last). Keep it empty: what
# travels together wants a value of its own.
KNOWN_LONG_SIGNATURES: set[str] = set()
MAX_PARAMETERS = 6  # besides self / cls: more travel together and want a value of their own
MAX_LINES = 420  # "about 400": a module longer than that holds more than one concern


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Which module of ``packages`` imports which, from every import statement anywhere in the file (under
    ``if TYPE_CHECKING:`` and inside functions too: a cycle hidden there is still a cycle of the design)."""
    paths = {module_name(path, root): path for package in packages for path in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in paths)
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:  # a submodule if there is one by that name, else the module itself
                    target = f"{module}.{alias.name}" if f"{module}.{alias.name}" in paths else module
                    if target in paths:
                        targets.add(target)
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other in a loop (strongly connected components of two or more)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def described(graph: dict[str, set[str]], group: list[str]) -> str:
    return "; ".join(f"{a} -> {b}" for a in group for b in sorted(graph[a]) if b in group)


def test_the_import_graph_sees_a_cycle_closed_under_type_checking(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from .b import B\n")
    (tmp_path / "pkg" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    (tmp_path / "pkg" / "c.py").write_text("from pkg.a import A\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert described(graph, ["pkg.a", "pkg.b"]) == "pkg.a -> pkg.b; pkg.b -> pkg.a"


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = import_graph(ROOT, PACKAGES)
    left = {module: {target for target in targets if (module, target) not in KNOWN_CYCLE_EDGES}
            for module, targets in graph.items()}
    assert [described(left, group) for group in cycles(left)] == []


def test_every_known_cycle_edge_still_closes_a_cycle() -> None:
    """An edge that is gone, or no longer in a cycle, leaves the known list."""
    graph = import_graph(ROOT, PACKAGES)
    in_cycles = {(a, b) for group in cycles(graph) for a in group for b in graph[a] if b in group}
    assert KNOWN_CYCLE_EDGES - in_cycles == set()


def parameter_counts(path: Path) -> Iterator[tuple[str, int]]:
    """Each function of ``path`` (methods as Class.name) and how many parameters it takes besides self / cls
    (``*args`` and ``**kwargs`` one each)."""
    def walk(node: ast.AST, prefix: str, in_class: bool) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.", True)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                args = child.args
                positional = [arg.arg for arg in args.posonlyargs + args.args]
                static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in child.decorator_list)
                if in_class and not static and positional:
                    positional = positional[1:]
                count = len(positional) + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)
                yield f"{prefix}{child.name}", count
                yield from walk(child, f"{prefix}{child.name}.", False)
            else:
                yield from walk(child, prefix, in_class)

    return walk(ast.parse(path.read_text(), str(path)), "", False)


def long_signatures() -> set[str]:
    return {f"{path.relative_to(ROOT)}:{name}: {count}" for package in PACKAGES
            for path in sorted((ROOT / package).rglob("*.py"))
            for name, count in parameter_counts(path) if count > MAX_PARAMETERS}


def test_no_function_takes_more_than_six_parameters_besides_the_public_option_lists() -> None:
    listed = LONG_SIGNATURES | KNOWN_LONG_SIGNATURES
    assert sorted(where for where in long_signatures() if where.rpartition(":")[0] not in listed) == []


def test_every_listed_long_signature_is_still_long() -> None:
    """A name that is gone, or now short, leaves its list."""
    long = {where.rpartition(":")[0] for where in long_signatures()}
    assert (LONG_SIGNATURES | KNOWN_LONG_SIGNATURES) - long == set()


def test_no_module_is_much_over_four_hundred_lines() -> None:
    long_modules = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert long_modules == []


# -- the layers of mutexcron, and docs/architecture.md naming every module ------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Bottom to top. A module may import its own layer and those below; the package's face (``mutexcron``, its
# __init__.py) names the public classes of every layer and is above them all.
LAYERS: list[set[str]] = [
    {"errors", "_signals", "zones", "records", "declarations", "urls", "_common", "cron", "ping_urls", "plugins",
     "_options", "cron_intervals", "redis", "registry", "backend_helpers"},
    {"stores"},
    {"definitions"},
    {"ops", "telemetry", "listeners"},
    {"running"},
    {"tasks"},
    {"scheduling"},
    {"contrib", "testing", "schedule_commands", "cli", "__main__"},
]


def layer_of(module: str) -> int:
    """The layer of a module of ``mutexcron`` (by its top-level folder or module under the package)."""
    part = module.split(".")[1]
    (found,) = [index for index, names in enumerate(LAYERS) if part in names]
    return found


def test_every_module_of_mutexcron_is_in_a_layer() -> None:
    unplaced = {module.split(".")[1] for module in import_graph(ROOT, ("mutexcron",)) if module != "mutexcron"}
    assert sorted(unplaced - set().union(*LAYERS)) == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    graph = import_graph(ROOT, ("mutexcron",))
    upward = sorted(f"{source} -> {target}" for source, targets in graph.items() if source != "mutexcron"
                    for target in targets if target != "mutexcron" and layer_of(target) > layer_of(source))
    assert upward == []


def test_the_architecture_page_names_every_module_of_both_packages() -> None:
    """By its file name in backticks, or by a backticked path that ends its path."""
    named = set(re.findall(r"`([\w/]+\.py)`", ARCHITECTURE.read_text()))
    paths = [path.relative_to(ROOT).as_posix() for package in ("mutexcron", "mutexcron_django")
             for path in sorted((ROOT / package).rglob("*.py"))
             if path.name != "__init__.py" and "migrations" not in path.parts]
    missing = [path for path in paths if not any(path == name or path.endswith(f"/{name}") for name in named)]
    assert missing == []


MAX_STORE_METHODS = 8  # a full store: the lock (seed, acquire, renew, release, now) and read, locks, write


def test_a_full_store_implements_at_most_eight_abstract_methods() -> None:
    """Every control verb is built once on the primitives (mutexcron.stores.changes), never a method per store."""
    from mutexcron.stores import ControlStore, LockStore

    abstract = sorted(LockStore.__abstractmethods__ | ControlStore.__abstractmethods__)
    assert abstract == ["acquire", "locks", "now", "read", "release", "renew", "seed", "write"]
    assert len(abstract) <= MAX_STORE_METHODS
