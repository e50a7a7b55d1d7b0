"""A task written outside the package, with its own config section (docs/algorithms.md, "Adding an
engine, a model source or a task"): "add two numbers", the operands drawn from 0 to
``data.sum.max_operand``.

    PYTHONPATH=docs/examples fastrl train methods/grpo.yaml --scale smoke --import sum_task \\
        data.task=sum data.sum.max_operand=9 model.source=path model.path=MODEL_DIR

(The tiny model's SFT warm start, ``model.source: tiny``, exists for the generated mini tasks only,
so a plug-in task trains a model given by path.) ``tests/integration/test_plugin_seams.py`` trains
it from a temp dir.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from fastrl.algorithms.registry import register
from fastrl.data.schema import Record
from fastrl.data.splits import Split, TaskSplits
from fastrl.tasks import TASKS


@dataclass
class SumTaskConfig:
    """``data.sum``: its defaults and checks live here, and nowhere else."""

    max_operand: int = 20  # data.sum.max_operand

    def check(self) -> None:
        if self.max_operand < 1:
            raise ValueError(f"max_operand = {self.max_operand} must be >= 1")


def _problems(config: SumTaskConfig, split: str, num: int, seed: int) -> Split:
    """``num`` distinct sums; train and val draw from disjoint halves (even / odd first operand)."""
    rng = random.Random(f"sum:{split}:{seed}")
    parity = 0 if split == "train" else 1
    pairs = sorted({(a, b) for a in range(parity, config.max_operand + 1, 2) for b in range(config.max_operand + 1)})
    rng.shuffle(pairs)
    records = [Record(uid=f"sum:{a}+{b}", problem=f"add {a} and {b}", answer=str(a + b), source="sum")
               for a, b in pairs[:num]]
    return Split(records, [(f"sum {split}", i) for i in range(len(records))])


@register(TASKS, "sum", section="sum", config=SumTaskConfig)
def sum_splits(config: SumTaskConfig, data: Any) -> TaskSplits:
    """The factory: called with this task's own section (``data.sum``) and the run's ``data``."""
    return TaskSplits(train=_problems(config, "train", data.num_train, data.seed),
                      val=_problems(config, "val", data.num_val, data.seed), ood={})
