"""The word-level tokenizer of the mini/smoke scales, built locally (no hub download).

Whole numbers (0..MAX_NUMBER) and whole words are single tokens, as are the reward's markers
``<thinking>``, ``</thinking>``, ``\\boxed{`` and ``}``. That makes the token *set* of a response
look like a real reasoning trace's (MDAP compares token sets: with a character vocabulary of a
few dozen symbols every pair of responses would look alike). Decoding joins tokens with single
spaces, so a response decodes to text the paper's reward parses
(``<thinking> 7 + 12 = 19 . </thinking> \\boxed{ 19 }``).

The special tokens are named as in Qwen2/Qwen2.5-VL (``<|im_start|>``, ``<|im_end|>``,
``<|vision_start|>``, ``<|image_pad|>``, ...) so the same prompt code serves tiny and real models.
"""

from __future__ import annotations

import re
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from fastrl.data.templates import FASTRL_INSTRUCTION
from fastrl.mini.tasks import BOXED_CLOSE, BOXED_OPEN, MAX_NUMBER, TASK_WORDS, THINK_CLOSE, THINK_OPEN

PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
UNK_TOKEN = "<unk>"
IM_START = "<|im_start|>"
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"

# Special tokens: skipped by ``decode(skip_special_tokens=True)``. Order fixes their ids (0..7).
SPECIAL_TOKENS: tuple[str, ...] = (
    PAD_TOKEN, EOS_TOKEN, IM_START, UNK_TOKEN, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD,
)
# Format markers: ordinary (non-special) added tokens, so they survive decoding and are matched
# even without surrounding spaces (``\\boxed{7}`` still encodes as ``\\boxed{`` ``7`` ``}``).
FORMAT_TOKENS: tuple[str, ...] = (THINK_OPEN, THINK_CLOSE, BOXED_OPEN)

# Roles of the chat template.
ROLE_WORDS: tuple[str, ...] = ("system", "user", "assistant")

# Qwen-style chat template, written with spaces because the tokenizer splits on whitespace.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|> {{ message['role'] }} {{ message['content'] }} <|im_end|> "
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)


# Prompt texts the mini tasks are wrapped in (data.template ``fastrl_math``): their words get
# real tokens instead of ``<unk>``.
PROMPT_TEXTS: tuple[str, ...] = (FASTRL_INSTRUCTION,)


def _words_of(text: str) -> list[str]:
    """Words and single symbols of ``text`` as the pre-tokenizer splits them (markers removed)."""
    for marker in FORMAT_TOKENS:
        text = text.replace(marker, " ")
    return re.findall(r"\w+|[^\w\s]", text)


def mini_vocabulary() -> list[str]:
    """All tokens in id order: special tokens, format markers, ``}``, numbers, words."""
    vocab: list[str] = [*SPECIAL_TOKENS, *FORMAT_TOKENS, BOXED_CLOSE]
    vocab += [str(i) for i in range(MAX_NUMBER + 1)]
    words = [*ROLE_WORDS, *TASK_WORDS] + [w for t in PROMPT_TEXTS for w in _words_of(t)]
    for w in words:
        if w not in vocab:
            vocab.append(w)
    if len(set(vocab)) != len(vocab):
        dup = sorted({t for t in vocab if vocab.count(t) > 1})
        raise ValueError(f"mini vocabulary has duplicate tokens: {dup}")
    return vocab


def build_mini_tokenizer(out_dir: Path | None = None) -> PreTrainedTokenizerFast:
    """Build the word-level mini tokenizer; save it to ``out_dir`` when given.

    Unknown words map to ``<unk>`` (one token per word). ``eos`` is ``<|im_end|>`` (end of the
    assistant turn), ``pad`` is ``<|endoftext|>``; there is no BOS.
    """
    vocab = mini_vocabulary()
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(vocab)}, unk_token=UNK_TOKEN))
    # Whitespace splits words, Punctuation isolates each symbol, so "19." -> "19", ".".
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated")]
    )
    # WordPiece's decoder joins tokens with one space (no token carries the "##" prefix).
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in FORMAT_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        padding_side="left",
        model_max_length=4096,
        chat_template=CHAT_TEMPLATE,
    )
    if len(fast) != len(vocab):
        raise ValueError(f"mini tokenizer: {len(fast)} tokens after adding specials, expected {len(vocab)}")
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        fast.save_pretrained(str(out_dir))
    return fast
