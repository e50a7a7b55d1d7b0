"""The command line talks while it works (issue 27): logging at INFO by default, --log-level and
-q; the resolved config at the start of a run and one closing line at its end (--json keeps the
summary dump); --print-config; a sweep's header and a line per point. In-process, no model: the
trainer is replaced by a stub."""

from __future__ import annotations

import json
import logging

import pytest
import yaml

from fastrl import api, cli
from fastrl.logs import Progress

SUMMARY = {"resumed_from_step": None, "acc_before": 0.25, "acc_after": 0.375, "train_wall_s": 12.0, "steps": 3,
           "final_model": "runs/x/final", "method": "fastrl", "run_dir": "runs/x"}


@pytest.fixture(autouse=True)
def _restore_fastrl_logger():
    logger = logging.getLogger("fastrl")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


def _stub_train(monkeypatch, calls=None):
    def train(config, overrides=(), scale=None, **kw):
        cfg = api.load_run_config(config, overrides, scale)
        for line in api.describe_config(cfg):
            logging.getLogger("fastrl.api").info(line)
        if calls is not None:
            calls.append(list(overrides))
        return {**SUMMARY, "run_dir": cfg.trainer.run_dir}

    monkeypatch.setattr(api, "train", train)


def test_train_logs_its_config_at_info_and_ends_with_one_line(monkeypatch, capsys):
    _stub_train(monkeypatch)
    assert cli.main(["train", "methods/fastrl.yaml", "--scale", "smoke", "trainer.run_dir=runs/x"]) == 0
    out, err = capsys.readouterr()
    assert "method fastrl: " in err and "pruner mdap" in err and "rollout_scaler ars" in err
    assert "model tiny qwen2" in err and "scale smoke: 2 steps" in err and "run_dir runs/x" in err
    assert out.count("\n") == 1 and not out.startswith("{")
    assert "val accuracy 0.250 -> 0.375" in out and "policy runs/x/final" in out
    assert "metrics runs/x/metrics.jsonl" in out and "12 s" in out


def test_train_json_keeps_the_summary_dump(monkeypatch, capsys):
    _stub_train(monkeypatch)
    assert cli.main(["train", "methods/grpo.yaml", "--scale", "smoke", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["acc_after"] == 0.375


@pytest.mark.parametrize("argv", [["-q", "train", "methods/grpo.yaml"], ["train", "methods/grpo.yaml", "-q"],
                                  ["train", "methods/grpo.yaml", "--log-level", "warning"]])
def test_quiet_and_log_level_silence_the_info_lines(monkeypatch, capsys, argv):
    _stub_train(monkeypatch)
    assert cli.main([*argv, "--scale", "smoke"]) == 0
    assert "method grpo" not in capsys.readouterr().err
    assert logging.getLogger("fastrl").level == logging.WARNING


def test_print_config_prints_the_resolved_yaml_and_trains_nothing(monkeypatch, capsys):
    monkeypatch.setattr(api, "train", lambda *a, **k: pytest.fail("--print-config must not train"))
    assert cli.main(["train", "methods/fastrl.yaml", "--scale", "smoke", "algorithm.mdap.tau=0.6",
                     "--print-config"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["method"] == "fastrl" and cfg["scale"] == "smoke" and cfg["algorithm"]["mdap"]["tau"] == 0.6
    assert cfg["trainer"]["loggers"] == ["jsonl"]


def test_sweep_prints_a_header_and_a_line_per_point_as_it_goes(monkeypatch, capsys, tmp_path):
    calls: list = []
    _stub_train(monkeypatch, calls)
    sweep = tmp_path / "s.yaml"
    sweep.write_text("base: methods/fastrl.yaml\nsweep:\n  algorithm.mdap.tau: [0.2, 0.8]\n")
    assert cli.main(["sweep", str(sweep), "--scale", "smoke", "trainer.run_dir=runs/sw"]) == 0
    out, err = capsys.readouterr()
    assert "sweep s.yaml: 2 point(s) of methods/fastrl.yaml (smoke scale, 2 steps each)" in err
    assert "sweep point 1/2: algorithm.mdap.tau=0.2" in err and "sweep point 2/2 done: " in err
    assert err.index("sweep point 1/2 done") < err.index("sweep point 2/2: ")  # as it goes, not at the end
    assert out.splitlines() == [
        "algorithm.mdap.tau=0.2: val accuracy 0.250 -> 0.375, 3 steps, runs/sw/sweep/mdap.tau=0.2",
        "algorithm.mdap.tau=0.8: val accuracy 0.250 -> 0.375, 3 steps, runs/sw/sweep/mdap.tau=0.8"]
    assert len(calls) == 2


def test_a_bad_log_level_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--log-level", "LOUD", "train", "methods/grpo.yaml"])
    assert "--log-level" in capsys.readouterr().err


def test_progress_logs_a_tenth_at_a_time_outside_a_terminal(caplog):
    p = Progress(20, "eval x", unit="response")
    with caplog.at_level("INFO", logger="fastrl"):
        for _ in range(10):
            p.update(2)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 10 and lines[-1].startswith("eval x: 20/20 responses")


def test_a_finished_run_says_so_with_its_accuracy():
    line = api.closing_line({**SUMMARY, "status": "finished", "message": "runs/x: finished, nothing to do"}, 1.0)
    assert line.startswith("runs/x: finished, nothing to do; val accuracy 0.250 -> 0.375; policy runs/x/final")


def test_the_start_line_names_the_model_of_every_source():
    """The model line comes from the chosen source, not a branch on "path": a GGUF run was
    described as the tiny model it does not train (issue 29)."""
    gguf = api.load_run_config("methods/grpo.yaml", ["model.source=gguf", "model.path=pkg/m.gguf"], "smoke")
    assert api.describe_config(gguf)[1].startswith("model pkg/m.gguf (float32); rollout engine hf")
    tiny = api.describe_config(api.load_run_config("methods/grpo.yaml", [], "smoke"))[1]
    assert tiny.startswith("model tiny qwen2 (float32; model.tiny: hidden_size 128, num_layers 1")
