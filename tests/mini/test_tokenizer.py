"""The word-level mini tokenizer: whole numbers/words as tokens, text the reward parses."""

from __future__ import annotations

import pytest
from mathruler.grader import extract_boxed_content, grade_answer
from transformers import AutoTokenizer

from fastrl.data.templates import build_prompt_text
from fastrl.mini.tasks import MAX_NUMBER, VARIANTS, generate_task
from fastrl.mini.tokenizer import build_mini_tokenizer, mini_vocabulary
from fastrl.rewards.math import compute_score_unguarded


@pytest.fixture(scope="module")
def tok():
    return build_mini_tokenizer()


def test_round_trip_and_single_tokens(tok) -> None:
    text = "<thinking> 17 + 25 = 42 . then subtract 5 from 42 to get 37 . </thinking> \\boxed{ 37 }"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    pieces = tok.convert_ids_to_tokens(ids)
    assert pieces[0] == "<thinking>" and "</thinking>" in pieces and "\\boxed{" in pieces and pieces[-1] == "}"
    assert "42" in pieces and "subtract" in pieces  # whole numbers and words, not characters
    assert len(pieces) == len(text.split())
    assert tok.unk_token_id not in ids
    # Markers are found without spaces too; unknown words become one <unk> each.
    assert tok.convert_ids_to_tokens(tok.encode("\\boxed{7}.", add_special_tokens=False)) == ["\\boxed{", "7", "}", "."]
    assert tok.encode("zebra", add_special_tokens=False) == [tok.unk_token_id]


def test_numbers_are_whole_tokens(tok) -> None:
    for n in (0, 9, 10, 57, MAX_NUMBER):
        assert len(tok.encode(str(n), add_special_tokens=False)) == 1


def test_special_tokens(tok) -> None:
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.eos_token_id != tok.pad_token_id
    ids = tok.encode("<thinking> 3 </thinking> \\boxed{ 3 }", add_special_tokens=False) + [tok.eos_token_id]
    assert tok.decode(ids, skip_special_tokens=True) == "<thinking> 3 </thinking> \\boxed{ 3 }"
    assert len(tok) == len(mini_vocabulary())


@pytest.mark.parametrize(("name", "variant"), [(n, v) for n, vs in VARIANTS.items() for v in vs])
def test_generated_texts_are_in_vocabulary(tok, name: str, variant: str) -> None:
    for r in generate_task(name, split="train", num=50, seed=0, variant=variant):
        prompt = build_prompt_text(r, "fastrl_math").replace("<image>", "")
        assert tok.unk_token_id not in tok.encode(prompt, add_special_tokens=False), prompt
        for route in r.meta["routes"]:
            ids = tok.encode(route, add_special_tokens=False)
            assert tok.unk_token_id not in ids, route
            assert tok.decode(ids) == route


def test_decoded_solution_scores_full_reward(tok) -> None:
    for r in generate_task("mini-math", split="val", num=10, seed=0):
        for route in r.meta["routes"]:
            text = tok.decode(tok.encode(route, add_special_tokens=False) + [tok.eos_token_id], skip_special_tokens=True)
            assert grade_answer(extract_boxed_content(text), r.answer)  # mathruler directly
            assert compute_score_unguarded(text, r.answer) == {"overall": 1.5, "format": 1.0, "accuracy": 1.0}
            wrong = str(int(r.answer) + 1)
            assert compute_score_unguarded(text.replace(f"{{ {r.answer} }}", f"{{ {wrong} }}"), r.answer)["overall"] == 0.5


def test_chat_template(tok) -> None:
    text = tok.apply_chat_template([{"role": "user", "content": "compute 1 + 2 ."}], tokenize=False,
                                   add_generation_prompt=True)
    pieces = tok.convert_ids_to_tokens(tok.encode(text, add_special_tokens=False))
    assert pieces == ["<|im_start|>", "user", "compute", "1", "+", "2", ".", "<|im_end|>", "<|im_start|>", "assistant"]


def test_saved_tokenizer_reloads_identically(tmp_path) -> None:
    tok = build_mini_tokenizer(tmp_path)
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    text = "<|im_start|> user compute 12 + 3 . <|im_end|> <thinking> 12 + 3 = 15 . </thinking> \\boxed{ 15 }"
    assert again.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)
    assert again.eos_token_id == tok.eos_token_id and again.pad_token_id == tok.pad_token_id
