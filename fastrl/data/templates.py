"""Prompt templates: the canonical ``problem`` text plus the answer-format instruction.

``build_prompt_text(record, template_name)`` returns the user-turn text with the ``<image>``
placeholders left exactly where the record has them (the model side expands them into vision
tokens). Templates pair with reward functions (``TEMPLATE_REWARD``): a template asks for the format
its reward checks.

- ``fastrl_math`` (the paper's): EasyR1's math prompt with ``<thinking> </thinking>`` tags, the
  final answer in ``\\boxed{}``; scored by ``math`` (accuracy + 0.5·format).
- ``easyr1_math``: EasyR1's own ``<think> </think>`` wording; scored by ``easyr1_math``.
- ``fastrl_mc``: the paper's format plus the options listed as ``A. ...``; the letter goes in the box.
  A free-form row of a multiple-choice benchmark (no options listed or drawn, see
  ``fastrl.data.schema.is_multiple_choice``) gets ``fastrl_math``'s instruction instead: the
  answer itself goes in the box (the ``mc`` reward grades such rows as ``math`` does).
- ``fastrl_grounding``: the paper's format, the box ``[x1, y1, x2, y2]`` (pixels) in ``\\boxed{}``.
"""

from __future__ import annotations

from fastrl.data.schema import Record, is_multiple_choice

FASTRL_INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <thinking> </thinking> tags. "
    "The final answer MUST BE put in \\boxed{}."
)
EASYR1_INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <think> </think> tags. "
    "The final answer MUST BE put in \\boxed{}."
)
MC_INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <thinking> </thinking> tags. "
    "The final answer MUST BE the letter of the correct option, put in \\boxed{}."
)
GROUNDING_INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <thinking> </thinking> tags. "
    "The final answer MUST BE the bounding box of the described region as [x1, y1, x2, y2] in pixel "
    "coordinates of the image, put in \\boxed{}."
)

OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def format_choices(choices: list[str]) -> str:
    """``A. first\\nB. second`` ... (at most 26 options)."""
    if len(choices) > len(OPTION_LETTERS):
        raise ValueError(f"{len(choices)} options: at most {len(OPTION_LETTERS)} can be lettered")
    return "\n".join(f"{OPTION_LETTERS[i]}. {c}" for i, c in enumerate(choices))


def _math(record: Record) -> str:
    return f"{record.problem.strip()} {FASTRL_INSTRUCTION}"


def _easyr1(record: Record) -> str:
    return f"{record.problem.strip()} {EASYR1_INSTRUCTION}"


def _mc(record: Record) -> str:
    if not is_multiple_choice(record.choices, record.meta):
        return _math(record)  # free-form (MathVision's numeric rows): the answer, not a letter
    if not record.choices:
        # Options shown only in the image (MathVision, MathVerse vision-only): no list to print.
        return f"{record.problem.strip()}\n{MC_INSTRUCTION}"
    return f"{record.problem.strip()}\nChoices:\n{format_choices(record.choices)}\n{MC_INSTRUCTION}"


def _grounding(record: Record) -> str:
    return f"{record.problem.strip()} {GROUNDING_INSTRUCTION}"


TEMPLATES = {
    "fastrl_math": _math,
    "easyr1_math": _easyr1,
    "fastrl_mc": _mc,
    "fastrl_grounding": _grounding,
}

# The reward function (fastrl.rewards.REWARD_FUNCTIONS name) that checks each template's format.
TEMPLATE_REWARD = {
    "fastrl_math": "math",
    "easyr1_math": "easyr1_math",
    "fastrl_mc": "mc",
    "fastrl_grounding": "grounding_iou",
}


def build_prompt_text(record: Record, template_name: str) -> str:
    """User-turn text for ``record`` under ``template_name``; ``<image>`` placeholders kept in place."""
    try:
        fn = TEMPLATES[template_name]
    except KeyError:
        raise ValueError(f"unknown prompt template {template_name!r}; valid: {sorted(TEMPLATES)}") from None
    return fn(record)
