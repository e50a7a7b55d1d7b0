"""Mini-scale scaffolding: what lets the paper's pipeline run on a CPU in minutes, offline.

The ``mini`` and ``smoke`` scales (docs/architecture.md, Scales) swap the paper's models and
datasets for stand-ins that keep what the algorithms react to; the training pipeline, the
components and the rewards are the paper path's own. This package holds only the stand-ins:

- ``tasks``: generated tasks (``mini-math``, ``mini-geo``, ``mini-box``) with worked solutions,
  disjoint train/validation splits and held-out (out-of-domain) variants;
- ``tokenizer``: the word-level tokenizer those tasks' words and numbers are single tokens of;
- ``builders``: tiny Qwen2 / Llama / Qwen2.5-VL models built from config (``TinyModelSpec``);
- ``sft``: the cached SFT warm start that gives a tiny model mixed rewards for RL to work on;
- ``source``: ``model.source = tiny``, the run's policy as that warm start (``tiny_policy_dir``).

The paper path does not need any of it: with ``model.source = path`` and ``data.task = files`` a run
never imports ``fastrl.mini``. Loading a model (hub id, checkpoint or tiny directory) is
``fastrl.models.loaders``, which recognises a tiny directory by its marker file but does not
import this package.

Where the paper path reaches the mini scale: only through the registries, by name. The ``tiny``
model source (``fastrl.sources``: ``source.tiny_policy_dir``) and the generated tasks
(``fastrl.tasks``: ``tasks.generated_splits``) are registry entries written as
``"module:attribute"`` strings, imported when a run chooses them; ``fastrl.training`` never imports
this package. (``fastrl.api``'s generated eval benchmarks, ``--benchmark mini-math``, import
``tasks`` directly.) ``fastrl.mini`` itself builds on ``fastrl.data``, ``fastrl.models``,
``fastrl.rollout`` and ``fastrl.policy``, so ``models``, ``data`` and ``rollout`` must not import
it (tests/test_imports.py forbids the cycle).
"""
