"""The paper's math as pure tensor functions: no I/O, no model, no vLLM/DeepSpeed imports.

Modules: ``advantages`` (GRPO / Dr.GRPO over ragged uid groups), ``losses`` (PPO-clip, GSPO,
GSPO-token, KL estimators, aggregation), ``similarity`` (vectorised token-level Jaccard),
``pruning`` (MDAP, CPPO, random, advantage-only, data-parallel alignment), ``rollout_scale``
(ARS, retention ARS and fixed n, one class each), ``prompt_selection`` (GRESO), ``group_filter``
(DAPO dynamic sampling), ``sections`` (the built-in components' typed config sections) and
``registry`` (the components' protocols and the name -> component tables a method is composed
from, each entry with its config section; it imports no torch, so ``fastrl.config`` reads the
valid names and the sections there).
"""
