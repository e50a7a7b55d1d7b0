"""What the command line prints for bad input: one line and exit code 2, the traceback only with
``--debug``; a bug keeps its traceback. Run in-process (``fastrl.cli.main``)."""

from __future__ import annotations

import pytest

from fastrl import api, cli

TYPO = ["train", "methods/grpo.yaml", "--scale", "smoke", "algorithm.mdap.taux=0.3"]
TYPO_LINE = ("fastrl: error: unknown key 'algorithm.mdap.taux'; did you mean 'algorithm.mdap.tau'? "
             "Keys of algorithm.mdap: tau, rule\n")


def test_config_error_is_one_line_with_exit_code_2(capsys):
    assert cli.main(TYPO) == 2
    out = capsys.readouterr()
    assert out.err == TYPO_LINE and out.out == ""


@pytest.mark.parametrize("argv", [["--debug", *TYPO], [*TYPO, "--debug"]])
def test_debug_adds_the_traceback(capsys, argv):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "ConfigError" in err
    assert err.endswith(TYPO_LINE)


def test_eval_of_a_missing_model_path_is_one_line(capsys, tmp_path):
    missing = tmp_path / "runs" / "nope"
    assert cli.main(["eval", "--model", str(missing), "--benchmark", "mini-math"]) == 2
    err = capsys.readouterr().err
    assert err == (f"fastrl: error: --model {str(missing)!r}: no such run or model directory "
                   "(and not a hub id namespace/name)\n")


def test_hub_ids_and_local_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert api.is_hub_id("Qwen/Qwen2.5-VL-7B-Instruct") and api.is_hub_id("meta-llama/Llama-3.2-1B")
    for local in ("runs/typo", "./model", "/abs/model", "~/model", "model", "a/b/c", ".cache/x"):
        assert not api.is_hub_id(local), local
    cli.check_model_arg("Qwen/Qwen2.5-VL-7B-Instruct")  # left to transformers
    (tmp_path / "runs" / "config.json").write_text("{}")
    cli.check_model_arg(str(tmp_path / "runs"))  # a model directory
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="'empty' is a directory without config.json"):
        cli.check_model_arg("empty")  # exists, but holds no model
    with pytest.raises(FileNotFoundError, match="'runs/typo': no such run or model directory"):
        cli.check_model_arg("runs/typo")


def test_bad_input_value_error_is_one_line(capsys, monkeypatch):
    def bad_input(args):
        raise ValueError("data.train_files: row 3 has no answer")

    monkeypatch.setattr(cli, "cmd_train", bad_input)
    assert cli.main(["train", "methods/grpo.yaml"]) == 2
    assert capsys.readouterr().err == "fastrl: error: data.train_files: row 3 has no answer\n"


def test_a_bug_keeps_its_traceback(monkeypatch):
    def bug(args):
        raise KeyError("internal")

    monkeypatch.setattr(cli, "cmd_train", bug)
    with pytest.raises(KeyError, match="internal"):
        cli.main(["train", "methods/grpo.yaml"])
