"""The keys of ``<run_dir>/metrics.jsonl``: what the trainer writes and experiments/ reads.

One JSON object per line (``fastrl.training.metrics.RunLogger``):

- the validation line before training (``PHASE_VAL``, step 0): every ``val/*`` key with
  ``BEFORE_SUFFIX`` appended (``val/accuracy_before``);
- one line per training step: timings (``timing_s/<stage>``, ``cpu_s/<stage>``), rollout, reward,
  pruning, token and actor metrics, ARS / GRESO statistics when they change, and the ``val/*``
  keys every ``trainer.val_every`` steps;
- the final line (``PHASE_VAL_FINAL``): ``val/*`` and ``ood/<name>/accuracy`` / ``ood/<name>/num``
  per out-of-domain benchmark. A run whose log ends with it is finished.

Families whose names come from a component (ARS decisions, GRESO probabilities, policy-loss
statistics, out-of-domain benchmarks, the similarity histogram) are a prefix plus a helper
(``ars_key``, ``ood_accuracy_key``, ...); ``is_known_key`` says whether a key is one of these.
Torch-free, so readers of logs (collectors, notebooks) import it without the trainer.
"""

from __future__ import annotations

import re

# ------------------------------------------------------------------------------- line structure
STEP = "step"
EPOCH = "epoch"
PHASE = "phase"
PHASE_VAL = "val"  # the line before training
PHASE_VAL_FINAL = "val_final"  # the last line of a finished run
BEFORE_SUFFIX = "_before"  # on every val/* key of the PHASE_VAL line


def before_key(key: str) -> str:
    """``val/accuracy`` -> ``val/accuracy_before`` (the line before training)."""
    return key + BEFORE_SUFFIX


# ------------------------------------------------------------------------------------- timings
# Stable stage names; every step logs each of them, 0.0 when a stage did not run.
STAGES: tuple[str, ...] = ("gen", "reward", "adv", "prune", "old_log_prob", "ref", "update_actor", "update_weights",
                           "step")
TIMING_PREFIX = "timing_s/"  # wall-clock seconds of a stage
CPU_PREFIX = "cpu_s/"  # this process's CPU seconds of a stage


def timing_key(stage: str) -> str:
    return TIMING_PREFIX + stage


def cpu_key(stage: str) -> str:
    return CPU_PREFIX + stage


STEP_TIME = timing_key("step")  # a line with it is a training step
STEP_CPU = cpu_key("step")

# ------------------------------------------------------------------------------------- rollout
ROLLOUT_N = "rollout/n"  # rollouts per prompt this step
ROLLOUT_NUM_PROMPTS = "rollout/num_prompts"
ROLLOUT_NUM_RESPONSES = "rollout/num_responses"
ROLLOUT_MIXED_GROUPS = "rollout/mixed_groups"  # fraction of groups with both right and wrong answers
ROLLOUT_RESPONSE_LENGTH = "rollout/response_length"
ROLLOUT_TRIES = "rollout/tries"  # generation rounds of a filtering method (DAPO)
ROLLOUT_PROMPTS_SEEN = "rollout/prompts_seen"
ROLLOUT_PROMPTS_DRAWN = "rollout/prompts_drawn"
ROLLOUT_PROBS_DIFF_MAX = "rollout/probs_diff_max"  # |p_engine - p_trainer| per token
ROLLOUT_PROBS_DIFF_MEAN = "rollout/probs_diff_mean"
# weight-sync check of an engine holding its own weights (vLLM)
ROLLOUT_LOGPROB_DIFF_MAX = "rollout/logprob_diff_max"
ROLLOUT_LOGPROB_DIFF_MEAN = "rollout/logprob_diff_mean"
ROLLOUT_SYNC_SECONDS = "rollout/sync_seconds"
ROLLOUT_SYNC_TENSORS = "rollout/sync_tensors"
ROLLOUT_SYNC_REBUILT_HANDLES = "rollout/sync_rebuilt_handles"

# -------------------------------------------------------------------------------------- reward
REWARD_MEAN = "reward/mean"
REWARD_ACCURACY = "reward/accuracy"
REWARD_FAILURES = "reward/failures"
REWARD_TIMEOUTS = "reward/timeouts"
REWARD_N = "reward/n"

# ----------------------------------------------------------------------------- pruning, tokens
PRUNE_KEPT = "prune/kept"  # kept responses (after the refill)
PRUNE_KEPT_FRACTION = "prune/kept_fraction"
# fastrl.algorithms.pruning.PruneResult.metrics
PRUNE_KEPT_BEFORE_REFILL = "prune/kept_before_refill"
PRUNE_REFILLED = "prune/refilled"
PRUNE_COUNT_MEAN = "prune/count_mean"  # kept responses per question
PRUNE_COUNT_MAX = "prune/count_max"
PRUNE_NUM_BUCKETS = "prune/num_buckets"
PRUNE_PAIRS_COMPARED = "prune/pairs_compared"
PRUNE_SIM_MEAN = "prune/sim_mean"
PRUNE_SIM_HIST_PREFIX = "prune/sim_hist_"


def prune_sim_hist_key(bin_index: int) -> str:
    """Count of compared pairs in similarity bin ``bin_index`` (``prune/sim_hist_03``)."""
    return f"{PRUNE_SIM_HIST_PREFIX}{bin_index:02d}"


TOKENS_GENERATED = "tokens/generated"
TOKENS_TRAINED = "tokens/trained"

# --------------------------------------------------------------------------------------- actor
ACTOR_PREFIX = "actor/"


def actor_key(name: str) -> str:
    """An update metric; the policy loss adds its own statistics (``actor/clipfrac``, ...)."""
    return ACTOR_PREFIX + name


ACTOR_PG_LOSS = actor_key("pg_loss")
ACTOR_KL_LOSS = actor_key("kl_loss")
ACTOR_LOSS = actor_key("loss")
ACTOR_ENTROPY = actor_key("entropy")
ACTOR_OPTIMIZER_STEPS = actor_key("optimizer_steps")
ACTOR_GRAD_NORM = actor_key("grad_norm")
ACTOR_LR = actor_key("lr")

# ---------------------------------------------------------------------- rollout scaler, GRESO
ARS_PREFIX = "ars/"  # the rollout scaler's last decision, on the step a period ends
GRESO_PREFIX = "greso/"


def ars_key(name: str) -> str:
    return ARS_PREFIX + name


def greso_key(name: str) -> str:
    return GRESO_PREFIX + name


ARS_N_NEXT = ars_key("n_next")

# ---------------------------------------------------------------------------------- validation
VAL_ACCURACY = "val/accuracy"  # avg@k over rollout.val_n samples per problem
VAL_ACCURACY_N1 = "val/accuracy_n1"  # each problem's first sample (the paper's n = 1)
VAL_REWARD = "val/reward"
VAL_NUM = "val/num"  # problems
VAL_SAMPLES_PER_PROBLEM = "val/samples_per_problem"
VAL_ACCURACY_SE = "val/accuracy_se"  # standard error of val/accuracy (evaluation.metrics.avg_at_k_standard_error)
VAL_KEYS: tuple[str, ...] = (VAL_ACCURACY, VAL_ACCURACY_N1, VAL_REWARD, VAL_NUM, VAL_SAMPLES_PER_PROBLEM,
                             VAL_ACCURACY_SE)
VAL_ACCURACY_BEFORE = before_key(VAL_ACCURACY)

# ---------------------------------------------------------------------------- out-of-domain
OOD_PREFIX = "ood/"
_OOD_KEY = re.compile(r"ood/(?P<name>[^/]+)/(?P<field>accuracy|num)")


def ood_accuracy_key(name: str) -> str:
    return f"{OOD_PREFIX}{name}/accuracy"


def ood_num_key(name: str) -> str:
    return f"{OOD_PREFIX}{name}/num"


def ood_accuracy_name(key: str) -> str | None:
    """The benchmark of an ``ood/<name>/accuracy`` key; None for any other key."""
    m = _OOD_KEY.fullmatch(key)
    return m.group("name") if m and m.group("field") == "accuracy" else None


# ------------------------------------------------------------------------------- known keys
_STEP_KEYS: tuple[str, ...] = (
    STEP, EPOCH, PHASE,
    *(timing_key(s) for s in STAGES), *(cpu_key(s) for s in STAGES),
    ROLLOUT_N, ROLLOUT_NUM_PROMPTS, ROLLOUT_NUM_RESPONSES, ROLLOUT_MIXED_GROUPS, ROLLOUT_RESPONSE_LENGTH,
    ROLLOUT_TRIES, ROLLOUT_PROMPTS_SEEN, ROLLOUT_PROMPTS_DRAWN, ROLLOUT_PROBS_DIFF_MAX, ROLLOUT_PROBS_DIFF_MEAN,
    ROLLOUT_LOGPROB_DIFF_MAX, ROLLOUT_LOGPROB_DIFF_MEAN, ROLLOUT_SYNC_SECONDS, ROLLOUT_SYNC_TENSORS,
    ROLLOUT_SYNC_REBUILT_HANDLES,
    REWARD_MEAN, REWARD_ACCURACY, REWARD_FAILURES, REWARD_TIMEOUTS, REWARD_N,
    PRUNE_KEPT, PRUNE_KEPT_FRACTION, PRUNE_KEPT_BEFORE_REFILL, PRUNE_REFILLED, PRUNE_COUNT_MEAN, PRUNE_COUNT_MAX,
    PRUNE_NUM_BUCKETS, PRUNE_PAIRS_COMPARED, PRUNE_SIM_MEAN,
    TOKENS_GENERATED, TOKENS_TRAINED,
    ACTOR_PG_LOSS, ACTOR_KL_LOSS, ACTOR_LOSS, ACTOR_ENTROPY, ACTOR_OPTIMIZER_STEPS, ACTOR_GRAD_NORM, ACTOR_LR,
)
KNOWN_KEYS: frozenset[str] = frozenset((*_STEP_KEYS, *VAL_KEYS, *(before_key(k) for k in VAL_KEYS)))
# Families named by a component: the ARS rule's decision fields, GRESO's probabilities, the
# policy loss's statistics, the out-of-domain benchmarks, the similarity histogram's bins.
KEY_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(re.escape(ARS_PREFIX) + r"\w+"),
    re.compile(re.escape(GRESO_PREFIX) + r"\w+"),
    re.compile(re.escape(ACTOR_PREFIX) + r"\w+"),
    _OOD_KEY,
    re.compile(re.escape(PRUNE_SIM_HIST_PREFIX) + r"\d{2}"),
)


def is_known_key(key: str) -> bool:
    """Whether ``key`` is a constant of this module or of one of its families (``KEY_PATTERNS``)."""
    return key in KNOWN_KEYS or any(p.fullmatch(key) for p in KEY_PATTERNS)
