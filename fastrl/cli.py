"""``fastrl train|sweep|sft|eval|demo`` — the command line.

    fastrl train configs/methods/fastrl.yaml --scale mini algorithm.mdap.tau=0.6
    fastrl train methods/grpo.yaml --import my_pkg.my_pruner algorithm.pruner=keep_top algorithm.keep_top.fraction=0.5
    fastrl sweep configs/tables/tau_sweep.yaml --scale smoke
    fastrl demo

A bad config key or value, a missing file or model path and other bad input end with one line,
``fastrl: error: ...``, and exit code 2; ``fastrl --debug ...`` adds the traceback. Ctrl-C (SIGINT)
ends with ``fastrl: interrupted (SIGINT)`` and exit code 130; SIGTERM (``kill``, a scheduler's
preemption) the same way, ``fastrl: interrupted (SIGTERM)`` and exit code 143. Either unwinds
the trainer (run-dir lock released; the run resumes from its last checkpoint).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence

from fastrl import api  # torch-free to import: `fastrl --help` stays fast
from fastrl.config import MODEL_DEVICES, MODEL_DTYPES, PROMPT_LENGTH_POLICIES, ROLLOUT_ENGINES

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def cmd_train(args: argparse.Namespace) -> int:
    summary = api.train(args.config, args.overrides, args.scale, force_new=args.force_new, imports=args.imports)
    print(json.dumps(summary, indent=2))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    print(json.dumps(api.sweep(args.sweep, args.overrides, args.scale), indent=2))
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    print(api.sft(args.config, args.overrides, args.scale))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from fastrl.demo import run_demo

    run_demo(out_dir=Path(args.out), scale=args.scale, overrides=args.overrides)
    return 0


def check_model_arg(model: str) -> None:
    """A ``--model`` that is neither an existing path nor a hub id, or a directory that holds no
    model (a checkpoint, an unfinished run), is a one-line error up front, not an OSError
    traceback from transformers."""
    api.resolve_eval_model(model, name="--model")


def name_value_pairs(pairs: Sequence[str], *, flag: str) -> dict[str, str]:
    """``["NAME=VALUE", ...]`` -> {NAME: VALUE}; the benchmark name may itself hold ``:``."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.rpartition("=")
        if not sep or not name or not value:
            raise ValueError(f"eval {flag} {pair!r}: expected BENCHMARK=VALUE (e.g. {flag} mini-geo:total=fastrl_math)")
        out[name] = value
    return out


def write_eval(results: dict[str, Any], out: Path, *, per_benchmark: bool) -> list[Path]:
    """``<out>/eval.json`` (+ .md), or with ``per_benchmark`` one ``<out>/<benchmark>/eval.json`` each."""
    from fastrl.evaluation.evaluate import split_by_benchmark
    from fastrl.evaluation.metrics import benchmark_dirname, write_json, write_markdown

    parts = ({out / benchmark_dirname(b): r for b, r in split_by_benchmark(results).items()} if per_benchmark
             else {out: results})
    for where, r in parts.items():
        write_json(r, where / "eval.json")
        write_markdown(r, where / "eval.md")
    return [where / "eval.json" for where in parts]


def cmd_eval(args: argparse.Namespace) -> int:
    check_model_arg(args.model)
    if args.threads < 0:
        raise ValueError(f"eval --threads {args.threads}: give 0 (torch's default) or a positive number")
    from fastrl.evaluation.metrics import markdown_table
    from fastrl.models.device import resolve_device

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    try:
        results = api.evaluate(
            args.model, args.benchmark, engine=args.engine, device=resolve_device(args.device, key="--device"),
            dtype=args.dtype, sampling=args.sampling, k=args.k, reward=args.reward, template=args.template,
            max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization, min_pixels=args.min_pixels, max_pixels=args.max_pixels,
            seed=args.seed, limit=args.limit, max_prompt_length=args.max_prompt_length,
            prompt_length_policy=args.prompt_length_policy,
            templates=name_value_pairs(args.benchmark_template, flag="--benchmark-template"),
            rewards=name_value_pairs(args.benchmark_reward, flag="--benchmark-reward"),
        )
    except FileNotFoundError:
        raise
    except OSError as exc:  # an unreadable model or benchmark (permissions, a truncated download, missing weights)
        raise ValueError(f"eval --model {args.model!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    written = write_eval(results, Path(args.out), per_benchmark=args.out_per_benchmark)
    print(markdown_table(results))
    print("wrote " + ", ".join(str(p) for p in written) + " (and eval.md beside each)")
    return 0


def _add_train_parser(sub: Any) -> argparse.ArgumentParser:
    t = sub.add_parser("train", help="train one method: fastrl train CONFIG [key=value ...]")
    t.add_argument("config", help="a YAML under configs/ (e.g. methods/fastrl.yaml) or a path")
    t.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
    t.add_argument("--scale", default=None, help="smoke | mini | paper (default: the config's, else mini)")
    t.add_argument("--force-new", action="store_true",
                   help="start over in an existing run dir: its contents move to <run_dir>.replaced-<UTC time>/")
    t.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE (on PYTHONPATH) before the config is read, so that the components it "
                        "registers can be chosen and configured (algorithm.pruner=NAME algorithm.SECTION.KEY=V); "
                        "repeatable; recorded in the run's config.yaml as `imports`")
    t.set_defaults(func=cmd_train)
    return t


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fastrl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    debug_help = "on an error, print the full traceback too (not only the one-line message)"
    p.add_argument("--debug", action="store_true", help=debug_help)
    sub = p.add_subparsers(dest="command", required=True)

    t = _add_train_parser(sub)

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
    e.add_argument("--engine", choices=list(ROLLOUT_ENGINES), default="hf")
    e.add_argument("--device", choices=list(MODEL_DEVICES), default="auto",
                   help="hf engine: where the model runs (auto = cuda when available)")
    e.add_argument("--dtype", choices=list(MODEL_DTYPES), default=None,
                   help="default: float32 (hf), the checkpoint's own dtype (vllm)")
    e.add_argument("--min-pixels", type=int, default=262144, help="VL image resize (qwen-vl-utils rule)")
    e.add_argument("--max-pixels", type=int, default=4194304)
    e.add_argument("--sampling", choices=["greedy", "paper"], default="greedy",
                   help="greedy, or the paper's validation sampling (T=0.6, top-p 0.95)")
    e.add_argument("--k", type=int, default=1, help="samples per problem (avg@k, pass@k; Table 4 uses 16)")
    e.add_argument("--reward", default="math")
    e.add_argument("--template", default="fastrl_math")
    e.add_argument("--benchmark-template", action="append", default=[], metavar="BENCHMARK=TEMPLATE",
                   help="this benchmark's template instead of --template; repeatable")
    e.add_argument("--benchmark-reward", action="append", default=[], metavar="BENCHMARK=REWARD",
                   help="this benchmark's reward instead of --reward; repeatable")
    e.add_argument("--max-new-tokens", type=int, default=512)
    e.add_argument("--max-model-len", type=int, default=None,
                   help="vllm: prompt + response tokens (default: --max-prompt-length + --max-new-tokens)")
    e.add_argument("--max-prompt-length", type=int, default=2048,
                   help="problems whose prompt (chat template + image tokens) is longer never reach the engine")
    e.add_argument("--prompt-length-policy", choices=list(PROMPT_LENGTH_POLICIES), default="filter",
                   help="filter: drop such problems (counted in n_over_prompt_limit); error: stop, naming the first")
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument("--gpu-memory-utilization", type=float, default=0.8)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads (0: torch's default); a run's own trainer.torch_threads suits it")
    e.add_argument("--limit", type=int, default=0, help="first N problems of each benchmark (0: all)")
    e.add_argument("--out", default="runs/eval")
    e.add_argument("--out-per-benchmark", action="store_true",
                   help="one <out>/<benchmark>/eval.json per benchmark (each as evaluating it alone writes) "
                        "instead of one <out>/eval.json for all")
    e.set_defaults(func=cmd_eval)
    for sp in (t, s, f, d, e):  # `fastrl train CFG --debug` works as well as `fastrl --debug train CFG`
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    return p


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is (as Ctrl-C raises KeyboardInterrupt), so every
    cleanup that runs on Ctrl-C runs on a ``kill`` or a scheduler's preemption too."""

    signum = signal.SIGTERM


def _raise_terminated(signum: int, frame: Any) -> None:
    # Once: a launcher that also got the signal (DeepSpeed's launch.py) re-sends SIGTERM to its
    # ranks, which must not cut the unwinding of the first one short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


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
    api.default_accelerator()
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        code = int(args.func(args) or 0)
    # Bad input: ConfigError, DataError and RecordError are ValueErrors; a missing file or model path
    # is a FileNotFoundError. Anything else is a bug and keeps its traceback.
    except (ValueError, FileNotFoundError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: one line, the shell's code (128 + signal); a run resumes
        if args.debug:
            traceback.print_exc()
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        print(f"{parser.prog}: interrupted ({signum.name})", file=sys.stderr)
        return 128 + int(signum)
    finally:
        signal.signal(signal.SIGTERM, previous)
    from fastrl.training.distributed import shutdown_distributed

    shutdown_distributed()
    return code


if __name__ == "__main__":
    sys.exit(main())
