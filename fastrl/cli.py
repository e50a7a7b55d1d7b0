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
import logging
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

from fastrl import api  # torch-free to import: `fastrl --help` stays fast
from fastrl.config import MODEL_DEVICES, MODEL_DTYPES, PROMPT_LENGTH_POLICIES
from fastrl.logs import LEVELS
from fastrl.logs import configure as configure_logging
from fastrl.training.errors import TrainingError

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
log = logging.getLogger("fastrl.cli")


def cmd_train(args: argparse.Namespace) -> int:
    if args.print_config:
        import yaml

        from fastrl.config import to_dict

        cfg = api.load_run_config(args.config, args.overrides, args.scale, imports=args.imports)
        print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
        return 0
    start = time.perf_counter()
    summary = api.train(args.config, args.overrides, args.scale, force_new=args.force_new, imports=args.imports)
    print(json.dumps(summary, indent=2) if args.json else api.closing_line(summary, time.perf_counter() - start))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    results = api.sweep(args.sweep, args.overrides, args.scale, imports=args.imports)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print(api.sweep_point_line(r))
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


def write_eval(results: dict[str, Any], dirs: dict[str, Path]) -> list[Path]:
    """One eval.json (+ .md) per folder of ``dirs`` (fastrl.evaluation.output.eval_dirs): each
    benchmark's own result, or with the single key "" all benchmarks in one file."""
    from fastrl.evaluation.evaluate import split_by_benchmark
    from fastrl.evaluation.metrics import write_json, write_markdown

    parts = {dirs[""]: results} if "" in dirs else {dirs[b]: r for b, r in split_by_benchmark(results).items()}
    for where, r in parts.items():
        write_json(r, where / "eval.json")
        write_markdown(r, where / "eval.md")
    return [where / "eval.json" for where in parts]


def check_eval_args(args: argparse.Namespace) -> dict[str, Path]:
    """Every eval argument that can be checked without a model, checked (after the ``--import``
    modules, which may register an engine): the engine, benchmark, template and reward names, the
    model path, and where the results go (an eval.json there is refused, or moved aside with
    --force-new). Returns the output folders (write_eval's ``dirs``)."""
    from fastrl.config import import_component_module
    from fastrl.engines import ROLLOUT_ENGINES
    from fastrl.evaluation import output

    for module in args.imports:
        import_component_module(module)
    try:
        ROLLOUT_ENGINES.entry(args.engine)
    except ValueError as exc:
        raise ValueError(f"eval --engine: {exc}") from None
    if args.threads < 0:
        raise ValueError(f"eval --threads {args.threads}: give 0 (torch's default) or a positive number")
    for spec in args.benchmark:
        api.check_benchmark_spec(spec)
    names = list(dict.fromkeys(api.benchmark_name(b) for b in args.benchmark))
    api.check_templates_and_rewards(
        api.benchmark_choice(names, args.template, name_value_pairs(args.benchmark_template, flag="--benchmark-template"),
                             what="template"),
        api.benchmark_choice(names, args.reward, name_value_pairs(args.benchmark_reward, flag="--benchmark-reward"),
                             what="reward"))
    check_model_arg(args.model)
    root = Path(args.out) if args.out else output.default_eval_root(args.model)
    dirs = output.eval_dirs(names, root, per_benchmark=args.out_per_benchmark or not args.out)
    for moved in output.claim(list(dirs.values()), force_new=args.force_new):
        log.info("moved the earlier eval.json and eval.md aside to %s", moved)
    return dirs


def cmd_eval(args: argparse.Namespace) -> int:
    dirs = check_eval_args(args)
    api.default_accelerator()
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
            rewards=name_value_pairs(args.benchmark_reward, flag="--benchmark-reward"), imports=args.imports,
        )
    except FileNotFoundError:
        raise
    except OSError as exc:  # an unreadable model or benchmark (permissions, a truncated download, missing weights)
        raise ValueError(f"eval --model {args.model!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    written = write_eval(results, dirs)
    print(markdown_table(results))
    print("wrote " + ", ".join(str(p) for p in written) + " (and eval.md beside each)")
    return 0


def eval_names_help() -> str:
    """The eval subcommand's epilog: the valid benchmark, template and reward names (imported
    when the help is shown, so that `fastrl --help` stays fast)."""
    from fastrl.data.templates import TEMPLATES
    from fastrl.rewards import REWARD_FUNCTIONS

    return (f"benchmarks (--benchmark, repeatable):\n  generated: {api.benchmark_names_help()}\n"
            "  a file: NAME=PATH.parquet|jsonl in the canonical record format (make data writes them under "
            "data/prepared/)\n"
            f"templates (--template, --benchmark-template): {', '.join(TEMPLATES)}\n"
            f"rewards (--reward, --benchmark-reward): {', '.join(sorted(REWARD_FUNCTIONS))}\n"
            "output: without --out, <run>/eval/<benchmark>/eval.json (+ eval.md) inside the evaluated run "
            "(runs/eval/<model name>/<benchmark>/ for a model that is not a run); an existing eval.json is "
            "never replaced: --force-new moves it aside to <folder>.replaced-<UTC time>/\n")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose epilog may be computed when the help is shown (``epilog_fn``)."""

    epilog_fn: Any = None

    def format_help(self) -> str:
        if self.epilog_fn is not None:
            self.epilog = self.epilog_fn()
        return super().format_help()


def _add_train_parser(sub: Any) -> argparse.ArgumentParser:
    t = sub.add_parser("train", help="train one method: fastrl train CONFIG [key=value ...]")
    t.add_argument("config", help="a YAML under configs/ (e.g. methods/fastrl.yaml) or a path")
    t.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
    t.add_argument("--scale", default=None, help="smoke | mini | paper (default: the config's, else mini)")
    t.add_argument("--force-new", action="store_true",
                   help="start over in an existing run dir: its contents move to <run_dir>.replaced-<UTC time>/")
    _add_import_flag(t, "before the config is read, so that the components, engines, model sources and tasks it "
                        "registers can be chosen and configured (algorithm.pruner=NAME algorithm.SECTION.KEY=V, "
                        "rollout.engine=NAME rollout.SECTION.KEY=V); repeatable; recorded in the run's config.yaml "
                        "as `imports`")
    t.add_argument("--print-config", action="store_true",
                   help="print the resolved config (defaults, scale, CONFIG, overrides) as YAML and exit")
    t.add_argument("--json", action="store_true",
                   help="end with the run's summary as JSON (the contents of <run_dir>/summary.json) instead of "
                        "one line")
    t.set_defaults(func=cmd_train)
    return t


def _add_import_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help=f"import MODULE (on PYTHONPATH) {what}")


def _add_eval_parser(sub: Any) -> argparse.ArgumentParser:
    e = sub.add_parser("eval", help="evaluate a trained run, a model dir or an HF model id on benchmarks",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    e.epilog_fn = eval_names_help
    e.add_argument("--model", required=True, help="run dir (uses <run>/final), model dir or HF id")
    e.add_argument("--benchmark", action="append", required=True,
                   help="task[:variant] (a generated benchmark) or NAME=PATH.parquet|jsonl; repeatable; the names "
                        "are listed below")
    e.add_argument("--engine", default="hf",
                   help="a registered rollout engine: hf, vllm, or a plug-in's (--import its module)")
    _add_import_flag(e, "first, so that the rollout engine it registers can be chosen with --engine; repeatable")
    e.add_argument("--device", choices=list(MODEL_DEVICES), default="auto",
                   help="hf engine: where the model runs (auto = cuda when available)")
    e.add_argument("--dtype", choices=list(MODEL_DTYPES), default=None,
                   help="default: float32 (hf), the checkpoint's own dtype (vllm)")
    e.add_argument("--min-pixels", type=int, default=262144, help="VL image resize (qwen-vl-utils rule)")
    e.add_argument("--max-pixels", type=int, default=4194304)
    e.add_argument("--sampling", choices=["greedy", "paper"], default="greedy",
                   help="greedy, or the paper's validation sampling (T=0.6, top-p 0.95)")
    e.add_argument("--k", type=int, default=1, help="samples per problem (avg@k, pass@k; Table 4 uses 16)")
    e.add_argument("--reward", default="math", help="the reward that grades every benchmark (names below)")
    e.add_argument("--template", default="fastrl_math", help="the prompt template of every benchmark (names below)")
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
    e.add_argument("--out", default=None,
                   help="write <out>/eval.json (+ eval.md) for all benchmarks (default: one "
                        "<run>/eval/<benchmark>/ per benchmark, inside the evaluated run)")
    e.add_argument("--out-per-benchmark", action="store_true",
                   help="with --out: one <out>/<benchmark>/eval.json per benchmark (each as evaluating it alone "
                        "writes) instead of one <out>/eval.json for all")
    e.add_argument("--force-new", action="store_true",
                   help="an eval.json already where this one goes moves aside to <folder>.replaced-<UTC time>/ "
                        "(without it, the evaluation stops before loading anything)")
    e.set_defaults(func=cmd_eval)
    return e


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fastrl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common_flags(p, sub=False)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = _add_train_parser(sub)

    s = sub.add_parser("sweep", help="run a sweep file: {base: CONFIG, sweep: {key: [values]}}")
    s.add_argument("sweep")
    s.add_argument("overrides", nargs="*")
    s.add_argument("--scale", default=None)
    s.add_argument("--json", action="store_true", help="end with every point's summary as a JSON list")
    _add_import_flag(s, "before the sweep's base config is read (as train's --import); repeatable")
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

    e = _add_eval_parser(sub)
    for sp in (t, s, f, d, e):  # `fastrl train CFG --debug` works as well as `fastrl --debug train CFG`
        _add_common_flags(sp, sub=True)
    return p


def _add_common_flags(parser: argparse.ArgumentParser, *, sub: bool) -> None:
    """--debug, --log-level and -q on the main parser and on every subcommand: ``fastrl train CFG -q``
    works as well as ``fastrl -q train CFG`` (a subcommand's defaults are SUPPRESS, so they never
    overwrite the main parser's value)."""
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if sub else value

    parser.add_argument("--debug", action="store_true", default=default(False),
                        help="on an error, print the full traceback too (not only the one-line message)")
    parser.add_argument("--log-level", choices=LEVELS, type=str.upper, default=default("INFO"),
                        help="what fastrl logs to stderr (default INFO: progress, where things are written)")
    parser.add_argument("-q", "--quiet", action="store_true", default=default(False),
                        help="warnings and errors only (--log-level WARNING: no progress lines or bars)")


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
    configure_logging("WARNING" if args.quiet else args.log_level)
    if args.func is not cmd_eval:  # eval checks its arguments first (torch's import takes seconds)
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
    except TrainingError as exc:  # the run cannot go on (NaN loss, a reward that keeps failing, a full disk)
        if args.debug:
            traceback.print_exc()
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
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


def entry() -> None:
    """The ``fastrl`` command (and ``python -m fastrl.cli``): :func:`main`, then a process that was
    a rank of a process group ends through ``exit_process``, which skips the interpreter teardown
    ranks were seen to abort in after a finished run."""
    code = main()
    distributed = sys.modules.get("fastrl.training.distributed")  # never imported: no group joined
    if distributed is not None:
        distributed.exit_process(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
