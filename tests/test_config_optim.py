"""Issue 18, item 1: one optimizer schema (``trainer.optim``) read by the actor as it is, and the
model source choice (``model.source: path | tiny``, the tiny model's knobs under ``model.tiny``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastrl.config import ConfigError, OptimConfig, load_config, unknown_key_message


@pytest.mark.parametrize("old, new", [
    ("trainer.lr", "trainer.optim.lr"),
    ("trainer.weight_decay", "trainer.optim.weight_decay"),
    ("trainer.grad_clip", "trainer.optim.grad_clip"),
    ("trainer.lr_warmup_steps", "trainer.optim.warmup_steps"),
    ("trainer.betas", "trainer.optim.betas"),
    ("model.hidden_size", "model.tiny.hidden_size"),
    ("model.sft_steps", "model.tiny.sft_steps"),
    ("model.sft_answer_noise", "model.tiny.sft_answer_noise"),
])
def test_a_key_of_the_old_schema_is_one_line_naming_the_new_key(old: str, new: str, tmp_path: Path) -> None:
    assert f"unknown key {old!r}; did you mean {new!r}?" in unknown_key_message(old)
    with pytest.raises(ConfigError) as err:
        load_config("methods/grpo.yaml", [f"{old}=1"], scale="smoke")
    assert f"did you mean {new!r}?" in str(err.value) and "\n" not in str(err.value)
    section, key = old.split(".")
    old_yaml = tmp_path / "old.yaml"
    old_yaml.write_text(f"defaults: [methods/grpo.yaml]\n{section}:\n  {key}: 1\n")
    with pytest.raises(ConfigError, match=rf"old\.yaml: unknown key '{old}'; did you mean '{new}'\?"):
        load_config(str(old_yaml), scale="smoke")


def test_optimizer_defaults_are_the_ones_the_actor_hard_coded_before() -> None:
    """Behaviour unchanged: betas and eps were fixed (0.9, 0.999) / 1e-8, offload off; the scales'
    learning rates and weight decay are where they were."""
    assert OptimConfig() == OptimConfig(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, grad_clip=1.0,
                                        warmup_steps=0, offload=False)
    by_scale = {s: load_config("methods/fastrl.yaml", scale=s).trainer.optim for s in ("smoke", "mini", "paper")}
    assert [(o.lr, o.weight_decay) for o in by_scale.values()] == [(1e-4, 0.0), (1e-4, 0.0), (1e-6, 1e-2)]


def test_the_actor_steps_with_the_configured_optimizer() -> None:
    """No second schema in between: betas, eps and weight decay given as keys reach AdamW."""
    import torch

    from fastrl.training.actor import Actor

    cfg = load_config("methods/grpo.yaml", ["trainer.optim.betas=[0.8,0.95]", "trainer.optim.eps=1e-6",
                                            "trainer.optim.weight_decay=0.1", "trainer.optim.warmup_steps=4"],
                      scale="smoke")
    actor = Actor(torch.nn.Linear(2, 1), cfg.trainer, cfg.model)
    group = actor.backend.optimizer.param_groups[0]
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.8, 0.95), 1e-6, 0.1)
    assert actor.current_lr() == pytest.approx(1e-4 / 4)


def test_each_scale_selects_its_model_source() -> None:
    sources = {s: load_config("methods/grpo.yaml", scale=s).model for s in ("smoke", "mini", "paper")}
    assert {s: m.source for s, m in sources.items()} == {"smoke": "tiny", "mini": "tiny", "paper": "path"}
    assert sources["paper"].path == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert (sources["smoke"].tiny.num_layers, sources["mini"].tiny.sft_answer_noise) == (1, 0.3)


def test_training_never_builds_or_trains_a_tiny_model() -> None:
    """The tiny model's build and SFT live in fastrl.mini (``model.source = tiny``); training/
    only chooses the source."""
    training = Path(__file__).resolve().parents[1] / "fastrl" / "training"
    for path in training.glob("*.py"):
        text = path.read_text()
        for name in ("fastrl.mini.builders", "fastrl.mini.sft", "TinyModelSpec", "warm_start("):
            assert name not in text, f"{path.name} uses {name}"


def test_one_hf_model_loader() -> None:
    """The actor, its reference, evaluation and SFT load weights through loaders.load_hf_model only."""
    package = Path(__file__).resolve().parents[1] / "fastrl"
    loading = [p.relative_to(package).as_posix() for p in package.rglob("*.py")
               if "AutoModelFor" in p.read_text() or "Model.from_pretrained" in p.read_text()]
    assert loading == ["models/loaders.py"]


@pytest.mark.parametrize("override, key", [
    ("trainer.optim.lr=inf", "trainer.optim.lr = inf"),
    ("trainer.optim.lr=nan", "trainer.optim.lr = nan"),
    ("trainer.optim.grad_clip=inf", "trainer.optim.grad_clip = inf"),
    ("trainer.optim.betas=[0.9,inf]", "trainer.optim.betas[1] = inf"),
    ("rollout.temperature=inf", "rollout.temperature = inf"),
    ("algorithm.mdap.tau=nan", "algorithm.mdap.tau = nan"),
])
def test_a_non_finite_number_is_refused_at_load_in_one_line(override: str, key: str) -> None:
    """Issue 24, defect 8: ``lr=inf`` was accepted and failed later on a NaN loss."""
    with pytest.raises(ConfigError) as err:
        load_config("methods/fastrl.yaml", [override], scale="smoke")
    assert str(err.value).startswith(key) and "finite" in str(err.value) and "\n" not in str(err.value)


def test_a_non_finite_learning_rate_is_refused_without_load_config() -> None:
    with pytest.raises(ConfigError, match="trainer.optim.lr = inf"):
        OptimConfig(lr=float("inf"))
