"""The run directory's contract: one identity, one writer, a finished run is never retrained.

- **Identity.** ``<run_dir>/config.yaml`` is the resolved config, written once, when the run is
  created (after its model and data were built). A later start in that directory compares its own
  resolved config with it and refuses every difference that changes the training, naming each key
  with its old and new value, before any model is built. Only the keys of :data:`RESUMABLE_KEYS`
  may differ (how long the run goes, where and how often things are written or shown, how hard a
  check is).
- **Finished runs.** A run whose log ends with its ``val_final`` line and whose ``final/`` policy
  exists is finished: the same config reports "finished, nothing to do" with the path to its
  ``summary.json``; a larger ``trainer.total_steps`` extends it from its last checkpoint.
- **Starting over** is explicit: ``--force-new`` (``fastrl.train(..., force_new=True)``) or
  ``trainer.resume=false`` move the old contents aside, to ``<run_dir>.replaced-<UTC time>/``; nothing
  is deleted.
- **One writer.** An exclusive ``fcntl.flock`` on ``<run_dir>/.lock`` held by rank 0 of the run for
  its lifetime; the OS drops it when the process dies, so a killed run never leaves a stale lock.
  A second start in the same directory fails at once, naming the holder's pid.

Everything here runs on rank 0 only (the pipeline broadcasts the outcome to the other ranks).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Mapping

import yaml

from fastrl import metric_keys as K
from fastrl.config import FastRLConfig, save_config, to_dict
from fastrl.training.metrics import read_metrics

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"
LOCK_FILE = ".lock"
FINAL_DIR = "final"
REPLACED_INFIX = ".replaced-"

# The config keys that may differ between a run's config.yaml and a start that resumes it: they
# change neither what is trained nor how (validation and checkpoints do not move the training's
# RNG streams: seeded generation runs under torch.random.fork_rng). Every other key is the run's
# identity. total_steps extends a run (or ends it earlier, never before the steps already done;
# ARS's released rule reads progress = step / total_steps, so an extended run is not the same as a
# run planned that long from the start). torch_threads may change CPU float rounding, not the recipe.
RESUMABLE_KEYS: tuple[str, ...] = (
    "trainer.total_steps",
    "trainer.run_dir",
    "trainer.resume",
    "trainer.val_every",
    "trainer.save_every",
    "trainer.keep_checkpoints",
    "trainer.tensorboard",
    "trainer.progress",
    "trainer.torch_threads",
    "rollout.logprob_check_tol",
    "rollout.logprob_check_samples",
    # When a reward that keeps failing stops the run: a rule for stopping, like total_steps, not
    # for training (a run that never trips it trains the same under any values).
    "data.reward_max_failure_share",
    "data.reward_max_failing_steps",
)

# Keys the schema renamed (issue 18: trainer.optim, model.tiny): a config.yaml written before
# reads under the new names, so its run still resumes (or reports finished) under the same config.
RENAMED_KEYS: dict[str, str] = {
    "trainer.lr": "trainer.optim.lr",
    "trainer.weight_decay": "trainer.optim.weight_decay",
    "trainer.grad_clip": "trainer.optim.grad_clip",
    "trainer.lr_warmup_steps": "trainer.optim.warmup_steps",
    **{f"model.{k}": f"model.tiny.{k}" for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                                 "intermediate_size", "sft_steps", "sft_lr", "sft_batch_size",
                                                 "sft_answer_noise")},
}
# Keys that schema lacked, with the values its code fixed (the actor's hard-coded AdamW settings).
ADDED_KEYS: dict[str, Any] = {"trainer.optim.betas": [0.9, 0.999], "trainer.optim.eps": 1e-8,
                              "trainer.optim.offload": False}
# The retention rule's options moved from algorithm.ars to their own section (one section per ARS
# rule); algorithm.ars.rule is gone (the scaler's name is its rule). Its period was shared.
ARS_RETENTION_KEYS = ("n_min", "n_max", "beta", "headroom", "rho_high", "grow_step", "per_prompt")
ARS_RULE_KEY = "algorithm.ars.rule"


# Test hook: FASTRL_TEST_KILL_AT=<point>[:<k>] SIGKILLs this process the k-th time (default: first)
# it reaches fault_point(<point>); tests aim kills inside a checkpoint write with it. Unset, it
# costs one dict lookup.
KILL_ENV = "FASTRL_TEST_KILL_AT"
_fault_hits: dict[str, int] = {}


def fault_point(name: str) -> None:
    """SIGKILL this process here when ``$FASTRL_TEST_KILL_AT`` names this point (tests only)."""
    target = os.environ.get(KILL_ENV)
    if not target or target.split(":")[0] != name:
        return
    _fault_hits[name] = _fault_hits.get(name, 0) + 1
    if _fault_hits[name] == int(target.partition(":")[2] or 1):
        os.kill(os.getpid(), signal.SIGKILL)


class RunDirError(ValueError):
    """The run directory belongs to another config, another process, or cannot be resumed."""


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _as_saved(cfg: FastRLConfig) -> dict[str, Any]:
    """The config as config.yaml holds it (a YAML round trip: tuples become lists, and so on)."""
    return yaml.safe_load(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def upgrade_saved(flat: Mapping[str, Any]) -> dict[str, Any]:
    """A flattened config.yaml of the schema before ``RENAMED_KEYS`` (and before the per-rule ARS
    sections) under the current names, with the values the code then fixed (``ADDED_KEYS``, and
    ``model.source`` as ``model.path`` chose it); a config of the current schema is returned as it is."""
    out = _upgrade_ars_sections(flat)
    if not any(k in out for k in RENAMED_KEYS):
        return out
    renamed = {RENAMED_KEYS.get(k, k): v for k, v in out.items()}
    for key, value in ADDED_KEYS.items():
        renamed.setdefault(key, value)
    renamed.setdefault("model.source", "path" if out.get("model.path") else "tiny")
    return renamed


def _upgrade_ars_sections(flat: Mapping[str, Any]) -> dict[str, Any]:
    """A config.yaml with one ``algorithm.ars`` section for every ARS rule (it has ``rule``) under
    the per-rule sections: the retention options in ``algorithm.ars_retention``, the period in both."""
    if ARS_RULE_KEY not in flat:
        return dict(flat)
    moved = {f"algorithm.ars.{k}": f"algorithm.ars_retention.{k}" for k in ARS_RETENTION_KEYS}
    out = {moved.get(k, k): v for k, v in flat.items() if k != ARS_RULE_KEY}
    if "algorithm.ars.period_steps" in flat:
        out["algorithm.ars_retention.period_steps"] = flat["algorithm.ars.period_steps"]
    return out


def config_changes(saved: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, saved value, new value) of every identity key that differs; a key only one side has
    (a config written by another version of the schema, beyond ``upgrade_saved``) counts as a
    difference too."""
    missing = "<absent>"
    a, b = upgrade_saved(flatten(saved)), flatten(new)
    return [(k, a.get(k, missing), b.get(k, missing)) for k in sorted(set(a) | set(b))
            if k not in RESUMABLE_KEYS and a.get(k, missing) != b.get(k, missing)]


def check_identity(run_dir: Path, cfg: FastRLConfig) -> None:
    """Refuse to continue ``run_dir`` with a config that changes its training (one line)."""
    path = Path(run_dir) / CONFIG_FILE
    try:
        saved = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise RunDirError(f"{path}: not a readable config ({str(exc).splitlines()[0]}); "
                          "pass --force-new to start the run over") from None
    changes = config_changes(saved, _as_saved(cfg))
    if changes:
        listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in changes)
        raise RunDirError(
            f"{run_dir} holds a run of a different config ({path}); it resumes only with the same training "
            f"config, and these keys differ: {listed}. Use the run's own config, another trainer.run_dir, "
            f"or --force-new to move the old run aside and start over")


def write_identity(run_dir: Path, cfg: FastRLConfig) -> None:
    """Write config.yaml unless the run already has one (it is written once, at creation)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        tmp = path.with_name(f".{CONFIG_FILE}.tmp")
        save_config(cfg, tmp)
        os.replace(tmp, path)


# ------------------------------------------------------------------------------------ finished runs
def is_finished(run_dir: Path) -> bool:
    """The log ends with the final validation line (written after ``final/``) and ``final/`` exists."""
    rows = read_metrics(Path(run_dir), warn=False)  # the resume warns about a torn line, once
    return bool(rows) and rows[-1].get(K.PHASE) == K.PHASE_VAL_FINAL and (Path(run_dir) / FINAL_DIR).is_dir()


def finished_steps(run_dir: Path) -> int:
    """Training steps of a finished run (the step of its final line)."""
    return int(read_metrics(Path(run_dir), warn=False)[-1][K.STEP])


def write_summary(run_dir: Path, summary: Mapping[str, Any]) -> Path:
    path = Path(run_dir) / SUMMARY_FILE
    tmp = path.with_name(f".{SUMMARY_FILE}.tmp")
    tmp.write_text(json.dumps(dict(summary), indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


def finished_report(run_dir: Path) -> dict[str, Any]:
    """What ``fit`` returns for a finished run: its saved summary, marked as not retrained."""
    path = Path(run_dir) / SUMMARY_FILE
    summary = json.loads(path.read_text()) if path.is_file() else {"steps": finished_steps(run_dir)}
    where = path if path.is_file() else Path(run_dir) / "metrics.jsonl"
    return {**summary, "status": "finished", "summary_path": str(where),
            "message": f"{run_dir}: finished, nothing to do (summary: {where})"}


# ------------------------------------------------------------------------------------------ the lock
class LockUnwritable(RunDirError):
    """The run lock cannot be created or opened for writing (read-only mount, permissions)."""


class RunLock:
    """An exclusive ``flock`` on ``<run_dir>/.lock``; the file holds the holder's pid."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(self.path, "a+")
        except OSError as exc:  # a read-only mount, a folder of another user
            raise LockUnwritable(f"{self.path}: cannot write the run lock ({exc.strerror})") from None
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise RunDirError(f"{self.path.parent} is in use by another run (pid {holder}, lock {self.path}); "
                              "wait for it to end or use another trainer.run_dir") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    @property
    def held(self) -> bool:
        return self._fh is not None


def check_unlocked(run_dir: Path) -> None:
    """Fail at once (before torch is imported) when another process holds ``run_dir``'s lock.
    Launcher rank 0 only (``$RANK``, as torchrun and deepspeed set it): the other ranks of one run
    never take the lock. The Trainer takes the lock for real later; this is the fast path."""
    if int(os.environ.get("RANK", "0")) != 0 or not Path(run_dir).is_dir():
        return
    probe = RunLock(run_dir)
    try:
        probe.acquire()
    except LockUnwritable:
        return  # nobody can hold a lock that cannot be written; the Trainer decides (open_with_lock)
    probe.release()


def move_aside(run_dir: Path) -> Path | None:
    """Move every entry of ``run_dir`` but the lock to ``<run_dir>.replaced-<UTC time>/`` (the lock
    stays held throughout); returns that folder, or None when there was nothing to move."""
    run_dir = Path(run_dir)
    entries = [p for p in run_dir.iterdir() if p.name != LOCK_FILE] if run_dir.is_dir() else []
    if not entries:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = run_dir.with_name(f"{run_dir.name}{REPLACED_INFIX}{stamp}")
    suffix = 1
    while dest.exists():
        suffix += 1
        dest = run_dir.with_name(f"{run_dir.name}{REPLACED_INFIX}{stamp}-{suffix}")
    dest.mkdir(parents=True)
    for entry in entries:
        os.replace(entry, dest / entry.name)
    return dest


# ------------------------------------------------------------------------------------ opening a run
@dataclass
class Opening:
    """What rank 0 found in the run directory (broadcast to every rank)."""

    finished: dict[str, Any] | None = None  # the report of a finished run: nothing to train
    moved_to: str | None = None  # where --force-new moved the old contents
    error: str | None = None  # a RunDirError message: every rank raises it


def open_with_lock(lock: RunLock, run_dir: Path, cfg: FastRLConfig, *, force_new: bool) -> Opening:
    """Take ``lock`` and decide (``open_run``). Where the lock cannot be written (a read-only
    mount), a finished run of this config is still reported finished, since reading needs no lock;
    anything else is one line naming the lock and why."""
    try:
        lock.acquire()
    except LockUnwritable as exc:
        run_dir = Path(run_dir)
        if not force_new and cfg.trainer.resume and (run_dir / CONFIG_FILE).exists() and is_finished(run_dir):
            check_identity(run_dir, cfg)
            if finished_steps(run_dir) == cfg.trainer.total_steps:
                return Opening(finished=finished_report(run_dir))
        raise RunDirError(f"{exc}; training here needs to write (only a finished run of this config can be "
                          "reported without it): use a writable trainer.run_dir") from None
    return open_run(run_dir, cfg, force_new=force_new)


def open_run(run_dir: Path, cfg: FastRLConfig, *, force_new: bool) -> Opening:
    """Decide what a start in ``run_dir`` does (the lock must already be held)."""
    run_dir = Path(run_dir)
    if force_new or not cfg.trainer.resume:
        moved = move_aside(run_dir)
        if moved is not None:
            log.warning("%s: started over (%s); its previous contents are in %s", run_dir,
                        "--force-new" if force_new else "trainer.resume=false", moved)
        return Opening(moved_to=str(moved) if moved else None)
    if not (run_dir / CONFIG_FILE).exists():
        return Opening()
    check_identity(run_dir, cfg)
    from fastrl.training.checkpoint import checkpoint_candidates

    planned = cfg.trainer.total_steps
    if not is_finished(run_dir):
        newest = max((step for step, _ in checkpoint_candidates(run_dir)), default=0)
        if newest > planned:
            raise RunDirError(f"{run_dir} has a checkpoint of step {newest}; trainer.total_steps={planned} cannot "
                              f"undo it (use trainer.total_steps >= {newest}, another trainer.run_dir, or --force-new)")
        return Opening()
    done = finished_steps(run_dir)
    if planned == done:
        return Opening(finished=finished_report(run_dir))
    if planned < done:
        raise RunDirError(f"{run_dir} finished {done} steps; trainer.total_steps={planned} cannot undo them "
                          f"(use trainer.total_steps >= {done}, another trainer.run_dir, or --force-new)")
    if not any(step == done for step, _ in checkpoint_candidates(run_dir)):
        raise RunDirError(f"{run_dir} finished {done} steps without a checkpoint of step {done} (trainer.save_every "
                          f"was 0), so it cannot be extended to trainer.total_steps={planned}; use another "
                          "trainer.run_dir or --force-new")
    (run_dir / SUMMARY_FILE).unlink(missing_ok=True)  # extending: no longer finished once it resumes
    return Opening()
