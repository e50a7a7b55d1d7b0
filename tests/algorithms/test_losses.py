"""Policy losses, KL estimators and aggregation against scalar-loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrl.algorithms.losses import aggregate, kl_penalty, policy_loss


# ---------------------------------------------------------------- references (scalar loops)
def ref_ppo_token(lp: float, old: float, a: float, el: float, eh: float, c: float | None) -> float:
    r = math.exp(max(-20.0, min(20.0, lp - old)))
    objective = min(r * a, min(max(r, 1 - el), 1 + eh) * a)  # PPO's pessimistic objective
    if c is not None and a < 0:
        objective = max(objective, c * a)  # dual clip: bounded below by c * A
    return -objective


def ref_aggregate(v: np.ndarray, m: np.ndarray, mode: str, const: float | None = None) -> float:
    rows = range(v.shape[0])
    if mode == "token-mean":
        n = sum(m[i, t] for i in rows for t in range(v.shape[1]))
        return sum(v[i, t] for i in rows for t in range(v.shape[1]) if m[i, t]) / max(n, 1)
    if mode == "seq-mean-token-sum-norm":
        return sum(v[i, t] for i in rows for t in range(v.shape[1]) if m[i, t]) / (const or v.shape[1])
    per_seq = []
    for i in rows:
        toks = [v[i, t] for t in range(v.shape[1]) if m[i, t]]
        if toks:
            per_seq.append(sum(toks) / len(toks) if mode == "seq-mean-token-mean" else sum(toks))
    return sum(per_seq) / max(len(per_seq), 1)


def ref_kl(lp: float, ref: float, kind: str) -> float:
    if kind == "k1":
        return lp - ref
    if kind == "k2":
        return 0.5 * (lp - ref) ** 2
    x = max(-20.0, min(20.0, ref - lp))
    return max(-10.0, min(10.0, math.exp(x) - x - 1))


@st.composite
def token_batch(draw, min_rows: int = 1):
    b = draw(st.integers(min_rows, 5))
    t = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 10_000))
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    old = logp + torch.randn(b, t, generator=g, dtype=torch.float64) * draw(st.sampled_from([0.05, 0.3, 2.0]))
    mask = (torch.rand(b, t, generator=g) < 0.8).to(torch.float64)
    mask[:, 0] = 1.0  # at least one token per row
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    return logp, old, adv, mask


MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


@settings(max_examples=60, deadline=None)
@given(token_batch(), st.sampled_from(MODES), st.sampled_from([(0.2, 0.2), (0.2, 0.28), (0.2, 0.3)]),
       st.sampled_from([None, 3.0]), st.booleans())
def test_ppo_clip_matches_reference(batch, mode, clips, dual, token_adv):
    logp, old, adv, mask = batch
    el, eh = clips
    a2 = adv[:, None].expand_as(logp).clone() if token_adv else adv
    loss, metrics = policy_loss(logp, old, a2, mask, kind="ppo_clip", clip_low=el, clip_high=eh,
                                dual_clip=dual, agg=mode)
    per_tok = np.array([[ref_ppo_token(logp[i, t].item(), old[i, t].item(), adv[i].item(), el, eh, dual)
                         for t in range(logp.shape[1])] for i in range(logp.shape[0])])
    assert loss.item() == pytest.approx(ref_aggregate(per_tok, mask.numpy(), mode), rel=1e-9, abs=1e-12)
    assert not metrics["clipfrac"].requires_grad
    assert 0.0 <= metrics["clipfrac"].item() <= 1.0
    want_kl = ref_aggregate((old - logp).numpy(), mask.numpy(), "token-mean")
    assert metrics["ppo_kl"].item() == pytest.approx(want_kl, rel=1e-9, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(token_batch(), st.sampled_from([None, 3.0]))
def test_ppo_clip_gradient_is_zero_exactly_where_clipped(batch, dual):
    logp, old, adv, mask = batch
    lp = logp.clone().requires_grad_(True)
    loss, _ = policy_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.28, dual_clip=dual)
    loss.backward()
    n_tok = mask.sum().item()
    for i in range(lp.shape[0]):
        for t in range(lp.shape[1]):
            a = adv[i].item()
            d = lp[i, t].item() - old[i, t].item()
            r = math.exp(max(-20.0, min(20.0, d)))
            # the unclipped branch -A r carries the gradient unless the clip binds (A > 0 and
            # r > 1 + eps_high, or A < 0 and r < 1 - eps_low) or, for A < 0, the dual clip binds
            # (-A r > -A c, i.e. r > c; the clipped value 0.8 |A| never exceeds c |A|)
            clipped = (a > 0 and r > 1.28) or (a < 0 and r < 0.8)
            dual_binds = dual is not None and a < 0 and r > dual
            inside = abs(d) < 20
            want = 0.0 if (clipped or dual_binds or not mask[i, t] or not inside) else -a * r / n_tok
            assert lp.grad[i, t].item() == pytest.approx(want, rel=1e-9, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(token_batch())
def test_gspo_matches_reference(batch):
    logp, old, adv, mask = batch
    loss, _ = policy_loss(logp, old, adv, mask, kind="gspo", clip_low=3e-4, clip_high=4e-4,
                          agg="seq-mean-token-mean")
    per_seq = []
    for i in range(logp.shape[0]):
        d = [(logp[i, t] - old[i, t]).item() for t in range(logp.shape[1]) if mask[i, t]]
        s = math.exp(max(-20.0, min(20.0, sum(d) / len(d))))
        a = adv[i].item()
        per_seq.append(-min(s * a, min(max(s, 1 - 3e-4), 1 + 4e-4) * a))
    assert loss.item() == pytest.approx(sum(per_seq) / len(per_seq), rel=1e-9, abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(token_batch(), st.sampled_from([(3e-4, 4e-4), (0.2, 0.3)]))
def test_gspo_token_gradient_equals_gspo_gradient_for_sequence_advantages(batch, clips):
    logp, old, adv, mask = batch
    grads, values = [], []
    for kind in ("gspo", "gspo_token"):
        lp = logp.clone().requires_grad_(True)
        loss, _ = policy_loss(lp, old, adv, mask, kind=kind, clip_low=clips[0], clip_high=clips[1],
                              agg="seq-mean-token-mean")
        loss.backward()
        grads.append(lp.grad.clone())
        values.append(loss.item())
    assert values[0] == pytest.approx(values[1], rel=1e-12, abs=1e-14)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-14)


def test_gspo_token_admits_token_advantages_and_gspo_refuses_varying_ones():
    logp = torch.zeros(2, 3)
    mask = torch.ones(2, 3)
    adv = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])
    loss, _ = policy_loss(logp, logp, adv, mask, kind="gspo_token", clip_low=3e-4, clip_high=4e-4)
    assert loss.item() == pytest.approx(-(6.0 + 1.5) / 6)
    with pytest.raises(ValueError, match=r"row 0 .*varies.*gspo_token"):
        policy_loss(logp, logp, adv, mask, kind="gspo")
    const = torch.tensor([[1.0, 1.0, 1.0], [0.5, 0.5, 0.5]])
    a, _ = policy_loss(logp, logp, const, mask, kind="gspo")
    b, _ = policy_loss(logp, logp, const[:, 0], mask, kind="gspo")
    assert a.item() == b.item()


@settings(max_examples=60, deadline=None)
@given(token_batch(), st.sampled_from(["k1", "k2", "k3", "low_var_kl"]))
def test_kl_matches_reference(batch, kind):
    logp, ref, _, _ = batch
    ref = ref * 8  # reach the clamps sometimes
    got = kl_penalty(logp, ref, kind)
    want = [[ref_kl(logp[i, t].item(), ref[i, t].item(), kind) for t in range(logp.shape[1])]
            for i in range(logp.shape[0])]
    assert got.tolist() == [pytest.approx(row, rel=1e-9, abs=1e-12) for row in want]


def test_k3_clamps():
    lp = torch.tensor([[0.0, 0.0, -50.0]])
    ref = torch.tensor([[0.0, -50.0, 0.0]])
    out = kl_penalty(lp, ref, "k3")
    assert out[0, 0].item() == 0.0
    assert out[0, 1].item() == 10.0  # e^-20 + 20 - 1 = 19 > 10
    assert out[0, 2].item() == 10.0  # kl clamped to 20 first: e^20 - 21 -> clamped to 10


@settings(max_examples=60, deadline=None)
@given(token_batch(min_rows=2), st.data(), st.sampled_from(MODES[:3]))
def test_halves_with_global_counts_recombine_to_the_whole(batch, data, mode):
    logp, old, adv, mask = batch
    values = (logp - old) * 3.0
    split = data.draw(st.integers(1, logp.shape[0] - 1))
    whole = aggregate(values, mask, mode)
    tok = mask.sum()
    seqs = (mask.sum(-1) > 0).sum()
    parts = sum(aggregate(values[s], mask[s], mode, global_token_count=tok, global_seq_count=seqs)
                for s in (slice(0, split), slice(split, None)))
    assert parts.item() == pytest.approx(whole.item(), rel=1e-12, abs=1e-14)
    # the same for the policy loss and its gradient (what two data-parallel ranks compute)
    lp_whole = logp.clone().requires_grad_(True)
    policy_loss(lp_whole, old, adv, mask, agg=mode)[0].backward()
    lp_parts = logp.clone().requires_grad_(True)
    total = sum(policy_loss(lp_parts[s], old[s], adv[s], mask[s], agg=mode, global_token_count=tok,
                            global_seq_count=seqs)[0] for s in (slice(0, split), slice(split, None)))
    total.backward()
    torch.testing.assert_close(lp_parts.grad, lp_whole.grad, rtol=1e-10, atol=1e-14)


def test_aggregate_hand_cases():
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate(v, m, "token-mean").item() == pytest.approx(7 / 3)
    assert aggregate(v, m, "seq-mean-token-mean").item() == pytest.approx((1.5 + 4) / 2)
    assert aggregate(v, m, "seq-mean-token-sum").item() == pytest.approx((3 + 4) / 2)
    assert aggregate(v, m, "seq-mean-token-sum-norm").item() == pytest.approx(7 / 3)
    assert aggregate(v, m, "seq-mean-token-sum-norm", norm_constant=100).item() == pytest.approx(0.07)
    assert aggregate(v, torch.zeros_like(m), "token-mean").item() == 0.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kind="ppo"), r"unknown kind 'ppo'; valid kinds: ppo_clip, gspo, gspo_token"),
        (dict(agg="mean"), r"unknown mode 'mean'"),
        (dict(kind="gspo", dual_clip=3.0), r"dual_clip=3.0 applies only to the ppo_clip loss"),
        (dict(dual_clip=0.5), r"dual_clip = 0.5 must be > 1"),
        (dict(clip_low=1.5), r"clip_low"),
        (dict(global_token_count=0), r"global_token_count = 0.0 must be > 0"),
    ],
)
def test_policy_loss_bad_arguments(kwargs, match):
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=match):
        policy_loss(x, x, torch.zeros(2), torch.ones(2, 3), **kwargs)


def test_shape_errors():
    with pytest.raises(ValueError, match=r"logp and old_logp must have the same shape"):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"advantages must be \[B\] or \[B, T\]"):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"unknown kind 'k4'"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k4")


def test_each_policy_loss_is_its_own_registered_function():
    from fastrl.algorithms import losses, registry

    assert registry.get(registry.POLICY_LOSSES, "ppo_clip") is losses.ppo_clip_loss
    assert registry.get(registry.POLICY_LOSSES, "gspo") is losses.gspo_loss
    assert registry.get(registry.POLICY_LOSSES, "gspo_token") is losses.gspo_token_loss


def test_policy_loss_dispatches_to_a_plugin_loss(monkeypatch):
    from fastrl.algorithms import losses, registry

    calls = []

    def half_ppo(logp, old_logp, advantages, mask, settings):
        calls.append(settings)
        loss, metrics = registry.get(registry.POLICY_LOSSES, "ppo_clip")(logp, old_logp, advantages, mask, settings)
        return 0.5 * loss, metrics

    monkeypatch.setitem(registry.POLICY_LOSSES, "half_ppo", half_ppo)
    logp = torch.randn(2, 3)
    adv = torch.tensor([1.0, -1.0])
    full, _ = policy_loss(logp, logp + 0.1, adv, torch.ones(2, 3), kind="ppo_clip", clip_low=0.2, clip_high=0.2)
    half, _ = policy_loss(logp, logp + 0.1, adv, torch.ones(2, 3), kind="half_ppo", clip_low=0.2, clip_high=0.2)
    assert calls == [losses.ClipSettings(clip_low=0.2, clip_high=0.2)]
    assert torch.allclose(half, 0.5 * full)
