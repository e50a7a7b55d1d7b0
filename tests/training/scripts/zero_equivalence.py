"""Data-parallel equivalence run for the actor (launched by tests/training/test_distributed_zero.py).

One optimizer step on the fixed batch of ``tiny.py`` with a token-mean loss normalised by the
GLOBAL token count. With W ranks, rank r trains rows r, r+W, ... in ragged micro-batches; with one
rank the whole batch goes through one backward. For every requested engine ("plain" or a ZeRO
stage) rank 0 writes ``<out>/<engine>_ws<W>.pt``: the summed loss, grad norm, lr, every parameter
after the step (gathered), and the results of the checkpoint round trip (save after step 1, step
2; then a fresh actor loads the checkpoint and repeats step 2: parameters must be identical).
With ZeRO-3 it also checks ``build_reference`` (a ZeRO-3 reference engine) and ``export_hf``.

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 --master_port P zero_equivalence.py --out DIR
    python zero_equivalence.py --out DIR            # world size 1 (single-process group)
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import tiny  # noqa: E402
from fastrl.training import distributed as D  # noqa: E402
from fastrl.config import ModelConfig, OptimConfig, TrainerConfig  # noqa: E402
from fastrl.training.actor import Actor, build_reference  # noqa: E402
from fastrl.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint  # noqa: E402

# Adam's eps near the gradient scale (median |g| ~ 1e-3 after clipping) makes the update depend on
# gradient magnitudes, not only their signs; grad_clip below the measured norm (~2.49) keeps
# clipping active. An error in the overall gradient scale shows in the reported grad norm.
LR, EPS, CLIP = 1e-2, 1e-3, 1.0


def actor_config(engine: str) -> tuple[TrainerConfig, ModelConfig]:
    """``engine``: ``plain`` or ``zero<stage>``, optionally followed by ``+bf16``, ``+gc``
    (gradient checkpointing) and/or ``+offload`` (ZeRO-Offload, DeepSpeedCPUAdam), e.g.
    ``zero3+bf16+gc``."""
    base, *flags = engine.split("+")
    if base != "plain" and not (base.startswith("zero") and base[4:] in ("0", "1", "2", "3")):
        raise ValueError(f"unknown engine {engine!r}")
    if set(flags) - {"bf16", "gc", "offload"}:
        raise ValueError(f"unknown flags in engine {engine!r}")
    optim = OptimConfig(lr=LR, weight_decay=0.01, betas=(0.9, 0.99), eps=EPS, grad_clip=CLIP, warmup_steps=2,
                        offload="offload" in flags)
    trainer = TrainerConfig(optim=optim, zero_stage=0 if base == "plain" else int(base[4:]),
                            use_deepspeed=base != "plain", seed=3)
    model = ModelConfig(dtype="bfloat16" if "bf16" in flags else "float32", gradient_checkpointing="gc" in flags)
    return trainer, model


def train_step(actor: Actor, n_micro: int) -> tuple[float, dict[str, float]]:
    """One optimizer step on this rank's share; returns (loss summed over ranks, step metrics)."""
    ids, attn, loss_mask = tiny.fixed_batch()
    global_tokens = int(loss_mask.sum())
    local = 0.0
    for rows in tiny.rank_micro_batches(D.rank(), D.world_size(), n_micro):
        loss = tiny.micro_loss(actor.module, ids[rows], attn[rows], loss_mask[rows], global_tokens)
        actor.backward(loss)
        local += float(loss.detach())
    return float(D.all_reduce_sum(local)), actor.step()


def gathered(actor: Actor) -> dict[str, torch.Tensor]:
    return {n: t.float().cpu() for n, t in actor.named_parameters_for_sync()}


def run_engine(engine: str, out: Path, n_micro: int) -> dict:
    cfg = actor_config(engine)
    init = tiny.tiny_qwen2(seed=0)
    pristine = copy.deepcopy(init)
    t0 = time.perf_counter()
    actor = Actor(init, *cfg)
    t_init = time.perf_counter() - t0
    res: dict = {"engine": engine, "world_size": D.world_size(), "init_s": t_init}
    res["gradient_checkpointing"] = bool(getattr(actor.model, "is_gradient_checkpointing", False))
    res["param_dtype"] = str(next(actor.model.parameters()).dtype)

    if engine == "zero3":
        # The reference: its forward is collective under ZeRO-3; compare with the unwrapped copy.
        ref = build_reference(pristine, *cfg)
        ids, attn, mask = tiny.fixed_batch()
        with torch.no_grad():
            res["ref_logp"] = tiny.token_logp(ref, ids, attn)
            res["ref_requires_grad"] = any(p.requires_grad for p in ref.parameters())
            res["pristine_logp"] = tiny.token_logp(pristine, ids, attn)

    t0 = time.perf_counter()
    res["loss_sum"], metrics = train_step(actor, n_micro)
    res["step_s"] = time.perf_counter() - t0
    res["grad_norm"], res["lr"] = metrics["actor/grad_norm"], metrics["actor/lr"]
    res["params"] = gathered(actor)

    run_dir = out / f"run_{engine}_ws{D.world_size()}"
    t0 = time.perf_counter()
    save_checkpoint(run_dir, 1, actor, {"data_pos": 6, "engine": engine}, keep=2)
    res["save_s"] = time.perf_counter() - t0
    _, m2 = train_step(actor, n_micro)
    res["lr2"] = m2["actor/lr"]
    res["params2"] = gathered(actor)

    if engine == "zero3":
        export_dir = out / f"export_ws{D.world_size()}"
        actor.export_hf(export_dir)
        res["export_dir"] = str(export_dir)

    resumed = Actor(copy.deepcopy(pristine), *cfg)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise RuntimeError(f"no checkpoint found under {run_dir}")
    state = load_checkpoint(ckpt, resumed)
    res["resumed_state"] = state
    res["resumed_steps"] = resumed.num_steps
    _, m2b = train_step(resumed, n_micro)
    res["lr2_resumed"] = m2b["actor/lr"]
    res["params2_resumed"] = gathered(resumed)
    return res


class _PartlyUsed(torch.nn.Module):
    """A model whose ``unused`` layer never receives a gradient."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.used = torch.nn.Linear(4, 4)
        self.unused = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def unused_parameter_updates() -> dict[str, dict[str, torch.Tensor]]:
    """Parameters after one step where one layer got no gradient, per engine (weight decay on)."""
    out = {}
    for engine in ("plain", "zero0", "zero1", "zero2", "zero3"):
        trainer, model = actor_config(engine)
        actor = Actor(_PartlyUsed(), replace(trainer, optim=replace(trainer.optim, weight_decay=0.5)), model)
        actor.backward(actor.module(torch.ones(2, 4)).sum())
        actor.step()
        out[engine] = gathered(actor)
    return out


def check_helpers() -> dict:
    """Results of the collective helpers, recorded for the test to assert on."""
    r, w = D.rank(), D.world_size()
    return {
        "rank_world": D.all_gather_object((r, w, D.is_main())),
        "sum_float": D.all_reduce_sum(float(r + 1)),
        "sum_tensor": D.all_reduce_sum(torch.tensor([r + 1.0, 2.0 * r])).tolist(),
        "broadcast": D.broadcast_object({"from": r}, src=w - 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--engines", default="zero3,zero2,zero1,zero0,plain,zero3+bf16+gc")
    ap.add_argument("--n-micro", type=int, default=2, help="micro-batches per rank (W > 1)")
    ap.add_argument("--unused-check", action="store_true", help="also run unused_parameter_updates")
    ap.add_argument("--local_rank", type=int, default=None, help="set by the deepspeed launcher")
    args = ap.parse_args()

    D.init_distributed(single_process_group=True)
    D.init_distributed()  # idempotent: a second call must be harmless
    n_micro = args.n_micro if D.world_size() > 1 else 1
    results = {"helpers": check_helpers()}
    for engine in args.engines.split(","):
        res = run_engine(engine, args.out, n_micro)
        if D.is_main():
            torch.save(res, args.out / f"{engine}_ws{D.world_size()}.pt")
        results[engine] = {k: v for k, v in res.items() if k.endswith("_s")}
    if args.unused_check:
        unused = unused_parameter_updates()
        if D.is_main():
            torch.save(unused, args.out / f"unused_ws{D.world_size()}.pt")
    if D.is_main():
        (args.out / f"summary_ws{D.world_size()}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
    D.exit_process(0)  # leaves the group and skips the teardown ranks were seen to abort in
