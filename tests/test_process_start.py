"""Process start (issue 25): what a run or an evaluation on the hf engine imports.

Every run is a process; torch and transformers are most of its fixed cost (docs/results.md,
"Process start"). vLLM (seconds to import) and DeepSpeed are imported only where a run uses them:
the modules that train and evaluate with the hf engine and without DeepSpeed import neither.
"""

from __future__ import annotations

import subprocess
import sys


def test_training_and_evaluation_on_the_hf_engine_import_neither_vllm_nor_deepspeed() -> None:
    code = ("import sys; import fastrl.cli, fastrl.api, fastrl.policy, fastrl.training.pipeline, "
            "fastrl.training.setup, fastrl.evaluation.evaluate, fastrl.rollout.hf, fastrl.engines; "
            "bad = [m for m in ('vllm', 'deepspeed') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
