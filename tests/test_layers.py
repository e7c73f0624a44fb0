"""Imports flow one way (docs/design.md, "Imports flow one way"): each module of normbench imports from its own
layer and those below, never above. Reference: every import statement in the package's source (Python's own
parser, functions' bodies included), mapped to the layer of the module it names."""

import ast

from conftest import REPO

LAYERS = [  # from the ground up (docs/design.md numbers them from 1): a package or module under normbench/
    {"errors", "config", "results", "run_names", "userfiles", "device", "__init__"},
    {"norms", "data", "configs", "cli_errors"},
    {"models"},
    {"pack"},
    {"train"},
    {"regimes"},
    {"runner"},
    {"study", "summary", "bench", "catalog", "norm_check"},
    {"cli", "__main__"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _unit(dotted: str) -> str:
    """'normbench.train.loop' -> 'train'; 'normbench' -> '__init__'."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(root=REPO) -> list[tuple[str, str, str]]:
    """(importing file, its unit, the unit it imports) for every normbench import in root/normbench."""
    found = []
    for path in sorted((root / "normbench").rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        unit = _unit(".".join(rel.parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("normbench"):
                targets = ([_unit(f"normbench.{a.name}") for a in node.names] if node.module == "normbench"
                           else [_unit(node.module)])
            elif isinstance(node, ast.Import):
                targets = [_unit(a.name) for a in node.names if a.name.startswith("normbench.")]
            else:
                continue
            found += [(str(rel), unit, t) for t in targets]
    return found


def test_every_unit_has_a_layer():
    units = {unit for _, unit, _ in imports()} | {t for _, _, t in imports()}
    assert units <= set(LAYER), f"not placed in a layer: {sorted(units - set(LAYER))}"


def upward(root=REPO) -> list[str]:
    return [f"{where} ({unit}, layer {LAYER[unit] + 1}) imports {target} (layer {LAYER[target] + 1})"
            for where, unit, target in imports(root) if LAYER.get(target, -1) > LAYER.get(unit, len(LAYERS))]


def test_no_import_runs_back_up():
    assert not (up := upward()), "\n".join(up)


def test_the_check_finds_an_import_that_runs_back_up(tmp_path):
    """The check on a package written to break the rule: a norm that imports the training loop inside a
    function, and a model that imports the runner's module; a norm importing the config does not."""
    (tmp_path / "normbench" / "norms").mkdir(parents=True)
    (tmp_path / "normbench" / "models").mkdir()
    (tmp_path / "normbench" / "norms" / "bad.py").write_text(
        "from normbench.config import Config\n\ndef f():\n    from normbench.train.loop import train\n")
    (tmp_path / "normbench" / "models" / "worse.py").write_text("from normbench import runner\n")
    assert upward(tmp_path) == ["normbench/models/worse (models, layer 3) imports runner (layer 7)",
                                "normbench/norms/bad (norms, layer 2) imports train (layer 5)"]
