"""The paper's math as pure tensor functions: no I/O, no model, no vLLM/DeepSpeed imports.

Modules: ``advantages`` (GRPO / Dr.GRPO over ragged uid groups), ``losses`` (PPO-clip, GSPO,
GSPO-token, KL estimators, aggregation), ``similarity`` (vectorised token-level Jaccard),
``pruning`` (MDAP, CPPO, random, advantage-only, data-parallel alignment), ``rollout_scale``
(ARS and fixed n), ``prompt_selection`` (GRESO), ``group_filter`` (DAPO dynamic sampling) and
``registry`` (the components' protocols and the name -> component tables a method is composed
from; it imports no torch, so ``fastrl.config`` reads the valid names there).
"""
