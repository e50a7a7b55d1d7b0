"""Issue 17, host work at the paper's batch: each rank scores only its own responses and the
gather carries their scores (before, every rank re-scored the whole gathered batch), and the update
pads its per-response rows once, when the batch is built (``pad_rows``)."""

from __future__ import annotations

from pathlib import Path

import torch

from fastrl.training import distributed as dist
from fastrl.training.batch import ResponseColumns, pad_rows
from fastrl.training.metrics import StageTimer
from tests.mini.conftest import one_torch_thread, text_model_dir  # noqa: F401  (fixtures)
from tests.training.test_engine_calls import _trainer


def test_a_rank_scores_its_own_responses_and_gathers_the_others_scores(tmp_path: Path, text_model_dir: Path,
                                                                       monkeypatch) -> None:
    trainer = _trainer(tmp_path, text_model_dir)
    records = trainer.train_records[:3]
    scored: list[list[str]] = []
    real_score = trainer.policy.kit.score

    def score(texts, graded, reward=None, errors=None):
        scored.append([r.uid for r in graded])
        return real_score(texts, graded, reward, errors=errors)

    # rank 0 of 2: prompts 0 and 2 are ours; rank 1 generated prompt 1, scored it 1.5 / 1.0, and had 1 failure
    other = (ResponseColumns.from_rows([1], [[7, 8]], ["other rank's text"], [[-0.5, -0.5]], ["stop"],
                                       rewards=torch.tensor([1.5]), accuracies=torch.tensor([1.0])),
             {"reward/failures": 1.0, "reward/timeouts": 0.0, "reward/n": 1.0}, ["ValueError: rank 1's"])
    monkeypatch.setattr(dist, "rank", lambda: 0)
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    monkeypatch.setattr(dist, "all_gather_object", lambda obj: [obj, other])
    monkeypatch.setattr(trainer.policy.kit, "score", score)
    batch, reward_stats, first_error = trainer.generate(records, StageTimer())
    trainer.close()
    n = trainer.cfg.rollout.n
    assert scored == [[records[0].uid] * n + [records[2].uid] * n]  # ours only, never prompt 1
    assert batch.uids == [records[0].uid] * n + [records[1].uid] + [records[2].uid] * n
    assert batch.rewards[n].item() == 1.5 and batch.accuracies[n].item() == 1.0  # the other rank's score
    assert batch.response_ids[n] == [7, 8] and batch.texts[n] == "other rank's text"
    assert reward_stats["reward/n"] == 2 * n + 1 and reward_stats["reward/failures"] >= 1.0  # returned, summed over ranks
    assert first_error is not None  # ours if rank 0 failed too, else rank 1's
    assert not hasattr(trainer, "_reward_stats")


def test_pad_rows_is_the_row_by_row_copy():
    rows = [[1.0, 2.0], [], [3.0, 4.0, 5.0]]
    out, mask = pad_rows(rows, torch.float32, width=5)
    ref = torch.zeros(3, 5)
    for r, t in enumerate(rows):
        ref[r, : len(t)] = torch.tensor(t)
    assert out.dtype == torch.float32 and torch.equal(out, ref)
    assert mask.tolist() == [[True, True, False, False, False], [False] * 5, [True, True, True, False, False]]
