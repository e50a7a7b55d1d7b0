"""trainer.loggers (issue 27): jsonl always, tensorboard and Weights & Biases on request; wandb is
tested offline (WANDB_MODE=offline), by reading the run file it writes."""

from __future__ import annotations

import json
import time
import struct
from pathlib import Path

import pytest

from fastrl.config import ConfigError, load_config
from fastrl.training.metrics import WANDB_ID_FILE, RunLogger


@pytest.mark.parametrize("loggers, says", [("[tensorboard]", "includes jsonl"), ("[jsonl,mlflow]", "among jsonl"),
                                           ("[jsonl,jsonl]", "distinct")])
def test_bad_loggers_are_one_line(loggers, says):
    with pytest.raises(ConfigError, match=says):
        load_config("methods/grpo.yaml", [f"trainer.loggers={loggers}"], scale="smoke")


def test_the_old_tensorboard_key_names_its_replacement(tmp_path):
    with pytest.raises(ConfigError, match=r"replaced by trainer.loggers: trainer.loggers=\[jsonl,tensorboard\]"):
        load_config("methods/grpo.yaml", ["trainer.tensorboard=true"], scale="smoke")
    own = tmp_path / "mine.yaml"
    own.write_text("defaults: [methods/grpo.yaml]\ntrainer:\n  tensorboard: true\n")
    with pytest.raises(ConfigError, match="replaced by trainer.loggers"):
        load_config(own, scale="smoke")


def test_a_logger_that_is_not_installed_fails_when_the_run_starts(monkeypatch):
    import importlib.util

    from fastrl.config import check_loggers_installed

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r"wandb package is not installed here; pip install -e '.\[wandb\]'"):
        check_loggers_installed(["jsonl", "wandb"])
    check_loggers_installed(["jsonl", "tensorboard"])


def test_tensorboard_gets_every_number_of_a_step(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = RunLogger(tmp_path, loggers=["jsonl", "tensorboard"])
    logger.log(1, {"reward/mean": 0.5, "phase": "train"})
    logger.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["reward/mean"] and acc.Scalars("reward/mean")[0].step == 1


def _wandb_records(path: Path) -> list:
    """The records of a ``run-<id>.wandb`` file (LevelDB-log framing: 7-byte file header, 32 KiB
    blocks, records of crc32 + length + type [full 1, first 2, middle 3, last 4])."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B"
    records, pending = [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # block trailer: padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if (kind == 0 and length == 0) or pos + 7 + length > len(data):  # the end, or a record being written
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _finished_records(path: Path, timeout_s: float = 30.0) -> list:
    """The file's records once wandb's service has written its exit record (it writes after
    ``finish()`` returns)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        records = _wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _history(run_file: Path) -> list[dict]:
    return [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            for r in _finished_records(run_file) if r.WhichOneof("record_type") == "history"]


def test_wandb_offline_mirrors_each_step_and_a_resume_continues_the_same_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    run = tmp_path / "my-run"
    run.mkdir()
    logger = RunLogger(run, loggers=["jsonl", "wandb"], config={"method": "fastrl", "trainer": {"seed": 3}})
    logger.log(1, {"reward/mean": 0.5, "phase": "train", "flag": True})
    logger.log(2, {"reward/mean": 0.75})
    logger.close()
    run_id = (run / WANDB_ID_FILE).read_text().strip()
    files = list((run / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(files) == 1
    records = _finished_records(files[0])
    info = [r for r in records if r.WhichOneof("record_type") == "run"][0].run
    assert (info.run_id, info.display_name, info.project) == (run_id, "my-run", "fastrl")
    config = {u.key: json.loads(u.value_json) for u in info.config.update}
    assert config["method"] == "fastrl" and config["trainer"] == {"seed": 3}
    rows = [{k: v for k, v in h.items() if not k.startswith("_")} for h in _history(files[0])]
    assert rows == [{"train/step": 1, "reward/mean": 0.5}, {"train/step": 2, "reward/mean": 0.75}]
    assert [json.loads(ln)["step"] for ln in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]

    time.sleep(1.1)  # wandb names offline folders by the second: two starts in one second share a folder
    again = RunLogger(run, loggers=["jsonl", "wandb"])  # a resumed run: the same wandb id
    again.log(3, {"reward/mean": 1.0})
    again.close()
    assert (run / WANDB_ID_FILE).read_text().strip() == run_id
    assert len(list((run / "wandb").glob(f"offline-run-*-{run_id}"))) == 2
