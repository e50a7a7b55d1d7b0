"""Is a warm-start recipe's accuracy a property of the recipe, or of one machine's rounding?

Builds one stand-in's SFT warm start several times under perturbations that stand in for another
machine (initial weights scaled by 1 + 1e-6 N(0,1) with 3 seeds, 2 torch threads instead of 1,
float64 loss accumulation) and measures each copy the way a Table 1 run measures its warm start:
in-domain and OOD accuracy at the validation sampling (T = 0.6, top-p 0.95) on the RL validation
problems, avg@k, plus greedy. Prints one line per copy and the largest deviation from the
unperturbed build; ``--json`` writes every number (docs/results.md, "Warm starts").

    PYTHONPATH=$PWD .venv/bin/python dev/sft_stability.py --slot vl_7b --out /tmp/stab --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastrl.config import HFEngineConfig
from fastrl.data.templates import TEMPLATE_REWARD
from fastrl.mini.builders import TinyModelSpec
from fastrl.mini.sft import EvalSettings, Perturbation, SelectionSettings, VariantMix, warm_start
from fastrl.mini.tasks import generate_task
from fastrl.policy import PolicySpec, load_policy_kit
from fastrl.rollout.base import SamplingConfig

# configs/tables/slots.yaml's mini stand-ins (model overrides) and their task's variants.
SLOTS: dict[str, dict[str, Any]] = {
    "vl_3b": dict(task="mini-geo", spec=dict(kind="qwen2_5_vl"), variants=("default", "total")),
    "vl_7b": dict(task="mini-geo", spec=dict(kind="qwen2_5_vl", hidden_size=192, num_heads=3, num_kv_heads=1,
                                              num_layers=3, intermediate_size=384), variants=("default", "total")),
    "llama_8b": dict(task="mini-math", spec=dict(kind="llama"), variants=("default", "long", "swap")),
    "qwen2": dict(task="mini-math", spec=dict(kind="qwen2"), variants=("default", "long")),
    # Table 8's grounding slot: accuracy is the mean IoU of the boxed box (grounding_iou).
    "qwen35_9b": dict(task="mini-box", spec=dict(kind="qwen2_5_vl"), variants=("default", "small", "green"),
                      template="fastrl_grounding"),
}


@dataclass(frozen=True)
class Copy:
    name: str
    perturbation: Perturbation = Perturbation()
    threads: int = 1


COPIES = (
    Copy("base"),
    *(Copy(f"init1e-6_s{k}", Perturbation(init_scale=1e-6, seed=k)) for k in (1, 2, 3)),
    Copy("threads2", threads=2),
    Copy("loss_float64", Perturbation(loss_float64=True)),
)


def measure(path: Path, task: str, variants: tuple[str, ...], *, num_val: int, k: int, max_new_tokens: int,
            data_seed: int, template: str = "fastrl_math") -> dict[str, float]:
    """Accuracy of the warm start in ``path`` per variant: avg@k at T=0.6/top-p 0.95 and greedy."""
    kit = load_policy_kit(PolicySpec(path=path, hf=HFEngineConfig(batch_size=128), reward=TEMPLATE_REWARD[template],
                                     template=template), torch.device("cpu"))
    out: dict[str, float] = {}
    for v in variants:
        records = generate_task(task, split="val", num=num_val, seed=data_seed, variant=v)
        prompts = [kit.encode(r) for r in records]
        for name, sampling, n in (
            ("t06", SamplingConfig(temperature=0.6, top_p=0.95, max_new_tokens=max_new_tokens, seed=1), k),
            ("greedy", SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens), 1),
        ):
            responses = kit.engine.generate(prompts, n, sampling)
            scores, _ = kit.score([r.text for r in responses], [records[r.prompt_index] for r in responses])
            out[f"{v}/{name}"] = float(np.mean([s["accuracy"] for s in scores]))
    return out


def report(paths: list[Path]) -> str:
    """A markdown table of the copies in ``--json`` files (one slot each): accuracy per copy in
    points, each copy's deviation from the base build, and the build's CPU seconds."""
    lines = []
    for path in paths:
        data = json.loads(path.read_text())
        rows = data["rows"]
        base = next(r for r in rows if r["copy"] == "base")
        keys = [k for k in base if "/" in k]
        lines += [f"{data['args']['slot']} ({path.name})", "",
                  "| copy | " + " | ".join(keys) + " | kept step | build CPU s |",
                  "|---" * (len(keys) + 3) + "|"]
        for r in rows:
            cells = [f"{100 * r[k]:.1f}" + ("" if r is base else f" ({100 * (r[k] - base[k]):+.1f})") for k in keys]
            lines.append(f"| {r['copy']} | " + " | ".join(cells) + f" | {r['selection'].get('kept_step')} | {r['cpu_s']:.0f} |")
        worst = {k: max(abs(r[k] - base[k]) for r in rows) for k in keys}
        lines += ["", "largest deviation from base (points): " + ", ".join(f"{k} {100 * v:.1f}" for k, v in worst.items()), ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--report", type=Path, nargs="+", help="print the table of earlier --json files and exit")
    p.add_argument("--slot", choices=sorted(SLOTS))
    p.add_argument("--out", type=Path, help="cache root (each copy builds under its own folder)")
    p.add_argument("--copies", nargs="*", default=[c.name for c in COPIES])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--answer-noise", type=float, default=0.3)
    p.add_argument("--num-train", type=int, default=2000, help="model.tiny.sft_num_train")
    p.add_argument("--mix-variant", default="", help="train a share of the SFT on this variant (VariantMix)")
    p.add_argument("--mix-fraction", type=float, default=0.0)
    p.add_argument("--select-every", type=int, default=0, help="0: keep the last step")
    p.add_argument("--select-prompts", type=int, default=256)
    p.add_argument("--patience", type=int, default=0)
    p.add_argument("--target", type=float, default=0.0, help="> 0: stop once held-out greedy accuracy reaches it")
    p.add_argument("--min-steps", type=int, default=0)
    p.add_argument("--anneal-steps", type=int, default=0, help="with --target: anneal this many steps after it")
    p.add_argument("--num-val", type=int, default=256)
    # 16: at 4 samples the T=0.6 accuracy of one copy has a sampling s.e. of ~1.4 points, ~2 on a
    # difference of two copies, too coarse for a +-3 check; 16 halves it.
    p.add_argument("--k", type=int, default=16, help="samples per validation problem at T=0.6")
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if args.report:
        print(report(args.report))
        return
    if args.slot is None or args.out is None:
        p.error("--slot and --out are needed to build (or --report FILES)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    slot = SLOTS[args.slot]
    template = slot.get("template", "fastrl_math")
    selection = SelectionSettings(every=args.select_every, num_prompts=args.select_prompts, patience=args.patience,
                                  min_steps=args.min_steps, target=args.target,
                                  anneal_steps=args.anneal_steps)
    rows = []
    for copy in (c for c in COPIES if c.name in args.copies):
        t0, c0 = time.perf_counter(), time.process_time()
        path = warm_start(slot["task"], TinyModelSpec(**slot["spec"]), out_root=args.out / copy.name, seed=1234,
                          steps=args.steps, lr=args.lr, batch_size=32, num_train=args.num_train,
                          answer_noise=args.answer_noise, template=template,
                          num_threads=copy.threads, eval_settings=EvalSettings(num_prompts=0), selection=selection,
                          perturbation=copy.perturbation, mix=VariantMix(args.mix_variant, args.mix_fraction))
        build = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
        manifest = json.loads((path / "sft_manifest.json").read_text())
        acc = measure(path, slot["task"], slot["variants"], num_val=args.num_val, k=args.k,
                      max_new_tokens=args.max_new_tokens, data_seed=1234, template=template)
        row = {"copy": copy.name, **acc, **build, "selection": manifest.get("selection", {})}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "selection"}), "kept", row["selection"].get("kept_step"),
              flush=True)
    base = next((r for r in rows if r["copy"] == "base"), None)
    if base is not None:
        keys = [k for k in base if "/" in k]
        dev = {k: max(abs(r[k] - base[k]) for r in rows) for k in keys}
        print("largest deviation from base (points):", {k: round(100 * v, 1) for k, v in dev.items()})
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
