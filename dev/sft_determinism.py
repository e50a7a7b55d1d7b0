"""Fingerprint a short SFT warm start of the large VL stand-in: prints its cache key and the
sha256 of its weights. Run it in two processes, or at two commits (a git worktree each, with
``PYTHONPATH`` at the worktree), and compare the lines: equal lines mean the same code and
environment give the same weights (docs/results.md, Known limits).

    PYTHONPATH=$PWD .venv/bin/python dev/sft_determinism.py /tmp/sft_a --steps 100
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

try:  # the SFT moved from fastrl.models to fastrl.mini; older commits are compared too
    from fastrl.mini.builders import TinyModelSpec
    from fastrl.mini.sft import EvalSettings, warm_start
except ImportError:
    from fastrl.models.builders import TinyModelSpec  # type: ignore[no-redef]
    from fastrl.models.sft import EvalSettings, warm_start  # type: ignore[no-redef]

# configs/tables/slots.yaml's large VL stand-in and mini.yaml's SFT settings (steps aside)
LARGE_VL = dict(kind="qwen2_5_vl", hidden_size=192, num_heads=3, num_kv_heads=1, num_layers=3, intermediate_size=384)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_root", type=Path, help="a fresh cache folder (a cached build is returned as it is)")
    p.add_argument("--steps", type=int, default=100)
    args = p.parse_args()
    d = warm_start("mini-geo", TinyModelSpec(**LARGE_VL), out_root=args.out_root, seed=1234, steps=args.steps,
                   lr=0.003, batch_size=32, answer_noise=0.3, eval_settings=EvalSettings(num_prompts=0))
    print(d.name, hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()[:16])


if __name__ == "__main__":
    main()
