"""fastrl.integrations.trl driving TRL's real GRPOTrainer on a tiny local Qwen2 (CPU, no hub)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

trl = pytest.importorskip("trl")
from datasets import Dataset  # noqa: E402

from fastrl.algorithms.pruning import advantage_only_prune, mdap_prune  # noqa: E402
from fastrl.integrations.trl import FastRLGRPOTrainer, make_pruner, prune_batch_of  # noqa: E402

WORDS = "a b c d e f g h i j k l m n o p".split()
G = 4  # num_generations


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = tmp_path_factory.mktemp("tiny_qwen2")
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<eos>"]))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>",
                                     padding_side="left")
    hf_tok.save_pretrained(out)
    config = Qwen2Config(vocab_size=len(hf_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
                         tie_word_embeddings=True, eos_token_id=hf_tok.eos_token_id,
                         pad_token_id=hf_tok.pad_token_id, bos_token_id=None)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = hf_tok.eos_token_id
    model.generation_config.pad_token_id = hf_tok.pad_token_id
    model.save_pretrained(out)
    return out


def reward_parity(completions: list[str], **_: object) -> list[float]:
    """Coarse reward (word count odd or even): groups with ties, so MDAP's buckets hold several rows."""
    return [float(len(c.split()) % 2) for c in completions]


def make_trainer(tiny_dir: Path, tmp_path: Path, tau: float, update_mode: str = "fixed_updates",
                 max_steps: int = 2, loss_type: str = "dapo", steps_per_generation: int = 2) -> FastRLGRPOTrainer:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    prompts = [" ".join(WORDS[i:i + 3]) for i in range(8)]
    args = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=2,
                          num_generations=G, max_completion_length=6, max_steps=max_steps, learning_rate=1e-3,
                          logging_steps=1, report_to="none", use_cpu=True, seed=0, save_strategy="no",
                          loss_type=loss_type, steps_per_generation=steps_per_generation, temperature=1.5, top_k=0, dataloader_num_workers=0)
    return FastRLGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_dir),
                             processing_class=PreTrainedTokenizerFast.from_pretrained(tiny_dir),
                             reward_funcs=reward_parity, args=args,
                             train_dataset=Dataset.from_dict({"prompt": prompts}),
                             pruner=make_pruner("mdap", tau=tau), update_mode=update_mode)  # type: ignore[arg-type]


class Recorder:
    """Wraps the trainer: every full generated batch (before pruning) and every slice the update sees."""

    def __init__(self, trainer: FastRLGRPOTrainer) -> None:
        self.full: list[dict] = []
        self.trained: list[dict] = []
        base_prune, base_loss = trainer.pruner, trainer._compute_loss

        def pruner(batch, **kw):
            self.full.append(batch)
            return base_prune(batch, **kw)

        def compute_loss(model, inputs):
            self.trained.append({k: v for k, v in inputs.items()})
            return base_loss(model, inputs)

        trainer.pruner, trainer._compute_loss = pruner, compute_loss


def rows(ids: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor) -> Counter:
    return Counter((tuple(ids[i][mask[i].bool()].tolist()), round(float(adv[i]), 6)) for i in range(ids.shape[0]))


def test_kept_rows_equal_mdap_prune_on_the_same_batch(tiny_dir: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tiny_dir, tmp_path, tau=0.9, max_steps=1)
    rec = Recorder(trainer)
    trainer.train()
    (batch,) = rec.full
    batch_, result = trainer.fastrl_last_prune
    expected = mdap_prune(batch.advantages, batch.uids, batch.response_ids, tau=0.9,
                          align_to=trainer.args.steps_per_generation)
    assert result.kept.tolist() == expected.kept.tolist()
    assert len(expected.kept) < len(batch), "the fixture batch should prune something"
    # The update saw exactly those rows (shuffled into steps_per_generation slices), each once.
    trained = sum((rows(s["completion_ids"], s["completion_mask"], s["advantages"]) for s in rec.trained), Counter())
    want = Counter((tuple(batch.response_ids[i]), round(float(batch.advantages[i]), 6)) for i in expected.kept.tolist())
    assert trained == want
    assert [s["completion_ids"].shape[0] for s in rec.trained] == [len(expected.kept) // 2] * 2


def test_two_steps_at_tau_one_train_on_the_advantage_only_rows(tiny_dir: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tiny_dir, tmp_path, tau=1.0, max_steps=2)
    rec = Recorder(trainer)
    trainer.train()
    assert len(rec.full) == 2 and len(rec.trained) == 4
    for step, batch in enumerate(rec.full):
        keep = advantage_only_prune(batch.advantages, batch.uids, align_to=2).kept.tolist()
        want = Counter((tuple(batch.response_ids[i]), round(float(batch.advantages[i]), 6)) for i in keep)
        got = sum((rows(s["completion_ids"], s["completion_mask"], s["advantages"])
                   for s in rec.trained[2 * step:2 * step + 2]), Counter())
        assert got == want
        assert len(keep) < len(batch)
    logged = trainer.state.log_history[0]
    assert 0 < logged["fastrl/prune/kept_fraction"] < 1 and logged["fastrl/rollout/num_responses"] == 8
    assert "fastrl/prune/num_buckets" in logged


def test_fixed_minibatch_keeps_full_slices_and_fewer_steps_per_batch(tiny_dir: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tiny_dir, tmp_path, tau=1.0, update_mode="fixed_minibatch", max_steps=2,
                           steps_per_generation=4)
    rec = Recorder(trainer)
    trainer.train()
    # 16 rows generated per batch, kept rows refilled to a multiple of one optimizer step (4 x 2);
    # every slice holds per_device_train_batch_size = 4 rows; a batch lasts kept / 4 slices, so the
    # 4 micro-steps of 2 optimizer steps use as many batches as their kept rows need.
    kept = [len(advantage_only_prune(b.advantages, b.uids, align_to=8).kept) for b in rec.full]
    assert all(s["completion_ids"].shape[0] == 4 for s in rec.trained) and len(rec.trained) == 4
    assert sum(kept[:-1]) < 16 <= sum(kept) and min(kept) < 16
    want = sum((Counter((tuple(b.response_ids[i]), round(float(b.advantages[i]), 6))
                        for i in advantage_only_prune(b.advantages, b.uids, align_to=8).kept.tolist())
                for b in rec.full[:-1]), Counter())
    got = sum((rows(s["completion_ids"], s["completion_mask"], s["advantages"]) for s in rec.trained[:sum(kept[:-1]) // 4]),
              Counter())
    assert got == want


def test_dapo_normaliser_counts_kept_tokens(tiny_dir: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tiny_dir, tmp_path, tau=1.0, max_steps=1)
    rec = Recorder(trainer)
    trainer.train()
    kept_tokens = sum(int(s["completion_mask"].sum()) for s in rec.trained)
    assert all(int(s["num_items_in_batch"]) == kept_tokens for s in rec.trained)


def test_prune_batch_groups_rows_by_num_generations() -> None:
    out = {"completion_ids": torch.tensor([[5, 2, 0], [6, 0, 0], [5, 2, 0], [7, 7, 2]]),
           "completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1]]),
           "advantages": torch.tensor([1.0, -1.0, 1.0, 0.5])}
    batch = prune_batch_of(out, 2)
    assert list(batch.uids) == [0, 0, 1, 1] and batch.response_ids == [[5, 2], [6], [5, 2], [7, 7, 2]]


def test_bad_settings_fail_before_the_model_is_built() -> None:
    from fastrl.algorithms.pruning import CPPOPruner
    from fastrl.algorithms.sections import CPPOConfig

    with pytest.raises(ValueError, match="update_mode = 'fixed_steps' is not one of"):
        FastRLGRPOTrainer(model=None, pruner=make_pruner("mdap"), update_mode="fixed_steps")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prune_first = False"):
        FastRLGRPOTrainer(model=None, pruner=CPPOPruner(CPPOConfig(prune_first=False)))
    with pytest.raises(ValueError, match="tau = 2"):
        make_pruner("mdap", tau=2)
    with pytest.raises(ValueError, match="unknown pruner 'mdapp'"):
        make_pruner("mdapp")
