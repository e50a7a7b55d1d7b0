"""Pilot: do annealed continuations of converged large warm starts agree at T=0.6?"""
import json, sys, time, logging
from pathlib import Path
import numpy as np, torch
import fastrl.mini.sft as S
from fastrl.config import HFEngineConfig
from fastrl.data.templates import TEMPLATE_REWARD
from fastrl.mini.tasks import generate_task
from fastrl.policy import PolicySpec, load_policy_kit
from fastrl.rollout.base import SamplingConfig

src, out, lr0, steps, every, k = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(1)
logging.basicConfig(level=logging.WARNING)
kit = load_policy_kit(PolicySpec(path=src, hf=HFEngineConfig(batch_size=128), reward=TEMPLATE_REWARD["fastrl_math"], template="fastrl_math"), torch.device("cpu"))
val = {v: generate_task("mini-geo", split="val", num=256, seed=1234, variant=v) for v in ("default", "total")}
def measure():
    res = {}
    kit.model.eval()
    with torch.no_grad():
        for v, recs in val.items():
            prompts = [kit.encode(r) for r in recs]
            for name, sc, n in (("t06", SamplingConfig(temperature=0.6, top_p=0.95, max_new_tokens=40, seed=1), k),
                                ("greedy", SamplingConfig(temperature=0.0, max_new_tokens=40), 1)):
                resp = kit.engine.generate(prompts, n, sc)
                sc_, _ = kit.score([r.text for r in resp], [recs[r.prompt_index] for r in resp])
                res[f"{v}/{name}"] = float(np.mean([s["accuracy"] for s in sc_]))
    kit.model.train()
    return res
mix = S.VariantMix("total", 0.25)
train = S.sft_problems("mini-geo", 2000 + 256, 1234, mix)[:2000]
prompts = [kit.encode(r) for r in train]
targets = S._route_ids(kit.tokenizer, train)
noisy = S._noisy_route_ids(kit.tokenizer, train, 1234)
S._lr_at = lambda step, steps_, lr, warmup: lr * min(1.0, (step + 1) / warmup) * (1 - step / steps_)
rows = []
r = {"step": 0, **measure(), "cpu": time.process_time()}; print(json.dumps(r), flush=True); rows.append(r)
model = kit.model
for chunk in range(steps // every):
    # one call per chunk: fresh optimizer each chunk would be wrong, so patch a step offset instead
    pass
# single call with selection hooking evaluate
curve = []
def ev(m):
    r = measure(); r["cpu"] = time.process_time(); curve.append(r); print(json.dumps(r), flush=True); return r["default/greedy"]
torch.manual_seed(7)
S.train_sft(model, prompts, targets, pad_id=kit.pad_id, seed=99, steps=steps, lr=lr0, batch_size=32, warmup_frac=0.05,
            weight_decay=0.0, log_every=10**9, noisy_targets=noisy, answer_noise=0.5,
            selection=S.SelectionSettings(every=every, num_prompts=256), evaluate=ev)
json.dump({"src": str(src), "start": rows[0], "curve": curve}, open(out, "w"), indent=1)
