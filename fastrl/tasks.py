"""The task registry: ``data.task`` -> where a run's training, validation and OOD records come from.

=========================  ======================================  ==============================
task                       factory                                 records
=========================  ======================================  ==============================
files                      fastrl.data.splits:file_splits          ``data.train_files`` /
                                                                   ``val_files`` / ``ood_variants``
mini-math, mini-geo,       fastrl.mini.tasks:generated_splits      generated (``data.num_train``,
mini-box                                                           ``num_val``, ``variant``)
=========================  ======================================  ==============================

A factory is called ``factory(data)`` with the run's ``data`` section, or ``factory(section,
data)`` when registered with a section (``data.<section>``), and returns a
:class:`fastrl.data.splits.TaskSplits`: the records of each split with where each came from (file
or generator, row), which ``fastrl.training.setup`` then checks as a whole (uids, ground truths).

Torch-free, like every registry: the built-in factories are ``"module:attribute"`` strings, so a
run on files never imports ``fastrl.mini``.
"""

from __future__ import annotations

from fastrl.algorithms.registry import Entry, Registry, SectionGroup

# The generated tasks (fastrl.mini.tasks.TASKS), the only ones the tiny model's SFT warm start
# (model.source = tiny) can train on.
GENERATED_TASKS: tuple[str, ...] = ("mini-math", "mini-geo", "mini-box")
TASKS = Registry("task", {
    "files": Entry("fastrl.data.splits:file_splits"),
    **{name: Entry("fastrl.mini.tasks:generated_splits") for name in GENERATED_TASKS},
})
# data's own keys (fastrl.config.DataConfig's fields): no task section may take them.
DATA_KEYS: tuple[str, ...] = (
    "task", "variant", "train_files", "val_files", "num_train", "num_val", "ood_variants", "template", "reward",
    "max_prompt_length", "prompt_length_policy", "seed", "shuffle", "reward_max_failure_share",
    "reward_max_failing_steps",
)
DATA = SectionGroup("data", DATA_KEYS, (TASKS,))
