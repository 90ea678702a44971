"""The trainer side as parts with explicit dependencies (issue #26), checked from the code itself: only the wiring
imports ``Pipeline``, no object's attributes written from outside it, and TRL's private members reached through one
adapter module whose contract with the installed TRL holds (import circles: tests/test_architecture.py)."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "claw_train"

# the modules whose job is wiring a Pipeline: claw-train's (and the package that exports it) and claw-serve's
WIRING = {"claw_train.pipeline", "claw_train.pipeline.core", "claw_train.serve.server"}

# attribute writes on objects of other libraries, whose documented API is to set them
THIRD_PARTY_WRITES = {
    ("claw_train/serve/server.py", "server.should_exit"): "uvicorn: how a Server is told to stop",
    ("claw_train/view/server.py", "self.server.should_exit"): "uvicorn: how a Server is told to stop (claw-view's)",
    ("claw_train/serve/app.py", "app.openapi"): "FastAPI: the documented way to customise the OpenAPI schema",
    ("claw_train/models/tiny.py", "hf_tok.chat_template"): "transformers: a tokenizer's chat template",
    ("claw_train/models/tiny.py", "model.generation_config"): "transformers: a model's generation defaults",
    ("claw_train/models/tiny.py", "tok.pre_tokenizer"): "tokenizers: a Tokenizer's pipeline",
    ("claw_train/models/tiny.py", "tok.decoder"): "tokenizers: a Tokenizer's pipeline",
    ("claw_train/training/trainer.py", "p.grad"): "torch: dropping a parameter's gradient",
    ("claw_train/policy/decode.py", "layer.keys"): "transformers: a cache layer's keys (merging a running batch)",
    ("claw_train/policy/decode.py", "layer.values"): "transformers: a cache layer's values (merging a running batch)",
}

TRL_PRIVATE = re.compile(
    r"(\.|def )(_generate_and_score_completions|_get_per_token_logps_and_entropies|_save_checkpoint|_metrics)\b"
)


def modules() -> dict[str, Path]:
    """Every module of claw_train by its dotted name (a package by its ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def test_only_the_wiring_imports_pipeline():
    importers = set()
    for name, path in modules().items():
        if not name.startswith(("claw_train.pipeline", "claw_train.serve")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            from_pipeline = isinstance(node, ast.ImportFrom) and (node.module or "").startswith("claw_train.pipeline")
            if from_pipeline and any(a.name == "Pipeline" for a in node.names):
                importers.add(name)
            if isinstance(node, ast.Name) and node.id == "Pipeline" and name not in WIRING:
                importers.add(name)
    assert importers <= WIRING, importers - WIRING


def attribute_writes(tree: ast.AST) -> Iterator[ast.Attribute]:
    """Every attribute assigned (``x.a = …``, ``x.a += …``, ``for x.a in …``, ``with … as x.a``) whose object is not
    ``self`` or ``cls``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For | ast.AsyncFor):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        else:
            continue
        while targets:
            t = targets.pop()
            if isinstance(t, ast.Tuple | ast.List):
                targets.extend(t.elts)
            elif isinstance(t, ast.Starred):
                targets.append(t.value)
            elif isinstance(t, ast.Attribute) and not (isinstance(t.value, ast.Name) and t.value.id in ("self", "cls")):
                yield t


def test_no_code_writes_another_objects_attributes():
    found, allowed = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for target in attribute_writes(ast.parse(path.read_text())):
            key = (rel, ast.unparse(target))
            if key in THIRD_PARTY_WRITES:
                allowed.add(key)
            else:
                found.append(f"{rel}:{target.lineno}: {ast.unparse(target)} = ...")
    assert not found, "\n".join(found)
    assert allowed == set(THIRD_PARTY_WRITES), (
        f"no longer written (drop from the list): {set(THIRD_PARTY_WRITES) - allowed}"
    )


def test_the_attribute_check_sees_writes_from_outside():
    code = "def f(p):\n    p.stats.status = 'x'\n    p.n += 1\n    a, p.b = 1, 2\n"
    code += "class C:\n    def m(self):\n        self.x = 1\n"
    assert [ast.unparse(t) for t in attribute_writes(ast.parse(code))] == ["p.stats.status", "p.n", "p.b"]


def test_trls_private_members_are_used_only_in_the_adapter():
    users = {
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
        if TRL_PRIVATE.search(path.read_text())
        or any(
            isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "trl"
            for n in ast.walk(ast.parse(path.read_text()))
        )
    }
    assert users == {"claw_train/training/trl_adapter.py"}, users


def test_trl_contract_holds_for_the_installed_trl():
    pytest.importorskip("trl")
    from claw_train.training import trl_adapter

    assert trl_adapter.private_api_problems() == []


def test_trl_contract_fails_on_a_trl_whose_private_signatures_moved(monkeypatch):
    pytest.importorskip("trl")
    from trl import GRPOTrainer

    from claw_train.training import trl_adapter

    def moved(self, model, input_ids, mask, keep, batch_size=None):  # attention_mask renamed
        raise AssertionError("never called")

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", moved)
    monkeypatch.delattr(GRPOTrainer, "_generate_and_score_completions")
    source = inspect.getsource(GRPOTrainer._compute_loss).replace('"old_per_token_logps"', '"behaviour_logps"')
    monkeypatch.setattr(trl_adapter.inspect, "getsource", lambda obj: source)
    problems = trl_adapter.private_api_problems()
    assert any("_get_per_token_logps_and_entropies takes" in p and "attention_mask" in p for p in problems), problems
    assert any("_generate_and_score_completions is gone" in p for p in problems), problems
    assert any("no longer reads inputs['old_per_token_logps']" in p for p in problems), problems


def test_trl_of_another_version_is_refused_at_import_with_the_fix(monkeypatch):
    pytest.importorskip("trl")
    import importlib
    import sys

    import trl

    monkeypatch.setattr(trl, "__version__", "9.9.9")
    monkeypatch.delitem(sys.modules, "claw_train.training.trl_adapter", raising=False)
    with pytest.raises(ImportError, match=r"trl 9\.9\.9 is installed: pip install 'trl==1\.16\.0'"):
        importlib.import_module("claw_train.training.trl_adapter")
