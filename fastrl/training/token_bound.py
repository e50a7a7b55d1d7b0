"""The token bound of a run's time: what it would take if every stage of a reference run (GRPO on
the same seed and setting) scaled with the tokens the stage processes.

Stages that see every generated response (before pruning) scale with the tokens generated, the
stages after pruning with the tokens trained; the step's untimed remainder (batch assembly, ARS
statistics) is a per-step cost that no token count moves. Pruning can at best reach this bound;
what a run takes beyond it is cost that does not shrink with the tokens (per-call and
per-optimizer-step fixed costs, padding). Pure arithmetic: the tables (experiments.collect) and
the demo both use it.
"""

from __future__ import annotations

from typing import Mapping

GENERATED_STAGES: tuple[str, ...] = ("gen", "reward", "adv", "prune")
TRAINED_STAGES: tuple[str, ...] = ("old_log_prob", "ref", "update_actor", "update_weights")


def token_bound(ref_stages: Mapping[str, float], ref_tokens: tuple[float, float], tokens: tuple[float, float]) -> float:
    """Seconds a run would take at the reference's speed per token, stage by stage.

    ``ref_stages``: the reference run's stage -> total seconds, with ``step`` the total;
    ``ref_tokens`` / ``tokens``: (generated, trained) token totals of the reference and of the run.
    CPPO's old/ref passes see the whole batch, so its bound is one it cannot reach by design.
    """
    (gen_ref, trained_ref), (gen, trained) = ref_tokens, tokens
    if min(gen_ref, trained_ref) <= 0:
        raise ValueError(f"token_bound: reference token counts {ref_tokens} must be positive")
    timed = (*GENERATED_STAGES, *TRAINED_STAGES)
    rest = ref_stages["step"] - sum(ref_stages.get(k, 0.0) for k in timed)
    return (sum(ref_stages.get(k, 0.0) for k in GENERATED_STAGES) * gen / gen_ref
            + sum(ref_stages.get(k, 0.0) for k in TRAINED_STAGES) * trained / trained_ref + rest)
