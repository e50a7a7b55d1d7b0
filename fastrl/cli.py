"""``fastrl train|sweep|sft|eval|demo`` — the command line.

    fastrl train configs/methods/fastrl.yaml --scale mini algorithm.mdap.tau=0.6
    fastrl sweep configs/tables/tau_sweep.yaml --scale smoke
    fastrl demo

A bad config key or value, a missing file or model path and other bad input end with one line,
``fastrl: error: ...``, and exit code 2; ``fastrl --debug ...`` adds the traceback.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _default_accelerator() -> None:
    """DeepSpeed on a CPU-only box needs DS_ACCELERATOR=cpu; leave any explicit choice alone."""
    if "DS_ACCELERATOR" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ["DS_ACCELERATOR"] = "cpu"


def _train(config: str, overrides: Sequence[str], scale: str | None) -> dict[str, Any]:
    from fastrl.config import load_config
    from fastrl.training.pipeline import Trainer

    cfg = load_config(config, overrides, scale=scale)
    trainer = Trainer(cfg)
    summary = trainer.fit()
    summary.update({"method": cfg.method, "run_dir": cfg.trainer.run_dir})
    return summary


def cmd_train(args: argparse.Namespace) -> int:
    summary = _train(args.config, args.overrides, args.scale)
    print(json.dumps(summary, indent=2))
    return 0


def sweep_points(spec: dict[str, list[Any]]) -> list[list[str]]:
    """Cartesian product of ``{dotted.key: [values]}`` as lists of ``key=value`` overrides."""
    keys = list(spec)
    return [[f"{k}={v}" for k, v in zip(keys, combo)] for combo in itertools.product(*(spec[k] for k in keys))]


def cmd_sweep(args: argparse.Namespace) -> int:
    import yaml

    from fastrl.config import ConfigError, _resolve_path, load_config

    path = _resolve_path(args.sweep)
    spec = yaml.safe_load(path.read_text()) or {}
    if set(spec) - {"base", "sweep"} or "base" not in spec or "sweep" not in spec:
        raise ConfigError(f"{path}: a sweep file has exactly the keys 'base' (a config) and 'sweep' (key: [values])")
    base_run = load_config(spec["base"], args.overrides, scale=args.scale).trainer.run_dir
    results = []
    for point in sweep_points(spec["sweep"]):
        tag = ",".join(p.replace("algorithm.", "") for p in point)
        run_dir = f"{base_run}/sweep/{tag}"
        results.append({"point": point, **_train(spec["base"], [*args.overrides, *point, f"trainer.run_dir={run_dir}"], args.scale)})
    print(json.dumps(results, indent=2))
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from fastrl.config import load_config
    from fastrl.training.setup import resolve_policy_path

    cfg = load_config(args.config, args.overrides, scale=args.scale)
    print(resolve_policy_path(cfg))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from fastrl.demo import run_demo

    run_demo(out_dir=Path(args.out), scale=args.scale, overrides=args.overrides)
    return 0


def parse_benchmark(spec: str):
    """``name=path.parquet|jsonl`` (canonical records) or ``task[:variant]`` for a generated task."""
    from fastrl.data.loaders import load_records
    from fastrl.data.synthetic import generate_task

    if "=" in spec:
        name, path = spec.split("=", 1)
        return name, load_records(path)
    task, _, variant = spec.partition(":")
    return spec, generate_task(task, split="val", num=200, seed=1234, variant=variant or "default")


# A Hugging Face hub id: namespace/name (letters, digits, '-', '_', '.'), not starting with '.'.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_id(model: str) -> bool:
    """Whether ``model`` (not an existing path) reads as a hub id such as ``Qwen/Qwen2.5-VL-7B-Instruct``
    rather than a local path: ``namespace/name``, and ``namespace`` is not a local directory
    (``runs/typo`` is a mistyped run directory, not a model on the hub)."""
    return bool(_HUB_ID.fullmatch(model)) and not Path(model.split("/", 1)[0]).is_dir()


def check_model_arg(model: str) -> None:
    """A ``--model`` that is neither an existing path nor a hub id is a one-line error up front,
    not an OSError traceback from transformers."""
    if not Path(model).exists() and not is_hub_id(model):
        raise FileNotFoundError(f"--model {model!r}: no such run or model directory (and not a hub id "
                                "namespace/name)")


def cmd_eval(args: argparse.Namespace) -> int:
    check_model_arg(args.model)
    from fastrl.data.templates import build_prompt_text
    from fastrl.evaluation.evaluate import evaluate, validation_sampling
    from fastrl.evaluation.metrics import markdown_table, write_json, write_markdown
    from fastrl.models.builders import is_fastrl_tiny_dir, load_policy
    from fastrl.models.device import resolve_device, resolve_dtype
    from fastrl.models.processing import PromptEncoder

    model_path = Path(args.model)
    if (model_path / "final").is_dir():  # a run directory from `fastrl train`
        model_path = model_path / "final"
    device = resolve_device(args.device, key="--device")
    dtype = resolve_dtype(args.dtype or "float32", key="--dtype")
    model, processor = load_policy(model_path if model_path.exists() else args.model, dtype=dtype)
    pixels = {} if is_fastrl_tiny_dir(model_path) else {"min_pixels": args.min_pixels, "max_pixels": args.max_pixels}
    encoder = PromptEncoder.from_processor(processor, **pixels)
    if args.engine == "hf":
        from fastrl.rollout.hf import HFRolloutEngine

        tok = getattr(processor, "tokenizer", processor)
        engine = HFRolloutEngine(model.to(device).eval(), tok, eos_token_ids=[tok.eos_token_id],
                                 pad_token_id=tok.pad_token_id, batch_size=args.batch_size)
    else:
        from fastrl.rollout.vllm import VLLMRolloutEngine

        engine = VLLMRolloutEngine(str(model_path), seed=args.seed, max_model_len=args.max_model_len,
                                   gpu_memory_utilization=args.gpu_memory_utilization, dtype=args.dtype or "auto",
                                   enforce_eager=True)
    benchmarks = {name: records[: args.limit] if args.limit else records
                  for name, records in (parse_benchmark(b) for b in args.benchmark)}
    results = evaluate(
        engine, lambda r: encoder.encode(r.uid, build_prompt_text(r, args.template), list(r.images)),
        benchmarks, sampling=validation_sampling(args.sampling, max_new_tokens=args.max_new_tokens, seed=args.seed),
        k=args.k, reward_fn_name=args.reward,
    )
    out = Path(args.out)
    write_json(results, out / "eval.json")
    write_markdown(results, out / "eval.md")
    print(markdown_table(results))
    print(f"wrote {out / 'eval.json'} and {out / 'eval.md'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fastrl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    debug_help = "on an error, print the full traceback too (not only the one-line message)"
    p.add_argument("--debug", action="store_true", help=debug_help)
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train one method: fastrl train CONFIG [key=value ...]")
    t.add_argument("config", help="a YAML under configs/ (e.g. methods/fastrl.yaml) or a path")
    t.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
    t.add_argument("--scale", default=None, help="smoke | mini | paper (default: the config's, else mini)")
    t.set_defaults(func=cmd_train)

    s = sub.add_parser("sweep", help="run a sweep file: {base: CONFIG, sweep: {key: [values]}}")
    s.add_argument("sweep")
    s.add_argument("overrides", nargs="*")
    s.add_argument("--scale", default=None)
    s.set_defaults(func=cmd_sweep)

    f = sub.add_parser("sft", help="build (or reuse) the SFT warm start of the tiny model; print its path")
    f.add_argument("config", nargs="?", default="methods/grpo.yaml")
    f.add_argument("overrides", nargs="*")
    f.add_argument("--scale", default=None)
    f.set_defaults(func=cmd_sft)

    d = sub.add_parser("demo", help="GRPO vs FastRL on mini-math, same seed and steps, side by side")
    d.add_argument("--out", default="runs/demo")
    d.add_argument("--scale", default="mini")
    d.add_argument("overrides", nargs="*")
    d.set_defaults(func=cmd_demo)

    e = sub.add_parser("eval", help="evaluate a trained run, a model dir or an HF model id on benchmarks")
    e.add_argument("--model", required=True, help="run dir (uses <run>/final), model dir or HF id")
    e.add_argument("--benchmark", action="append", required=True,
                   help="name=path.parquet|jsonl (canonical records) or task[:variant]; repeatable")
    e.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    e.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="hf engine: where the model runs (auto = cuda when available)")
    e.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                   help="default: float32 (hf), the checkpoint's own dtype (vllm)")
    e.add_argument("--min-pixels", type=int, default=262144, help="VL image resize (qwen-vl-utils rule)")
    e.add_argument("--max-pixels", type=int, default=4194304)
    e.add_argument("--sampling", choices=["greedy", "paper"], default="greedy",
                   help="greedy, or the paper's validation sampling (T=0.6, top-p 0.95)")
    e.add_argument("--k", type=int, default=1, help="samples per problem (avg@k, pass@k; Table 4 uses 16)")
    e.add_argument("--reward", default="math")
    e.add_argument("--template", default="fastrl_math")
    e.add_argument("--max-new-tokens", type=int, default=512)
    e.add_argument("--max-model-len", type=int, default=4096)
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument("--gpu-memory-utilization", type=float, default=0.8)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--limit", type=int, default=0, help="first N problems of each benchmark (0: all)")
    e.add_argument("--out", default="runs/eval")
    e.set_defaults(func=cmd_eval)
    for sp in (t, s, f, d, e):  # `fastrl train CFG --debug` works as well as `fastrl --debug train CFG`
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The `deepspeed` launcher appends --local_rank=R; the rank comes from the environment instead.
    argv = [a for a in argv if not a.startswith("--local_rank")]
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # Overrides may come after options (`train CFG --scale smoke a.b=1`): argparse leaves those here.
    bad = [a for a in extra if "=" not in a or a.startswith("-")]
    if bad or (extra and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(bad or extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    _default_accelerator()
    try:
        code = int(args.func(args) or 0)
    # Bad input: ConfigError, DataError and RecordError are ValueErrors; a missing file or model path
    # is a FileNotFoundError. Anything else is a bug and keeps its traceback.
    except (ValueError, FileNotFoundError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    from fastrl.training.distributed import shutdown_distributed

    shutdown_distributed()
    return code


if __name__ == "__main__":
    sys.exit(main())
