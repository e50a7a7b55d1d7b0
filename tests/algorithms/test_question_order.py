"""Issue 15, defect 10: MDAP visits questions as the release does, in ascending integer question id
(the release's ``question_id``: the row's index in the training set), not in the lexicographic
order of this project's string uids ("geometry3k-train-10" < "geometry3k-train-9")."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
import torch

from fastrl.algorithms.pruning import mdap_prune, random_prune


def _release_refill(kept: set[int], adv: list[float], qid_of: list[int], divisor: int) -> set[int]:
    """The release's phase 2 as its text reads (an independent transcription of the rule, not its
    code): questions in ascending integer id, each question's pruned responses by |A| descending,
    one response per visit, round-robin, until the kept count is a multiple of ``divisor``."""
    members: dict[int, list[int]] = defaultdict(list)
    for i, q in enumerate(qid_of):
        members[q].append(i)
    order = sorted(members)
    pruned = {q: sorted((i for i in members[q] if i not in kept), key=lambda i: -abs(adv[i])) for q in order}
    need = (divisor - len(kept) % divisor) % divisor
    out, visit = set(kept), 0
    while need and any(pruned.values()):
        q = order[visit % len(order)]
        visit += 1
        if pruned[q]:
            out.add(pruned[q].pop(0))
            need -= 1
    return out


def _batch():
    """Three questions whose uids sort 10 < 100 < 9 as strings; four responses each, all with the
    same tokens (J = 1: only each advantage bucket's seed survives), |A| distinct inside a bucket."""
    rows = [9, 100, 10]
    uids, qids, adv = [], [], []
    for row in rows:
        for a in (1.0, 1.0, -1.0, -1.0):
            uids.append(f"geometry3k-train-{row}")
            qids.append(row)
            adv.append(a)
    tokens = [[5, 6, 7]] * len(uids)
    return uids, qids, adv, tokens


def test_partial_refill_goes_where_the_release_sends_it():
    uids, qids, adv, tokens = _batch()
    phase1 = set(mdap_prune(adv, uids, tokens, tau=0.8, align_to=1).kept.tolist())
    assert len(phase1) == 6  # two seeds per question; 2 more needed to reach a multiple of 4
    release = _release_refill(phase1, adv, qids, divisor=4)
    got = set(mdap_prune(adv, uids, tokens, tau=0.8, align_to=4, question_ids=qids).kept.tolist())
    assert got == release
    refilled = {uids[i] for i in got - phase1}
    assert refilled == {"geometry3k-train-9", "geometry3k-train-10"}
    # by string uid the refill would go to 10 and 100: the deviation this fixes
    by_uid = set(mdap_prune(adv, uids, tokens, tau=0.8, align_to=4).kept.tolist())
    assert {uids[i] for i in by_uid - phase1} == {"geometry3k-train-10", "geometry3k-train-100"}


def test_random_differential_against_the_release_order():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        n_q = int(torch.randint(2, 7, (1,), generator=g))
        rows = torch.randperm(40, generator=g)[:n_q].tolist()
        uids, qids, adv, tokens = [], [], [], []
        for row in rows:
            n = int(torch.randint(2, 6, (1,), generator=g))
            for _ in range(n):
                uids.append(f"q-{row}")
                qids.append(row)
                adv.append(float(torch.randint(-2, 3, (1,), generator=g)))
                tokens.append(torch.randint(0, 6, (4,), generator=g).tolist())
        d = int(torch.randint(2, 9, (1,), generator=g))
        phase1 = set(mdap_prune(adv, uids, tokens, tau=0.5, align_to=1).kept.tolist())
        got = set(mdap_prune(adv, uids, tokens, tau=0.5, align_to=d, question_ids=qids).kept.tolist())
        if len(got) % d == 0 or len(got) == len(uids):
            assert got == _release_refill(phase1, adv, qids, d)


def test_question_ids_of_one_question_must_agree_and_missing_ids_fall_back_to_uid_order():
    uids, qids, adv, tokens = _batch()
    bad = list(qids)
    bad[1] = 7
    with pytest.raises(ValueError, match="geometry3k-train-9.*question ids"):
        mdap_prune(adv, uids, tokens, align_to=4, question_ids=bad)
    none = mdap_prune(adv, uids, tokens, align_to=4, question_ids=[None] * len(uids)).kept
    assert torch.equal(none, mdap_prune(adv, uids, tokens, align_to=4).kept)
    assert random_prune(adv, uids, align_to=4, generator=torch.Generator().manual_seed(1),
                        question_ids=qids).kept.numel() % 4 == 0


def test_training_files_carry_their_row_as_question_id(tmp_path):
    from fastrl.config import load_config
    from fastrl.training.setup import load_datasets

    files = []
    for name, n in (("a", 3), ("b", 2)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"uid": f"{name}-{i}", "problem": f"{i} + 1 ?", "images": [], "answer": "1",
                                            "source": "t", "meta": {}}) + "\n" for i in range(n)))
        files.append(str(path))
    cfg = load_config("methods/fastrl.yaml", ["data.task=files", "model.source=path", "model.path=some/model", f"data.train_files=[{','.join(files)}]",
                                              f"data.val_files=[{files[1]}]"], scale="smoke")
    train, val, _ = load_datasets(cfg)
    assert [r.row_id for r in train] == [0, 1, 2, 3, 4]  # file after file, as the release's start_question_id
    assert all(r.row_id is None for r in val)
