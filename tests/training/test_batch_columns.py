"""Issue 18, item 4: the columnar rollout batch.

Columns stay aligned through ``select`` / ``concat``; old and reference log-probs are columns, so
CPPO's full-batch pass is a ``select`` of computed rows; and a rank builds pixel values only for
the rows it generates for or forwards (before, every rank materialized every prompt of the batch).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fastrl.config import load_config
from fastrl.models.inputs import PromptInput, PromptTokens
from fastrl.training import distributed as dist
from fastrl.training import pipeline, update
from fastrl.training.batch import PromptColumn, ResponseColumns, RolloutBatch
from fastrl.training.pipeline import Trainer


def _batch() -> RolloutBatch:
    ids = [[5, 6], [7, 8, 9], [4], [3, 2, 1, 0]]
    return RolloutBatch.from_rows(
        prompts=[PromptInput(u, [1, 2]) for u in ("a", "a", "b", "b")], uids=["a", "a", "b", "b"],
        response_ids=ids, texts=["t0", "t1", "t2", "t3"],
        engine_logprobs=[[-0.5] * 2, [-0.25] * 3, [], [-1.0] * 4], finish_reasons=["stop"] * 4,
        records=["r0", "r1", "r2", "r3"], rewards=torch.tensor([1.0, 0.0, 0.5, 1.5]),
        accuracies=torch.tensor([1.0, 0.0, 0.0, 1.0]))


def test_select_keeps_every_column_aligned():
    batch = _batch()
    old = torch.arange(16, dtype=torch.float32).reshape(4, 4) * batch.response_mask
    batch = batch.with_columns(advantages=torch.tensor([0.1, 0.2, 0.3, 0.4]), old_logprobs=old)
    picked = batch.select([3, 0])
    assert picked.uids == ["b", "a"] and picked.texts == ["t3", "t0"] and picked.records == ["r3", "r0"]
    assert picked.response_ids == [[3, 2, 1, 0], [5, 6]]
    assert picked.rewards.tolist() == [1.5, 1.0] and picked.advantages.tolist() == pytest.approx([0.4, 0.1])
    assert torch.equal(picked.old_logprobs, old[[3, 0]]) and picked.width == batch.width == 4
    assert picked.has_engine_logprobs.tolist() == [True, True] and batch.has_engine_logprobs.tolist()[2] is False
    assert [p.uid for p in picked.prompts] == ["b", "a"]


def test_concat_pads_to_the_widest_and_refuses_half_set_columns():
    batch = _batch()
    joined = RolloutBatch.concat([batch.select([0]), batch.select([2]).with_columns(
        responses=torch.tensor([[4]]), response_mask=torch.ones(1, 1), engine_logprobs=torch.zeros(1, 1))])
    assert joined.width == 4 and joined.response_ids == [[5, 6], [4]] and joined.num_response_tokens() == 3
    with pytest.raises(ValueError, match="advantages is set on some batches only"):
        RolloutBatch.concat([batch.select([0]).with_columns(advantages=torch.zeros(1)), batch.select([1])])
    with pytest.raises(ValueError, match="old_logprobs is"):
        batch.with_columns(old_logprobs=torch.zeros(4, 2))


def test_prompt_column_builds_once_per_uid_and_only_the_rows_asked_for():
    built: list[str] = []

    def build(tokens: PromptTokens) -> PromptInput:
        built.append(tokens.uid)
        return PromptInput(tokens.uid, tokens.prompt_ids)

    column = PromptColumn([PromptTokens(u, [1]) for u in ("a", "a", "b", "c")], build=build)
    part = column.select([3, 0, 1])
    assert [p.uid for p in part.inputs([1, 2])] == ["a", "a"] and built == ["a"]
    column.inputs([0, 3])  # the selected column shares the cache: "a" is not built again
    assert built == ["a", "c"]


def test_merged_parts_are_in_prompt_order_stable_within_a_prompt():
    """The gather: rank 0 answered prompts 0 and 2, rank 1 prompt 1; rows come back by prompt."""
    def part(index, ids):
        return ResponseColumns.from_rows(index, ids, [str(r) for r in ids], [[-1.0] * len(r) for r in ids],
                                         ["stop"] * len(ids), rewards=torch.tensor([float(i) for i in index]),
                                         accuracies=torch.zeros(len(ids)))

    merged = ResponseColumns.merge([part([0, 0, 2], [[1], [2, 2], [3]]), part([1, 1], [[4, 4, 4], [5]])])
    assert merged.prompt_index.tolist() == [0, 0, 1, 1, 2] and merged.texts == ["[1]", "[2, 2]", "[4, 4, 4]", "[5]", "[3]"]
    assert merged.responses.tolist() == [[1, 0, 0], [2, 2, 0], [4, 4, 4], [5, 0, 0], [3, 0, 0]]
    assert merged.rewards.tolist() == [0.0, 0.0, 1.0, 1.0, 2.0] and merged.engine_logprobs.sum() == -8.0


def _counting_trainer(tmp_path: Path, monkeypatch) -> tuple[Trainer, list[str]]:
    cfg = load_config("methods/fastrl.yaml", [f"trainer.run_dir={tmp_path}", "data.task=mini-geo",
                                              "model.kind=qwen2_5_vl", "trainer.resume=false"], scale="smoke")
    trainer = Trainer(cfg)
    built: list[str] = []
    real = trainer.policy.kit.materialize

    def materialize(tokens):
        built.append(tokens.uid)
        return real(tokens)

    monkeypatch.setattr(trainer.policy.kit, "materialize", materialize)
    return trainer, built


def test_a_rank_builds_pixels_only_for_the_rows_it_generates_for_or_forwards(tmp_path: Path, monkeypatch):
    """Rank 0 of 2 (the other rank simulated: its gathered responses are ours, moved to its prompts)."""
    trainer, built = _counting_trainer(tmp_path, monkeypatch)
    monkeypatch.setattr(dist, "rank", lambda: 0)
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    monkeypatch.setattr(dist, "all_reduce_sum", lambda x: x.clone() if isinstance(x, torch.Tensor) else float(x))
    generated, forwarded = [], []

    def gather(obj):  # generate's (responses, reward stats): rank 1 answered prompts 1, 3, ...
        if not (isinstance(obj, tuple) and isinstance(obj[1], dict)):
            return [obj, obj]  # anything else (the actor's backward counts): rank 1 agrees
        local, stats, errors = obj
        generated.extend(sorted(set(local.prompt_index.tolist())))
        return [obj, (replace(local, prompt_index=local.prompt_index + 1), stats, errors)]

    def update_policy(actor, batch, plan, *, pad_id, **kw):  # its forward inputs, without the 2-rank all-reduce
        forwarded.extend(batch.uids)
        for rows in plan.minibatches:
            update._batch_tensors(batch, rows, pad_id)
        return {}

    monkeypatch.setattr(dist, "all_gather_object", gather)
    monkeypatch.setattr(pipeline, "update_policy", update_policy)
    records, built_by_generate = [], []
    real_generate = trainer.generate

    def generate(rs, timer):
        records.extend(rs)
        out = real_generate(rs, timer)
        built_by_generate.extend(built)
        return out

    monkeypatch.setattr(trainer, "generate", generate)
    metrics = trainer.train_step()
    trainer.close()
    ours = {records[i].uid for i in generated}
    assert len(records) == 4 and ours == {records[0].uid, records[2].uid}
    assert sorted(built_by_generate) == sorted(ours)  # the rollout: our prompts only, not rank 1's
    assert metrics["prune/kept"] < metrics["rollout/num_responses"]
    # then once per uid for the rows we forward (old/ref log-probs, update): never the whole batch's
    assert sorted(built) == sorted(ours | set(forwarded))


def test_gathered_log_prob_rows_land_on_the_rows_each_rank_computed(monkeypatch):
    """CPPO's full-batch pass on 2 ranks: rank r computes rows r::2; the gather interleaves them back."""
    rank0, rank1 = torch.tensor([[0.0, 0.5], [2.0, 2.5], [4.0, 4.5]]), torch.tensor([[1.0, 1.5], [3.0, 3.5]])
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    monkeypatch.setattr(dist, "all_gather_object", lambda obj: [rank0, rank1])
    merged = pipeline._gather_rows(rank0, 5)
    assert merged[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0] and merged[:, 1].tolist() == [0.5, 1.5, 2.5, 3.5, 4.5]


def test_packed_responses_are_the_response_ids_packed():
    from fastrl.algorithms.similarity import PackedTokens

    batch = _batch().select([3, 1, 2])
    packed, from_lists = batch.packed_responses, PackedTokens.from_sequences(batch.response_ids)
    assert torch.equal(packed.flat, from_lists.flat) and torch.equal(packed.lengths, from_lists.lengths)
