"""fastrl.metric_keys: every key the trainer writes is a constant (or one of its families),
checked on real smoke runs and on the source of the modules that write them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fastrl.config import load_config
from fastrl import metric_keys as K
from fastrl.training.metrics import read_metrics

FASTRL_ROOT = Path(K.__file__).resolve().parent
# The namespaces of metrics.jsonl: a string literal in fastrl/ starting with one of them is a key
# (or a family prefix) and must be known here.
NAMESPACES = ("timing_s/", "cpu_s/", "rollout/", "reward/", "prune/", "tokens/", "actor/", "ars/", "greso/", "val/",
              "ood/")
FAMILY_PREFIXES = (K.TIMING_PREFIX, K.CPU_PREFIX, K.ACTOR_PREFIX, K.ARS_PREFIX, K.GRESO_PREFIX, K.OOD_PREFIX,
                   K.PRUNE_SIM_HIST_PREFIX)


def test_helpers_spell_the_keys():
    assert K.timing_key("gen") == "timing_s/gen" and K.cpu_key("step") == K.STEP_CPU == "cpu_s/step"
    assert K.STEP_TIME == "timing_s/step" and K.before_key(K.VAL_ACCURACY) == K.VAL_ACCURACY_BEFORE == "val/accuracy_before"
    assert K.ood_accuracy_key("total") == "ood/total/accuracy" and K.ood_num_key("total") == "ood/total/num"
    assert K.ood_accuracy_name("ood/total/accuracy") == "total"
    assert K.ood_accuracy_name("ood/total/num") is None and K.ood_accuracy_name(K.VAL_ACCURACY) is None
    assert K.prune_sim_hist_key(3) == "prune/sim_hist_03" and K.ars_key("n_next") == K.ARS_N_NEXT
    assert K.actor_key("clipfrac") == "actor/clipfrac" and K.greso_key("p_easy") == "greso/p_easy"


@pytest.mark.parametrize("key", ["val/accuracy_n1_before", "timing_s/update_weights", "cpu_s/gen", "ars/f3",
                                 "greso/p_hard", "actor/ratio_max", "ood/AIME2024/accuracy", "prune/sim_hist_09",
                                 "rollout/tries", "phase", "step", "epoch"])
def test_known_keys(key):
    assert K.is_known_key(key)


@pytest.mark.parametrize("key", ["val/acc", "timing_s/generate", "rollout/kept", "ood/total", "ood/a/b/accuracy",
                                 "prune/sim_hist_1", "tokens/total", "accuracy"])
def test_unknown_keys(key):
    assert not K.is_known_key(key)


def _smoke_run(tmp_path: Path, method: str) -> list[dict]:
    from fastrl.training.pipeline import Trainer

    run_dir = tmp_path / method
    # validation mid-run and an out-of-domain benchmark, so every kind of line is written
    cfg = load_config(f"methods/{method}.yaml", [f"trainer.run_dir={run_dir}", "data.ood_variants=[long]",
                                                 "trainer.val_every=1", "trainer.resume=false"], scale="smoke")
    Trainer(cfg).fit()
    return read_metrics(run_dir)


@pytest.mark.slow
def test_every_key_of_a_smoke_run_is_known(tmp_path):
    """FastRL (MDAP, ARS) and GRESO at smoke: every key written is a constant or of a known family."""
    keys: set[str] = set()
    for method in ("fastrl", "greso"):
        keys |= {k for row in _smoke_run(tmp_path, method) for k in row}
    assert sorted(k for k in keys if not K.is_known_key(k)) == []
    # the families were exercised, not merely allowed
    for key in (K.VAL_ACCURACY_BEFORE, K.VAL_ACCURACY_N1, K.ood_accuracy_key("long"), K.ARS_N_NEXT,
                K.greso_key("p_easy"), K.prune_sim_hist_key(0), K.PRUNE_COUNT_MEAN, K.ACTOR_ENTROPY, K.STEP_CPU):
        assert key in keys, key


def _key_literals(path: Path) -> list[tuple[int, str, bool]]:
    """(line, text, is an f-string's leading part) of every string in a metrics namespace."""
    tree = ast.parse(path.read_text())
    out: list[tuple[int, str, bool]] = []
    in_fstring: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            in_fstring.update(id(v) for v in node.values)
            head = node.values[0] if node.values else None
            if isinstance(head, ast.Constant) and str(head.value).startswith(NAMESPACES):
                out.append((node.lineno, str(head.value), True))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in in_fstring
                and node.value.startswith(NAMESPACES)):
            out.append((node.lineno, node.value, False))
    return out


def test_every_key_literal_in_fastrl_is_known():
    """Keys on paths a smoke run does not take (vLLM's sync check, other rules) are covered too: a
    literal in a metrics namespace is a known key, or a family prefix (``f"ars/{k}"``, ``"ood/"``)."""
    unknown = []
    for path in sorted(FASTRL_ROOT.rglob("*.py")):
        if path.name == "metric_keys.py":
            continue
        for line, text, is_fstring in _key_literals(path):
            ok = text in FAMILY_PREFIXES if is_fstring else (K.is_known_key(text) or text in FAMILY_PREFIXES)
            if not ok:
                unknown.append(f"{path.relative_to(FASTRL_ROOT.parent)}:{line}: {text!r}")
    assert unknown == []
