"""SFT warm start of a tiny model on a generated task's worked solutions (mini/smoke scales).

RL needs mixed groups: a policy that never solves a question (or always does) gives all-equal
rewards and zero advantages. The warm start teaches the response format and some arithmetic so
that validation accuracy lands between the extremes; RL then has something to learn.

Cached: the output directory is named by a hash of every input that changes the weights (task,
spec, seed, steps, lr, batch size, number of training problems, prompt template text, tokenizer
vocabulary, this module's SFT_VERSION) and of nothing else: no module path or source hash, so
moving the code keeps every cached warm start. A directory with a complete manifest is returned as is;
training writes to a temporary directory renamed into place at the end, so a killed run never
leaves a half-written cache entry. The cache lives under :func:`default_cache_root`
(``$FASTRL_CACHE/sft``, else ``<repository>/.cache/sft``).

Every SFT example uses a worked solution drawn at random among the problem's routes (see
``fastrl.mini.tasks``), so the policy samples several routes at T=1 and responses to one
question differ in their token sets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from fastrl.config import REPO_ROOT
from fastrl.data.schema import Record
from fastrl.data.templates import TEMPLATE_REWARD, build_prompt_text
from fastrl.logs import duration, progress_bar
from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
from fastrl.mini.tasks import BOX_IMAGE_SIZE, BOX_STEP, Box, format_box, generate_task
from fastrl.mini.tokenizer import mini_vocabulary
from fastrl.models.device import module_device
from fastrl.models.forward import collate, response_logprobs
from fastrl.models.inputs import PromptInput
from fastrl.config import HFEngineConfig
from fastrl.policy import PolicyKit, PolicySpec, load_policy_kit
from fastrl.rollout.base import SamplingConfig

log = logging.getLogger(__name__)

SFT_VERSION = 1  # bump when the training recipe below changes the weights it produces (selection and
# perturbation are keyed by their own fields, so the last-step recipe keeps its cache entries)

CACHE_ENV = "FASTRL_CACHE"


def default_cache_root() -> Path:
    """Where warm starts are cached: ``$FASTRL_CACHE/sft`` when that is set, else
    ``<repository>/.cache/sft``; never relative to the working directory, so a run started from
    another folder reuses the same warm start."""
    root = os.environ.get(CACHE_ENV)
    return (Path(root).expanduser() if root else REPO_ROOT / ".cache") / "sft"
MANIFEST = "sft_manifest.json"
JACCARD_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


@dataclass
class EvalSettings:
    """What ``evaluate_policy`` measures after SFT (not part of the cache key); ``batch_size`` is
    the sampling engine's."""

    num_prompts: int = 64
    n: int = 8
    max_new_tokens: int = 48
    batch_size: int = 128
    seed: int = 0


@dataclass(frozen=True)
class SelectionSettings:
    """How the warm start picks its step (part of the cache key when ``every > 0``).

    ``every = 0`` keeps the last step (the recipe before SFT_VERSION 2). Otherwise the policy's
    greedy accuracy on ``num_prompts`` held-out *training-split* problems (drawn after the SFT's
    own ``num_train``, so neither SFT nor RL validation problems) is measured every ``every``
    steps, and the step with the best accuracy is kept (a tie goes to the later step). Training
    stops early once ``patience`` evaluations in a row bring no gain of more than ``min_gain``
    after ``min_steps`` steps (``patience = 0``: run every step). Why: one fixed step count lands a
    chaotic recipe on either side of a late jump in accuracy (docs/results.md, "Warm starts"); the
    best held-out step of a run that reaches its plateau is a property of the recipe instead.
    """

    every: int = 0
    num_prompts: int = 256
    patience: int = 0
    min_gain: float = 0.01
    min_steps: int = 0
    # > 0: train until the held-out accuracy reaches it (a converged warm start), keep that step, and
    # fail if the last step has not: the step a chaotic recipe converges at varies by machine, the
    # converged skill does not (docs/results.md, "Warm starts").
    target: float = 0.0
    # > 0 (with a target): once the target is reached, train this many more steps with the lr falling
    # linearly from its value there to 0, and keep the last step. Why: at the first step past the
    # target the policy's *sampled* accuracy is a snapshot of a high-lr trajectory and moved 7 points
    # between 1e-6-perturbed copies; annealed, the copies settle on the same point of the SFT loss
    # (docs/results.md, "Warm starts").
    anneal_steps: int = 0

    def to_key(self) -> dict[str, Any]:
        if self.every <= 0:
            return {}
        key = dataclasses.asdict(self)
        for name in ("target", "anneal_steps"):
            if not key[name]:
                del key[name]  # keys written before the field existed stay valid
        return key


@dataclass(frozen=True)
class Perturbation:
    """Stand-ins for another machine's floating point, for measuring a recipe's stability only
    (``dev/sft_stability.py``, ``tests/mini/test_sft_stability.py``); part of the cache key when set.

    ``init_scale`` multiplies every initial weight by ``1 + init_scale * N(0, 1)`` (generator seeded
    by ``seed``); ``loss_float64`` sums the loss's log-probs in float64 instead of float32.
    """

    init_scale: float = 0.0
    seed: int = 0
    loss_float64: bool = False

    def to_key(self) -> dict[str, Any]:
        return dataclasses.asdict(self) if self != Perturbation() else {}


@dataclass(frozen=True)
class VariantMix:
    """A share of the SFT's training (and held-out) problems drawn from another generator variant
    of the task; part of the cache key when set.

    ``fraction`` of the problems come from ``variant``, the rest from ``default``, shuffled
    together by the SFT seed. Why: a question type the SFT never sees starts near the floor at a
    number that moves with the machine's rounding (mini-geo ``total``: 5.6-12.7 % in three builds
    of one recipe), and RL gains nothing resolved from there; a share of it in the SFT makes it a
    skill the warm start has (with the answer noise), as an instruct model has some skill at
    the dataset it is tuned on (docs/results.md, "Warm starts that reproduce")."""

    variant: str = ""
    fraction: float = 0.0

    def to_key(self) -> dict[str, Any]:
        return dataclasses.asdict(self) if self.fraction > 0 else {}


def sft_problems(task: str, num: int, seed: int, mix: VariantMix = VariantMix()) -> list[Record]:
    """``num`` training-split problems of ``task`` for the SFT: all ``default``, or ``mix.fraction``
    of them (rounded) from ``mix.variant``, shuffled in by ``seed``. Without a mix, exactly the
    problems of the recipes before it existed."""
    if mix.fraction <= 0:
        return generate_task(task, split="train", num=num, seed=seed)
    num_mix = round(mix.fraction * num)
    records = (generate_task(task, split="train", num=num - num_mix, seed=seed)
               + generate_task(task, split="train", num=num_mix, seed=seed, variant=mix.variant))
    random.Random(f"sft-mix-{seed}").shuffle(records)
    return records


def sft_inputs(
    task: str, spec: TinyModelSpec, *, seed: int, steps: int, lr: float, batch_size: int, num_train: int,
    template: str, warmup_frac: float, weight_decay: float, answer_noise: float = 0.0,
    device_type: str = "cpu", autocast_dtype: str | None = None,
    selection: SelectionSettings = SelectionSettings(), perturbation: Perturbation = Perturbation(),
    mix: VariantMix = VariantMix(),
) -> dict[str, Any]:
    """Every input that changes the SFT weights (hashed into the cache directory name).

    A GPU warm start gets its own cache entry (other kernels, other float rounding); CPU keys
    are unchanged from before devices were part of the key."""
    probe = Record(uid="probe", problem="{problem}", answer="0", source=task)
    return {
        "sft_version": SFT_VERSION,
        "task": task,
        "spec": spec.to_dict(),
        "seed": seed,
        "steps": steps,
        "lr": lr,
        "batch_size": batch_size,
        "num_train": num_train,
        "template": template,
        "template_text": build_prompt_text(probe, template),
        "vocab_sha": hashlib.sha256("\n".join(mini_vocabulary()).encode()).hexdigest()[:16],
        "warmup_frac": warmup_frac,
        "weight_decay": weight_decay,
        **({"answer_noise": answer_noise} if answer_noise else {}),  # older cache keys stay valid
        **({"device": device_type} if device_type != "cpu" else {}),
        **({"autocast": autocast_dtype} if autocast_dtype else {}),
        **({"selection": selection.to_key()} if selection.to_key() else {}),
        **({"perturbation": perturbation.to_key()} if perturbation.to_key() else {}),
        **({"mix": mix.to_key()} if mix.to_key() else {}),
    }


def cache_key(inputs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]


def _lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10 % of ``lr``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _route_ids(tokenizer: Any, records: Sequence[Record]) -> list[list[list[int]]]:
    """Token ids of every worked solution of every record, each ending with EOS."""
    out = []
    for r in records:
        routes = r.meta.get("routes")
        if not routes:
            raise ValueError(f"SFT: record uid={r.uid} has no meta['routes'] (worked solutions)")
        out.append([tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in routes])
    unk = tokenizer.unk_token_id
    for r, routes in zip(records, out):
        if any(unk in ids for ids in routes):
            raise ValueError(f"SFT: a worked solution of uid={r.uid} has words outside the tokenizer")
    return out


_BOXED_TAIL = re.compile(r"\\boxed\{ (\d+) \}$")
_BOXED_BOX_TAIL = re.compile(r"\\boxed\{ (\[ (\d+) , (\d+) , (\d+) , (\d+) \]) \}$")


def noisy_route(text: str, rng: random.Random) -> str:
    """The same worked solution with its boxed answer wrong: an integer off by 1-3, a box with one
    edge one lattice step (BOX_STEP pixels) off. It is a slip at the end: the reasoning still ends
    on the right numbers, the box does not."""
    m = _BOXED_TAIL.search(text)
    if m is not None:
        answer = int(m.group(1))
        wrong = answer + rng.choice([d for d in (-3, -2, -1, 1, 2, 3) if 0 <= answer + d <= 99])
        return text[: m.start(1)] + str(wrong) + text[m.end(1):]
    b = _BOXED_BOX_TAIL.search(text)
    if b is None:
        raise ValueError("SFT answer noise: solution does not end with a boxed integer or box "
                         f"'[ x1 , y1 , x2 , y2 ]': {text[-60:]!r}")
    box = tuple(int(g) for g in b.groups()[1:])
    moves = [_moved(box, i, d) for i in range(4) for d in (-BOX_STEP, BOX_STEP)]
    wrong = rng.choice([m for m in moves if _inside(m)])
    return text[: b.start(1)] + format_box(wrong) + text[b.end(1):]


def _moved(box: Box, edge: int, delta: int) -> Box:
    return box[:edge] + (box[edge] + delta,) + box[edge + 1:]  # type: ignore[return-value]


def _inside(box: Box) -> bool:
    """Whether ``box`` is non-empty and inside the picture."""
    x1, y1, x2, y2 = box
    return 0 <= x1 < x2 <= BOX_IMAGE_SIZE and 0 <= y1 < y2 <= BOX_IMAGE_SIZE


def _noisy_route_ids(tokenizer: Any, records: Sequence[Record], seed: int) -> list[list[list[int]]]:
    rng = random.Random(seed ^ 0x5EED)
    return [[tokenizer(noisy_route(t, rng), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
             for t in r.meta["routes"]] for r in records]


class SFTNotConverged(ValueError):
    """A warm start with a target accuracy ended below it (nothing is cached). A ValueError: the
    config asked for too few ``model.tiny.sft_steps``, and ``fastrl train`` says so in one line."""


@dataclass
class SFTRun:
    """What ``train_sft`` did: every step's loss and, with held-out selection, the accuracy curve
    ``[(step, accuracy), ...]`` (steps counted from 1), the step kept and the step it stopped at."""

    losses: list[float]
    curve: list[tuple[int, float]] = field(default_factory=list)
    kept_step: int = 0
    stopped_at: int = 0


class _BestHeldOut:
    """Keeps the parameters of the best held-out step so far (ties: the later step) and says when
    ``patience`` evaluations in a row brought no gain above ``min_gain``."""

    def __init__(self, settings: SelectionSettings, evaluate: Callable[[torch.nn.Module], float]) -> None:
        self.settings, self.evaluate = settings, evaluate
        self.best = -math.inf
        self.best_state: dict[str, torch.Tensor] | None = None
        self.kept_step = 0
        self.stale = 0
        self.curve: list[tuple[int, float]] = []

    def note(self, model: torch.nn.Module, step: int) -> float:
        """Measure ``model`` after ``step`` steps into the curve (nothing kept); its accuracy."""
        model.eval()
        with torch.no_grad():
            acc = float(self.evaluate(model))
        model.train()
        self.curve.append((step, acc))
        return acc

    def observe(self, model: torch.nn.Module, step: int) -> bool:
        """Measure ``model`` after ``step`` steps; True when training should stop."""
        acc = self.note(model, step)
        self.stale = 0 if acc > self.best + self.settings.min_gain else self.stale + 1
        if acc >= self.best:
            self.best, self.kept_step = acc, step
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        log.info("sft step %d: held-out greedy accuracy %.3f (best %.3f at step %d)", step, acc, self.best,
                 self.kept_step)
        s = self.settings
        if s.target > 0:
            return step >= s.min_steps and acc >= s.target
        return s.patience > 0 and step >= s.min_steps and self.stale >= s.patience


def train_sft(
    model: torch.nn.Module,
    prompts: Sequence[PromptInput],
    targets: Sequence[Sequence[Sequence[int]]],
    *,
    pad_id: int,
    seed: int,
    steps: int,
    lr: float,
    batch_size: int,
    warmup_frac: float,
    weight_decay: float,
    log_every: int,
    noisy_targets: Sequence[Sequence[Sequence[int]]] | None = None,
    answer_noise: float = 0.0,
    autocast_dtype: torch.dtype | None = None,
    selection: SelectionSettings = SelectionSettings(),
    evaluate: Callable[[torch.nn.Module], float] | None = None,
    loss_float64: bool = False,
) -> SFTRun:
    """Teacher-forced SFT: minimise -mean log pi(solution token) over response tokens.

    Each step draws ``batch_size`` problems and one random route of each; with probability
    ``answer_noise`` that route's noisy twin (wrong boxed answer) is used instead. The model trains
    where it is (its parameters' device; batches follow); ``autocast_dtype`` (e.g. bf16 on CUDA)
    runs the forward under ``torch.autocast`` while the weights and optimizer stay float32. With
    ``selection.every > 0``, ``evaluate(model)`` (held-out accuracy) runs every ``selection.every``
    steps and at the end, and the model ends with the parameters of the best evaluated step; with
    ``selection.anneal_steps`` it ends with the last step of the anneal after the target instead.
    """
    if selection.every > 0 and evaluate is None:
        raise ValueError("train_sft: selection.every > 0 needs an evaluate function")
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=weight_decay)
    warmup = max(1, int(warmup_frac * steps))
    chooser = _BestHeldOut(selection, evaluate) if selection.every > 0 and evaluate is not None else None
    model.train()
    run = SFTRun(losses=[])
    clock = _Progress(steps, log_every)

    def step_at(lr_now: float) -> float:
        for g in opt.param_groups:
            g["lr"] = lr_now
        batch = _draw_batch(rng, prompts, targets, noisy_targets, answer_noise, batch_size, pad_id)
        run.losses.append(_optimizer_step(model, opt, batch, autocast_dtype, loss_float64, len(run.losses)))
        return run.losses[-1]

    for step in range(steps):
        step_at(_lr_at(step, steps, lr, warmup))
        clock.tick(step, run.losses, opt.param_groups[0]["lr"])
        run.stopped_at = step + 1
        done = step + 1 == steps
        if chooser is not None and ((step + 1) % selection.every == 0 or done):
            if chooser.observe(model, step + 1) and not done:
                log.info("sft: stopping at step %d (%s)", step + 1,
                         "held-out target reached" if selection.target > 0 else
                         f"no held-out gain above {selection.min_gain:.3f} in {selection.patience} evaluations")
                break
    clock.close()
    if chooser is not None and selection.target > 0 and chooser.best < selection.target:
        raise SFTNotConverged(f"SFT warm start did not converge: best held-out greedy accuracy {chooser.best:.3f} "
                              f"(step {chooser.kept_step}) < model.tiny.sft_target_accuracy={selection.target} after "
                              f"{run.stopped_at} steps; raise model.tiny.sft_steps")
    if chooser is not None and selection.target > 0 and selection.anneal_steps > 0:
        _anneal(model, step_at, start_lr=opt.param_groups[0]["lr"], steps=selection.anneal_steps)
        run.stopped_at += selection.anneal_steps
        chooser.note(model, run.stopped_at)  # for the manifest: the last step is kept, whatever it scores
        run.curve, run.kept_step = chooser.curve, run.stopped_at
    elif chooser is not None:
        if chooser.best_state is not None:
            model.load_state_dict(chooser.best_state)
        run.curve, run.kept_step = chooser.curve, chooser.kept_step
    else:
        run.kept_step = run.stopped_at
    model.eval()
    return run


def _optimizer_step(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
                    autocast_dtype: torch.dtype | None, loss_float64: bool, step: int) -> float:
    """One SFT update on ``batch``; its loss."""
    with _autocast(module_device(model), autocast_dtype):
        logp = response_logprobs(model, batch)
    total = logp.double().sum() if loss_float64 else logp.sum()
    loss = -(total / batch["response_mask"].sum().to(logp.device)).to(logp.dtype)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"SFT: loss is {loss.item()} at step {step}")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.item())


def _anneal(model: torch.nn.Module, step_at: Callable[[float], float], *, start_lr: float, steps: int) -> None:
    """``steps`` more updates with the lr falling linearly from ``start_lr`` to ``start_lr / steps``."""
    log.info("sft: annealing %d steps from lr %.2e to 0", steps, start_lr)
    clock = _Progress(steps, max(1, steps // 4), desc="sft anneal", label="sft anneal")
    for k in range(steps):
        lr_now = start_lr * (steps - k) / steps
        clock.tick(k, [step_at(lr_now)], lr_now)
    clock.close()


def _draw_batch(rng: random.Random, prompts: Sequence[PromptInput], targets: Sequence[Sequence[Sequence[int]]],
                noisy_targets: Sequence[Sequence[Sequence[int]]] | None, answer_noise: float, batch_size: int,
                pad_id: int) -> dict[str, Any]:
    """``batch_size`` problems and one route each (its noisy twin with probability ``answer_noise``)."""
    idx = [rng.randrange(len(prompts)) for _ in range(batch_size)]
    resp = []
    for i in idx:
        j = rng.randrange(len(targets[i]))
        noisy = noisy_targets is not None and rng.random() < answer_noise
        resp.append(noisy_targets[i][j] if noisy else targets[i][j])  # type: ignore[index]
    return collate([prompts[i] for i in idx], resp, pad_id)


class _Progress:
    """The SFT's progress: a bar in a terminal, else a log line every ``log_every`` steps with ETA."""

    def __init__(self, steps: int, log_every: int, desc: str = "sft warm start", label: str = "sft") -> None:
        self.steps, self.log_every, self.label = steps, log_every, label
        self.t0 = time.perf_counter()
        self.bar = progress_bar(steps, desc, unit="step")

    def tick(self, step: int, losses: list[float], lr: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
            self.bar.update(1)
        elif (step + 1) % self.log_every == 0 or step + 1 == self.steps:
            elapsed = time.perf_counter() - self.t0
            log.info("%s step %d/%d loss %.4f lr %.2e (%s, about %s left)", self.label, step + 1, self.steps,
                     np.mean(losses[-self.log_every:]), lr, duration(elapsed),
                     duration(elapsed / (step + 1) * (self.steps - step - 1)))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def jaccard_distance(a: Sequence[int], b: Sequence[int]) -> float:
    """1 - |A ∩ B| / |A ∪ B| of the token sets (two empty responses: distance 0)."""
    sa, sb = set(a), set(b)
    union = len(sa | sb)
    return 0.0 if union == 0 else 1.0 - len(sa & sb) / union


def evaluate_policy(kit: PolicyKit, records: Sequence[Record], *, settings: EvalSettings) -> dict[str, Any]:
    """Greedy and T=1 accuracy, mixed-group fraction, Jaccard distances in same-reward groups, of
    the first ``settings.num_prompts`` records, sampled by ``kit.engine`` and scored by ``kit.score``.

    Sampling: ``settings.n`` responses per prompt at T=1 (top-p 1, no top-k). A group is mixed
    when its accuracies are neither all 0 nor all 1. Jaccard distances are over all pairs of
    responses to the same question with the same overall reward (MDAP's advantage groups).
    """
    engine = kit.engine
    k = min(settings.num_prompts, len(records))
    records = list(records[:k])
    prompts = [kit.encode(r) for r in records]

    def _score(responses: list[Any]) -> list[dict[str, float]]:
        scores, _ = kit.score([r.text for r in responses], [records[r.prompt_index] for r in responses])
        return scores

    t0 = time.perf_counter()
    greedy = engine.generate(prompts, 1, SamplingConfig(temperature=0.0, max_new_tokens=settings.max_new_tokens))
    g_scores = _score(greedy)
    sampled = engine.generate(prompts, settings.n, SamplingConfig(temperature=1.0, max_new_tokens=settings.max_new_tokens,
                                                                  seed=settings.seed))
    s_scores = _score(sampled)
    by_prompt: dict[int, list[int]] = {}
    for j, r in enumerate(sampled):
        by_prompt.setdefault(r.prompt_index, []).append(j)
    mixed = 0
    distances: list[float] = []
    group_sizes: list[int] = []
    for members in by_prompt.values():
        accs = [s_scores[j]["accuracy"] for j in members]
        mixed += 0 < sum(accs) < len(accs)
        by_reward: dict[float, list[int]] = {}
        for j in members:
            by_reward.setdefault(s_scores[j]["overall"], []).append(j)
        for same in by_reward.values():
            group_sizes.append(len(same))
            for a in range(len(same)):
                for b in range(a + 1, len(same)):
                    distances.append(jaccard_distance(sampled[same[a]].response_ids, sampled[same[b]].response_ids))
    d = np.asarray(distances) if distances else np.zeros(0)
    return {
        "num_prompts": k,
        "n": settings.n,
        "greedy_accuracy": float(np.mean([s["accuracy"] for s in g_scores])),
        "greedy_format": float(np.mean([s["format"] for s in g_scores])),
        "sampled_accuracy": float(np.mean([s["accuracy"] for s in s_scores])),
        "sampled_format": float(np.mean([s["format"] for s in s_scores])),
        "sampled_mean_reward": float(np.mean([s["overall"] for s in s_scores])),
        "mixed_group_fraction": mixed / max(1, len(by_prompt)),
        "sampled_mean_length": float(np.mean([len(r.response_ids) for r in sampled])),
        "sampled_stop_fraction": float(np.mean([r.finish_reason == "stop" for r in sampled])),
        "same_reward_group_size_mean": float(np.mean(group_sizes)) if group_sizes else 0.0,
        "jaccard_pairs": int(d.size),
        "jaccard_quantiles": {str(q): float(np.quantile(d, q)) for q in JACCARD_QUANTILES} if d.size else {},
        "jaccard_mean": float(d.mean()) if d.size else float("nan"),
        "jaccard_frac_below_0.8": float((d < 0.8).mean()) if d.size else float("nan"),
        "jaccard_frac_zero": float((d == 0).mean()) if d.size else float("nan"),
        "eval_seconds": time.perf_counter() - t0,
    }


def _read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def warm_start(
    task: str,
    spec: TinyModelSpec,
    *,
    out_root: Path,
    seed: int,
    steps: int,
    lr: float,
    batch_size: int = 32,
    num_train: int = 2000,
    template: str = "fastrl_math",
    warmup_frac: float = 0.05,
    weight_decay: float = 0.0,
    num_threads: int | None = 1,
    eval_settings: EvalSettings | None = None,
    log_every: int | None = None,
    answer_noise: float = 0.0,
    device: torch.device | str = "cpu",
    compute_dtype: str = "float32",
    selection: SelectionSettings = SelectionSettings(),
    perturbation: Perturbation = Perturbation(),
    mix: VariantMix = VariantMix(),
) -> Path:
    """SFT a tiny ``spec`` model on ``task``'s worked solutions; return its directory (cached).

    ``answer_noise`` (0 by default) trains on a wrong boxed answer in that fraction of examples
    (the reasoning left intact; ``noisy_route``: an integer off by 1-3, a box with one edge moved),
    so the warm-started policy has a systematic, rewardable flaw — a box that does not follow from
    its own reasoning — which RL can remove for every prompt at once, as RL on real LLMs removes SFT's slips. Without it, the tiny policy's errors are
    per-problem arithmetic gaps, and GRPO on thousands of prompts was measured not to move them.

    The directory (``out_root / f"{task}-{kind}-{hash}"``) loads with
    ``fastrl.models.loaders.load_policy`` and vLLM and holds ``sft_manifest.json``: the inputs, the
    wall time, the loss curve summary and the
    validation metrics of ``evaluate_policy`` (greedy and T=1 accuracy, mixed-group fraction,
    Jaccard distances inside same-reward groups). ``eval_settings.num_prompts = 0`` skips the
    evaluation. ``num_threads`` sets torch's intra-op threads for the run (then restores them;
    None keeps the caller's). One thread is the default: for matrices this small a second thread
    buys little, the float summation order (hence the weights) then does not depend on the
    machine, and on a shared 2-core box two OpenMP threads were measured 10-100x slower.

    ``device`` is where SFT and its evaluation run (``fastrl.models.device.resolve_device``: the
    GPU when there is one). On CUDA, ``compute_dtype="bfloat16"`` runs the forward under bf16
    autocast (float32 weights and optimizer); on the CPU it is ignored. The saved weights are
    float32 either way.

    ``selection`` (:class:`SelectionSettings`) keeps the best held-out step instead of the last;
    ``perturbation`` (:class:`Perturbation`) is for stability measurements only; ``mix``
    (:class:`VariantMix`) trains on a share of another question type.
    """
    device = torch.device(device)
    autocast = _check_warm_start(steps, batch_size, lr, answer_noise, compute_dtype, device)
    inputs = sft_inputs(task, spec, seed=seed, steps=steps, lr=lr, batch_size=batch_size, num_train=num_train,
                        template=template, warmup_frac=warmup_frac, weight_decay=weight_decay,
                        answer_noise=answer_noise, device_type=device.type, autocast_dtype=autocast,
                        selection=selection, perturbation=perturbation, mix=mix)
    key = cache_key(inputs)
    out_root = Path(out_root)
    final = out_root / f"{task}-{spec.kind}-{key}"
    if _is_cached(final, inputs):
        return final
    out_root.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(out_root)
    tmp = out_root / f"{TMP_PREFIX}{task}-{key}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    log.info("sft warm start: none cached for %s (%s, %d steps on %s); building it in %s (once: later runs "
             "with the same inputs reuse it)", task, spec.kind, steps, device, final)
    prev_threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        record = _sft_into(tmp, task, spec, seed=seed, steps=steps, lr=lr, batch_size=batch_size,
                           num_train=num_train, template=template, warmup_frac=warmup_frac,
                           weight_decay=weight_decay, settings=eval_settings or EvalSettings(),
                           log_every=log_every or max(1, steps // 10), answer_noise=answer_noise,
                           device=device, autocast=autocast, selection=selection, perturbation=perturbation,
                           mix=mix)
        (tmp / MANIFEST).write_text(json.dumps({"inputs": inputs, "key": key, **record}, indent=2, sort_keys=True))
        _publish(tmp, final)
        return final
    finally:
        torch.set_num_threads(prev_threads)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


TMP_PREFIX = ".tmp-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_builds(out_root: Path) -> list[Path]:
    """Remove the ``.tmp-<task>-<key>-<pid>`` folders of builds whose process is gone (killed
    mid-build: SIGKILL, a crash, a power cut; an interrupt cleans up after itself); a live build's
    folder stays. Returns the folders removed. Assumes the cache is on this machine's processes: a
    cache shared over a network file system with builds on other hosts is not supported."""
    removed = []
    for tmp in Path(out_root).glob(f"{TMP_PREFIX}*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if tmp.is_dir() and pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    if removed:
        log.info("sft cache: removed %d unfinished build(s) of killed processes: %s", len(removed),
                 ", ".join(p.name for p in removed))
    return removed


def _check_warm_start(steps: int, batch_size: int, lr: float, answer_noise: float, compute_dtype: str,
                      device: torch.device) -> str | None:
    """Check warm_start's arguments; return the autocast dtype name (bf16 on CUDA only) or None."""
    if steps < 0 or batch_size < 1 or lr <= 0:
        raise ValueError(f"warm_start: need steps >= 0, batch_size >= 1, lr > 0; got {steps}, {batch_size}, {lr}")
    if not 0.0 <= answer_noise < 1.0:
        raise ValueError(f"warm_start: answer_noise={answer_noise} must lie in [0, 1)")
    if compute_dtype not in ("float32", "bfloat16"):
        raise ValueError(f"warm_start: compute_dtype={compute_dtype!r}; valid: float32, bfloat16")
    return "bfloat16" if compute_dtype == "bfloat16" and device.type == "cuda" else None


def _is_cached(final: Path, inputs: dict[str, Any]) -> bool:
    """True when ``final`` holds a finished warm start of exactly ``inputs``; a directory without a
    matching manifest is not a valid cache entry and is removed."""
    manifest = _read_manifest(final)
    if manifest is not None and manifest.get("inputs") == inputs:
        log.info("sft warm start: cached, reusing %s (val greedy accuracy %s)", final,
                 manifest.get("metrics", {}).get("greedy_accuracy"))
        return True
    if final.exists():
        log.warning("sft cache: %s has no matching manifest; rebuilding", final)
        shutil.rmtree(final)
    return False


def _publish(tmp: Path, final: Path) -> None:
    """Move a finished warm start into place (a concurrent writer that finished first wins)."""
    try:
        tmp.rename(final)
    except OSError:
        if _read_manifest(final) is None:
            raise
        shutil.rmtree(tmp)


def _sft_into(tmp: Path, task: str, spec: TinyModelSpec, *, seed: int, steps: int, lr: float, batch_size: int,
              num_train: int, template: str, warmup_frac: float, weight_decay: float, settings: EvalSettings,
              log_every: int, answer_noise: float, device: torch.device, autocast: str | None,
              selection: SelectionSettings, perturbation: Perturbation, mix: VariantMix) -> dict[str, Any]:
    """Build the tiny model in ``tmp``, SFT it, save it there and evaluate it; the manifest's record."""
    t0 = time.perf_counter()
    build_tiny_model_dir(spec, tmp, seed=seed)
    kit = load_policy_kit(PolicySpec(path=tmp, hf=HFEngineConfig(batch_size=settings.batch_size),
                                     reward=TEMPLATE_REWARD[template], template=template), device)
    model, tokenizer = kit.model, kit.tokenizer
    perturb_weights(model, perturbation)
    num_held_out = selection.num_prompts if selection.every > 0 else 0
    train = sft_problems(task, num_train + num_held_out, seed, mix)
    train, held_out = train[:num_train], train[num_train:]
    prompts = [kit.encode(r) for r in train]
    targets = _route_ids(tokenizer, train)
    noisy = _noisy_route_ids(tokenizer, train, seed) if answer_noise > 0 else None
    t_prep = time.perf_counter() - t0
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        run = train_sft(model, prompts, targets, pad_id=kit.pad_id, seed=seed, steps=steps, lr=lr,
                        batch_size=batch_size, warmup_frac=warmup_frac, weight_decay=weight_decay,
                        log_every=log_every, noisy_targets=noisy, answer_noise=answer_noise,
                        autocast_dtype=torch.bfloat16 if autocast else None, selection=selection,
                        evaluate=lambda _m: greedy_accuracy(kit, held_out, settings.max_new_tokens),
                        loss_float64=perturbation.loss_float64)
    losses = run.losses
    t_train = time.perf_counter() - t0 - t_prep
    model.save_pretrained(str(tmp), safe_serialization=True)
    metrics: dict[str, Any] = {}
    if settings.num_prompts > 0:
        log.info("sft warm start: trained in %s; measuring it on %d validation prompts x %d samples", duration(t_train),
                 settings.num_prompts, settings.n)
        val = generate_task(task, split="val", num=settings.num_prompts, seed=seed)
        metrics = evaluate_policy(kit, val, settings=settings)
        log.info("sft %s: val greedy accuracy %.3f, T=1 accuracy %.3f, mixed groups %.2f", task,
                 metrics["greedy_accuracy"], metrics["sampled_accuracy"], metrics["mixed_group_fraction"])
    return {
        "prep_seconds": t_prep,
        "train_seconds": t_train,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "loss_first": losses[0] if losses else None,
        "loss_last_10pct": float(np.mean(losses[-max(1, len(losses) // 10):])) if losses else None,
        "eval_settings": settings.__dict__,
        "metrics": metrics,
        "selection": {"curve": run.curve, "kept_step": run.kept_step, "stopped_at": run.stopped_at},
    }


def greedy_accuracy(kit: PolicyKit, records: Sequence[Record], max_new_tokens: int) -> float:
    """Mean greedy accuracy of ``kit``'s policy on ``records`` (the held-out selection measure)."""
    prompts = [kit.encode(r) for r in records]
    out = kit.engine.generate(prompts, 1, SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens))
    scores, _ = kit.score([r.text for r in out], [records[r.prompt_index] for r in out])
    return float(np.mean([s["accuracy"] for s in scores]))


def perturb_weights(model: torch.nn.Module, perturbation: Perturbation) -> None:
    """Multiply every parameter by ``1 + init_scale * N(0, 1)`` in place (no-op at scale 0); a
    stand-in for another machine's rounding of the same initial weights."""
    if perturbation.init_scale == 0:
        return
    gen = torch.Generator().manual_seed(perturbation.seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.device, p.dtype)
            p.mul_(1 + perturbation.init_scale * noise)
