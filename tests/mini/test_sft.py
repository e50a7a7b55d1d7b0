"""SFT warm start: a loadable model dir, cached by its inputs, rebuilt when they change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fastrl.mini import sft
from fastrl.mini.sft import EvalSettings, jaccard_distance, warm_start
from fastrl.models.loaders import load_policy

from .conftest import TEXT_SPEC, VL_SPEC

TINY_EVAL = EvalSettings(num_prompts=2, n=2, max_new_tokens=8, batch_size=8)


def _run(out_root: Path, **overrides):
    kwargs = dict(out_root=out_root, seed=0, steps=3, lr=1e-3, batch_size=4, num_train=8, eval_settings=TINY_EVAL)
    kwargs.update(overrides)
    return warm_start("mini-math", TEXT_SPEC, **kwargs)


def test_warm_start_builds_then_hits_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _run(tmp_path)
    manifest = json.loads((path / "sft_manifest.json").read_text())
    assert manifest["inputs"]["steps"] == 3 and manifest["key"] in path.name
    m = manifest["metrics"]
    assert m["num_prompts"] == 2 and m["n"] == 2
    assert 0.0 <= m["greedy_accuracy"] <= 1.0 and 0.0 <= m["mixed_group_fraction"] <= 1.0
    assert manifest["loss_first"] > 0
    model, _ = load_policy(path)  # loadable like any policy dir
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary dir left behind

    def boom(*args, **kwargs):
        raise AssertionError("cache hit must not train")

    monkeypatch.setattr(sft, "train_sft", boom)
    assert _run(tmp_path) == path  # same inputs: cache hit, no training
    # Different inputs: a different directory (and training, which the patch turns into an error).
    with pytest.raises(AssertionError, match="must not train"):
        _run(tmp_path, lr=2e-3)
    with pytest.raises(AssertionError, match="must not train"):
        _run(tmp_path, seed=1)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_training_changes_weights_and_lowers_loss(tmp_path: Path) -> None:
    path = _run(tmp_path, steps=12, lr=3e-3, eval_settings=EvalSettings(num_prompts=0))
    manifest = json.loads((path / "sft_manifest.json").read_text())
    assert manifest["metrics"] == {}
    assert manifest["loss_last_10pct"] < manifest["loss_first"]


def test_incomplete_cache_dir_is_rebuilt(tmp_path: Path) -> None:
    path = _run(tmp_path, eval_settings=EvalSettings(num_prompts=0))
    (path / "sft_manifest.json").unlink()  # e.g. a copy interrupted half-way
    again = _run(tmp_path, eval_settings=EvalSettings(num_prompts=0))
    assert again == path and (path / "sft_manifest.json").is_file()


def test_vl_warm_start_end_to_end(tmp_path: Path) -> None:
    path = warm_start("mini-geo", VL_SPEC, out_root=tmp_path, seed=0, steps=2, lr=1e-3, batch_size=2, num_train=4,
                      eval_settings=TINY_EVAL)
    model, proc = load_policy(path)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert (path / "preprocessor_config.json").is_file()


def test_jaccard_distance() -> None:
    assert jaccard_distance([1, 2, 3], [1, 2, 3, 3]) == 0.0
    assert jaccard_distance([1, 2], [3, 4]) == 1.0
    assert jaccard_distance([1, 2, 3], [2, 3, 4]) == pytest.approx(0.5)
    assert jaccard_distance([], []) == 0.0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="lr > 0"):
        warm_start("mini-math", TEXT_SPEC, out_root=Path("unused"), seed=0, steps=1, lr=0.0)


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def test_a_killed_build_folder_is_removed_at_the_next_build_and_a_live_one_kept(tmp_path: Path, caplog) -> None:
    """A SIGKILLed build leaves ``.tmp-<task>-<key>-<pid>/``; the next build removes it (its
    process is gone) and leaves a live process's build alone."""
    import os

    dead = tmp_path / f".tmp-mini-math-0123456789ab-{_dead_pid()}"
    live = tmp_path / f".tmp-mini-math-0123456789ab-{os.getppid()}"
    for d in (dead, live):
        (d / "half").mkdir(parents=True)
    with caplog.at_level("INFO", logger="fastrl"):
        path = _run(tmp_path, eval_settings=EvalSettings(num_prompts=0))
    assert not dead.exists() and live.is_dir() and path.is_dir()
    assert "removed 1 unfinished build" in caplog.text
    assert "building it in" in caplog.text and str(path) in caplog.text  # says where it caches


def test_sft_logs_its_steps_with_loss_and_time_left_outside_a_terminal(tmp_path: Path, caplog) -> None:
    with caplog.at_level("INFO", logger="fastrl"):
        _run(tmp_path, steps=4, log_every=2, eval_settings=EvalSettings(num_prompts=0))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("sft step")]
    assert [ln.split(" loss")[0] for ln in lines] == ["sft step 2/4", "sft step 4/4"]
    assert all("left)" in ln for ln in lines)


def test_sft_shows_a_bar_with_the_loss_in_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bars = []

    class Bar:
        def __init__(self, *a, **k):
            self.postfix, self.n, self.closed = {}, 0, False
            bars.append(self)

        def set_postfix(self, refresh=False, **kw):
            self.postfix = kw

        def update(self, n):
            self.n += n

        def close(self):
            self.closed = True

    monkeypatch.setattr(sft, "progress_bar", lambda total, desc, **k: Bar())
    _run(tmp_path, steps=3, eval_settings=EvalSettings(num_prompts=0))
    assert len(bars) == 1 and bars[0].n == 3 and bars[0].closed and float(bars[0].postfix["loss"]) > 0


def _tiny_sft_inputs(tmp_path: Path):
    from fastrl.data.templates import TEMPLATE_REWARD
    from fastrl.mini.builders import build_tiny_model_dir
    from fastrl.mini.tasks import generate_task
    from fastrl.policy import PolicySpec, load_policy_kit
    import torch

    build_tiny_model_dir(TEXT_SPEC, tmp_path / "m", seed=0)
    kit = load_policy_kit(PolicySpec(path=tmp_path / "m", reward=TEMPLATE_REWARD["fastrl_math"], template="fastrl_math"),
                          torch.device("cpu"))
    train = generate_task("mini-math", split="train", num=8, seed=0)
    return kit, [kit.encode(r) for r in train], sft._route_ids(kit.tokenizer, train)


def test_held_out_selection_keeps_the_best_step_and_stops_on_patience(tmp_path: Path) -> None:
    kit, prompts, targets = _tiny_sft_inputs(tmp_path)
    scripted = iter([0.1, 0.5, 0.5, 0.3, 0.9])  # step 2 best; 3 ties (kept: later) but is no gain; 4 stale
    snapshots = {}

    def evaluate(model):
        snapshots[len(snapshots) + 1] = {k: v.clone() for k, v in model.state_dict().items()}
        return next(scripted)

    run = sft.train_sft(kit.model, prompts, targets, pad_id=kit.pad_id, seed=0, steps=5, lr=1e-2, batch_size=2,
                        warmup_frac=0.0, weight_decay=0.0, log_every=1, evaluate=evaluate,
                        selection=sft.SelectionSettings(every=1, patience=2, min_steps=2))
    assert run.curve == [(1, 0.1), (2, 0.5), (3, 0.5), (4, 0.3)]  # stopped after 2 evaluations without gain
    assert (run.kept_step, run.stopped_at) == (3, 4)
    final = kit.model.state_dict()
    assert all(torch_equal(final[k], snapshots[3][k]) for k in final)
    assert not all(torch_equal(final[k], snapshots[4][k]) for k in final)


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_selection_and_perturbation_are_keyed_only_when_used() -> None:
    from fastrl.mini.sft import Perturbation, SelectionSettings, cache_key, sft_inputs

    common = dict(seed=0, steps=1, lr=1e-3, batch_size=4, num_train=8, template="fastrl_math", warmup_frac=0.05,
                  weight_decay=0.0)
    plain = sft_inputs("mini-math", TEXT_SPEC, **common)
    # The last-step recipe keeps the inputs (hence cache entries) it had before selection existed.
    assert sft_inputs("mini-math", TEXT_SPEC, **common, selection=SelectionSettings(), perturbation=Perturbation()) == plain
    assert "selection" not in plain and "perturbation" not in plain
    keys = {cache_key(plain),
            cache_key(sft_inputs("mini-math", TEXT_SPEC, **common, selection=SelectionSettings(every=50))),
            cache_key(sft_inputs("mini-math", TEXT_SPEC, **common, perturbation=Perturbation(init_scale=1e-6)))}
    assert len(keys) == 3


def test_perturbation_scales_weights_relatively(tmp_path: Path) -> None:
    import torch

    kit, _, _ = _tiny_sft_inputs(tmp_path)
    before = {k: v.clone() for k, v in kit.model.named_parameters()}
    sft.perturb_weights(kit.model, sft.Perturbation(init_scale=1e-3, seed=1))
    for k, p in kit.model.named_parameters():
        nonzero = before[k] != 0
        if not nonzero.any():  # e.g. zero-initialised biases: 0 * (1 + e) stays 0
            continue
        rel = ((p - before[k])[nonzero] / before[k][nonzero]).abs()
        assert 0 < rel.max() < 1e-2, k
    again = {k: v.clone() for k, v in kit.model.named_parameters()}
    sft.perturb_weights(kit.model, sft.Perturbation())  # scale 0: untouched
    assert all(torch.equal(again[k], p) for k, p in kit.model.named_parameters())


def test_selection_needs_an_evaluate_function(tmp_path: Path) -> None:
    kit, prompts, targets = _tiny_sft_inputs(tmp_path)
    with pytest.raises(ValueError, match="evaluate"):
        sft.train_sft(kit.model, prompts, targets, pad_id=kit.pad_id, seed=0, steps=1, lr=1e-3, batch_size=2,
                      warmup_frac=0.0, weight_decay=0.0, log_every=1, selection=sft.SelectionSettings(every=1))


def test_warm_start_with_selection_records_its_curve(tmp_path: Path) -> None:
    path = _run(tmp_path, steps=4, selection=sft.SelectionSettings(every=2, num_prompts=4),
                eval_settings=EvalSettings(num_prompts=0))
    manifest = json.loads((path / "sft_manifest.json").read_text())
    assert [s for s, _ in manifest["selection"]["curve"]] == [2, 4]
    assert manifest["inputs"]["selection"]["every"] == 2


def test_selection_keys_are_checked_at_config_load() -> None:
    from fastrl.config import ConfigError, load_config

    # model.tiny is the tiny source's section (fastrl.sections.TinyModelConfig): its check() runs
    # when the config is read, and the message names the dotted key.
    with pytest.raises(ConfigError, match="model.tiny.sft_patience = -1 must be >= 0"):
        load_config(None, ["model.tiny.sft_patience=-1"], scale="smoke")
    with pytest.raises(ConfigError, match="model.tiny.sft_select_prompts = 0 must be >= 1"):
        load_config(None, ["model.tiny.sft_select_every=10", "model.tiny.sft_select_prompts=0"], scale="smoke")


def test_a_target_accuracy_stops_at_the_first_check_reaching_it_and_fails_when_never_reached(tmp_path: Path) -> None:
    kit, prompts, targets = _tiny_sft_inputs(tmp_path)
    common = dict(pad_id=kit.pad_id, seed=0, lr=1e-2, batch_size=2, warmup_frac=0.0, weight_decay=0.0, log_every=1)
    scripted = iter([0.96, 0.2, 0.97, 0.99])  # step 1 reaches it before min_steps; step 3 is the stop
    run = sft.train_sft(kit.model, prompts, targets, steps=6, evaluate=lambda m: next(scripted),
                        selection=sft.SelectionSettings(every=1, min_steps=2, target=0.95), **common)
    assert run.curve == [(1, 0.96), (2, 0.2), (3, 0.97)] and (run.kept_step, run.stopped_at) == (3, 3)

    low = iter([0.5, 0.9, 0.7])
    with pytest.raises(sft.SFTNotConverged, match=r"best held-out greedy accuracy 0.900 \(step 2\) < "
                                                  r"model.tiny.sft_target_accuracy=0.95 after 3 steps"):
        sft.train_sft(kit.model, prompts, targets, steps=3, evaluate=lambda m: next(low),
                      selection=sft.SelectionSettings(every=1, target=0.95), **common)


def test_a_target_accuracy_is_keyed_only_when_set_and_checked_at_config_load() -> None:
    from fastrl.config import ConfigError, load_config

    assert "target" not in sft.SelectionSettings(every=50).to_key()
    assert sft.SelectionSettings(every=50, target=0.95).to_key()["target"] == 0.95
    with pytest.raises(ConfigError, match="model.tiny.sft_target_accuracy needs model.tiny.sft_select_every > 0"):
        load_config(None, ["model.tiny.sft_target_accuracy=0.9"], scale="smoke")
    with pytest.raises(ConfigError, match=r"model.tiny.sft_target_accuracy = 1.5 must lie in \[0, 1\]"):
        load_config(None, ["model.tiny.sft_select_every=10", "model.tiny.sft_target_accuracy=1.5"], scale="smoke")


def test_a_start_that_never_converges_is_one_line_from_fastrl_train(tmp_path: Path, capsys) -> None:
    from fastrl import cli

    code = cli.main(["train", "methods/grpo.yaml", "--scale", "smoke", "model.kind=qwen2", "model.tiny.sft_steps=2",
                     "model.tiny.sft_select_every=1", "model.tiny.sft_target_accuracy=1.0",
                     f"trainer.run_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2 and "did not converge" in err and "raise model.tiny.sft_steps" in err
    assert "Traceback" not in err


def test_a_variant_mix_draws_its_share_and_is_keyed_only_when_set() -> None:
    from fastrl.mini.sft import VariantMix, cache_key, sft_inputs, sft_problems
    from fastrl.mini.tasks import generate_task

    plain = generate_task("mini-geo", split="train", num=40, seed=3)
    # no mix: exactly the problems (and cache keys) of the recipes before it existed
    assert [r.uid for r in sft_problems("mini-geo", 40, 3)] == [r.uid for r in plain]
    mixed = sft_problems("mini-geo", 40, 3, VariantMix("total", 0.25))
    variants = [r.meta["variant"] for r in mixed]
    assert variants.count("total") == 10 and variants.count("default") == 30
    assert variants[:30] != ["default"] * 30  # shuffled in, not appended: the held-out tail gets its share
    assert [r.uid for r in sft_problems("mini-geo", 40, 3, VariantMix("total", 0.25))] == [r.uid for r in mixed]
    assert all(r.meta["split"] == "train" for r in mixed)
    common = dict(seed=0, steps=1, lr=1e-3, batch_size=4, num_train=8, template="fastrl_math", warmup_frac=0.05,
                  weight_decay=0.0)
    base = sft_inputs("mini-geo", VL_SPEC, **common)
    assert sft_inputs("mini-geo", VL_SPEC, **common, mix=VariantMix()) == base and "mix" not in base
    assert cache_key(sft_inputs("mini-geo", VL_SPEC, **common, mix=VariantMix("total", 0.25))) != cache_key(base)


def test_a_variant_mix_is_checked_before_any_model_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastrl.config import ConfigError, load_config
    from fastrl.mini import source

    with pytest.raises(ConfigError, match=r"model.tiny.sft_mix_fraction = 1.0 must lie in \[0, 1\)"):
        load_config(None, ["model.tiny.sft_mix_variant=total", "model.tiny.sft_mix_fraction=1.0"], scale="smoke")
    with pytest.raises(ConfigError, match="sft_mix_variant = 'total' and sft_mix_fraction = 0.0 go together"):
        load_config(None, ["model.tiny.sft_mix_variant=total"], scale="smoke")
    cfg = load_config(None, ["data.task=mini-geo", "model.kind=qwen2_5_vl", "model.tiny.sft_mix_variant=long",
                             "model.tiny.sft_mix_fraction=0.2"], scale="smoke")
    monkeypatch.setattr(source, "warm_start", lambda *a, **k: pytest.fail("built a model for a bad mix"))
    with pytest.raises(ValueError, match=r"model.tiny.sft_mix_variant = 'long' is not a variant of data.task = "
                                         r"mini-geo; valid: default, total"):
        source.tiny_policy_dir(cfg.model.tiny, cfg, device=torch.device("cpu"))


def test_a_mixed_warm_start_trains_on_its_mix(tmp_path: Path) -> None:
    from fastrl.mini.sft import VariantMix

    path = warm_start("mini-geo", VL_SPEC, out_root=tmp_path, seed=0, steps=2, lr=1e-3, batch_size=4, num_train=8,
                      eval_settings=EvalSettings(num_prompts=0), mix=VariantMix("total", 0.5))
    manifest = json.loads((path / "sft_manifest.json").read_text())
    assert manifest["inputs"]["mix"] == {"variant": "total", "fraction": 0.5}
    assert load_policy(path) is not None


def test_an_anneal_after_the_target_trains_more_steps_with_falling_lr_and_keeps_the_last(tmp_path: Path,
                                                                                           monkeypatch) -> None:
    kit, prompts, targets = _tiny_sft_inputs(tmp_path)
    lrs: list[float] = []
    real_step = sft._optimizer_step

    def spy(model, opt, *args):
        lrs.append(opt.param_groups[0]["lr"])
        return real_step(model, opt, *args)

    monkeypatch.setattr(sft, "_optimizer_step", spy)
    snapshots = {}

    def evaluate(model):
        snapshots[len(snapshots) + 1] = {k: v.clone() for k, v in model.state_dict().items()}
        return [0.97, 0.1][len(snapshots) - 1]  # target reached at step 2; the annealed step scores low

    run = sft.train_sft(kit.model, prompts, targets, pad_id=kit.pad_id, seed=0, steps=10, lr=1e-2, batch_size=2,
                        warmup_frac=0.0, weight_decay=0.0, log_every=1, evaluate=evaluate,
                        selection=sft.SelectionSettings(every=2, target=0.95, anneal_steps=4))
    # 2 steps to the target (checked at 2), then 4 annealed steps from the lr there down to lr/4.
    assert len(lrs) == 6 and run.stopped_at == 6 and run.kept_step == 6
    assert lrs[2:] == pytest.approx([lrs[1] * f for f in (1.0, 0.75, 0.5, 0.25)])
    assert run.curve == [(2, 0.97), (6, 0.1)]  # the annealed step is kept although it scores lowest
    final = kit.model.state_dict()
    assert all(torch_equal(final[k], snapshots[2][k]) for k in final)
    assert not all(torch_equal(final[k], snapshots[1][k]) for k in final)


def test_an_anneal_is_keyed_only_when_set_and_needs_a_target() -> None:
    from fastrl.config import ConfigError, load_config

    assert "anneal_steps" not in sft.SelectionSettings(every=50, target=0.95).to_key()
    assert sft.SelectionSettings(every=50, target=0.95, anneal_steps=1000).to_key()["anneal_steps"] == 1000
    with pytest.raises(ConfigError, match="model.tiny.sft_anneal_steps anneals after the held-out target"):
        load_config(None, ["model.tiny.sft_anneal_steps=100"], scale="smoke")
    with pytest.raises(ConfigError, match="model.tiny.sft_anneal_steps = -1 must be >= 0"):
        load_config(None, ["model.tiny.sft_anneal_steps=-1"], scale="smoke")
    cfg = load_config(None, ["model.tiny.sft_select_every=10", "model.tiny.sft_target_accuracy=0.9",
                             "model.tiny.sft_anneal_steps=100"], scale="smoke")
    assert cfg.model.tiny.sft_anneal_steps == 100


def test_the_sft_training_set_size_is_a_config_key_that_reaches_the_warm_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from fastrl.config import ConfigError, load_config
    from fastrl.mini import source

    with pytest.raises(ConfigError, match="model.tiny.sft_num_train = 0 must be at least 1"):
        load_config(None, ["model.tiny.sft_num_train=0"], scale="smoke")
    cfg = load_config(None, ["model.tiny.sft_num_train=8000"], scale="smoke")
    seen: dict[str, object] = {}
    monkeypatch.setattr(source, "warm_start", lambda *a, **k: seen.update(k) or Path("x"))
    source.tiny_policy_dir(cfg.model.tiny, cfg, device=torch.device("cpu"))
    assert seen["num_train"] == 8000
