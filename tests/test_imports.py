"""The packages' imports: no module imports itself through others, none
reaches into another package's private names, and no layer imports one above it."""

import ast
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "transforms", "litmus_score")


def modules() -> dict:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports(known: dict) -> dict:
    """module -> [(module it imports, the names it takes)], function-level imports included."""
    edges = {}
    for name, path in known.items():
        found = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in known:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    found.append((submodule, ()) if submodule in known else (node.module, (alias.name,)))
            elif isinstance(node, ast.Import):
                found += [(alias.name, ()) for alias in node.names if alias.name in known]
        edges[name] = [(target, names) for target, names in found if target != name]
    return edges


def cycle_from(start: str, edges: dict):
    """A path start -> ... -> start through the imports, or None."""
    seen, stack = set(), [(start, [start])]
    while stack:
        module, path = stack.pop()
        for target, _ in edges[module]:
            if target == start:
                return path + [start]
            if target not in seen:
                seen.add(target)
                stack.append((target, path + [target]))
    return None


def test_no_module_imports_itself_through_others():
    edges = imports(modules())
    cycles = [cycle for cycle in (cycle_from(module, edges) for module in edges) if cycle]
    assert cycles == []


def test_no_private_name_crosses_a_package():
    edges = imports(modules())
    package = lambda module: module.rsplit(".", 1)[0] if module.count(".") else module  # noqa: E731
    crossing = [(module, target, name) for module, found in edges.items() for target, names in found
                for name in names if name.startswith("_") and package(target) != package(module)]
    assert crossing == []


def test_the_check_sees_a_cycle(tmp_path):
    edges = {"a": [("b", ())], "b": [("c", ())], "c": [("a", ())], "d": [("a", ())]}
    assert cycle_from("a", edges) == ["a", "b", "c", "a"] and cycle_from("d", edges) is None


# From the bottom up: a module may import its own layer and those below it, never one above.
# The rules (and the two small modules beside them) import neither Beam nor pyarrow; the
# rest of litmus_score (mapping, reports, the contract's Arrow schema) imports no Beam.
LAYERS = (
    ("litmus_score.scoring", "litmus_score.exits", "litmus_score.text"),
    ("litmus_score",),
    ("transforms",),
    ("pipeline",),
)


def layer_of(module: str) -> int:
    for index, units in enumerate(LAYERS):
        if any(module == unit or module.startswith(unit + ".") for unit in units):
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def test_no_import_from_a_lower_layer_upward():
    edges = imports(modules())
    upward = [(module, target) for module, found in edges.items() for target, _ in found
              if module != "litmus_score" and layer_of(target) > layer_of(module)]
    assert upward == []


def test_the_rules_import_neither_beam_nor_pyarrow():
    heavy = ("apache_beam", "pyarrow", "numpy")
    found = []
    rules = {name: path for name, path in modules().items() if name != "litmus_score" and layer_of(name) == 0}
    assert "litmus_score.scoring.rules" in rules
    for name, path in rules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            found += [(name, imported) for imported in names if imported.split(".")[0] in heavy]
    assert found == []


def _imported_names(path: Path) -> list:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def test_litmus_score_imports_no_beam_and_no_stage_or_job():
    """One package a floor: rules and mapping (litmus_score), stages (transforms), jobs (pipeline)."""
    above = ("apache_beam", "transforms", "pipeline")
    found = [(name, imported) for name, path in modules().items() if layer_of(name) <= 1
             for imported in _imported_names(path) if imported.split(".")[0] in above]
    assert found == []


def test_a_run_without_a_policy_or_baseline_builds_no_pydantic_models():
    """The scoring job's modules import neither the policy's nor the comparison's
    models (about 0.1 CPU-s of every start-up); a run that has a policy imports them."""
    import subprocess
    import sys

    models = ("litmus_score.scoring.policy", "litmus_score.scoring.compare", "transforms.policy")

    def models_after(imports: str) -> str:
        probe = f"import sys, {imports}; print(sorted(m for m in {models!r} if m in sys.modules))"
        return subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()

    assert models_after("pipeline.cli, pipeline.job") == "[]"
    # The check can fail: the what-if command, which always has policies, imports them.
    assert models_after("pipeline.job, pipeline.whatif") != "[]"


def test_the_allocators_are_chosen_at_start_and_the_users_choice_wins(monkeypatch):
    import sys

    from pipeline import processes

    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    processes.allocators_from_the_start()
    assert os.environ.get("ARROW_DEFAULT_MEMORY_POOL") == ("jemalloc" if sys.platform.startswith("linux") else None)
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
    processes.allocators_from_the_start()
    assert os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system"
