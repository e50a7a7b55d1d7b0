"""The rollout batch: columns with a leading trajectory dimension N, padded once.

One row per response. Groups are never reshaped as ``[num_prompts, n]``: after GRESO selection,
DAPO filtering, ARS and pruning each question has its own number of responses, so groups are
found by uid (``group_indices``).

Columns (every one has N rows; ``select`` / ``concat`` keep them aligned):

    tensors      responses [N, R] (right-padded with 0), response_mask [N, R] (float, 1 on the
                 response), engine_logprobs [N, R] (0 off the mask), has_engine_logprobs [N],
                 rewards [N], accuracies [N]; and, once computed, advantages [N],
                 old_logprobs [N, R] and ref_logprobs [N, R] (float32, CPU, 0 off the mask)
    per row      uids, records (the question: answer, row_id, ...), texts, finish_reasons
    prompts      a :class:`PromptColumn`: each row's prompt tokens; pixel values are built only
                 for the rows a caller asks for (``prompts.inputs(rows)``), once per uid

R is the longest response of the batch the columns were padded for; a ``select`` keeps R, so a
micro-batch's loss inputs are slices ``column[rows, :width]`` of the padded columns.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from fastrl.algorithms.similarity import PackedTokens
from fastrl.data.schema import Record
from fastrl.models.inputs import PromptInput, PromptTokens

PromptBuilder = Callable[[PromptTokens], PromptInput]


@dataclass
class PromptColumn:
    """Each row's prompt: its token ids and image references (``PromptTokens``), or an already
    built ``PromptInput``. ``inputs(rows)`` builds pixel values for those rows only, once per uid,
    into a cache that every ``select`` of this column shares (released with the last batch
    holding it): a rank builds the pixels of the rows it forwards, not the whole batch's."""

    refs: list[PromptTokens | PromptInput]
    build: PromptBuilder | None = None
    cache: dict[str, PromptInput] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.refs)

    def input(self, row: int) -> PromptInput:
        ref = self.refs[row]
        if isinstance(ref, PromptInput):
            return ref
        if ref.uid not in self.cache:
            if self.build is None:
                raise ValueError(f"PromptColumn: row {row} (uid={ref.uid}) has no pixel builder")
            self.cache[ref.uid] = self.build(ref)
        return self.cache[ref.uid]

    def inputs(self, rows: Sequence[int]) -> list[PromptInput]:
        return [self.input(int(i)) for i in rows]

    def __iter__(self) -> Iterator[PromptInput]:
        """Built prompts in row order, each built only when reached (a loop that stops early
        builds no more)."""
        return (self.input(i) for i in range(len(self)))

    def select(self, rows: Sequence[int]) -> "PromptColumn":
        return PromptColumn([self.refs[int(i)] for i in rows], self.build, self.cache)

    @staticmethod
    def concat(columns: Sequence["PromptColumn"]) -> "PromptColumn":
        builders = [c.build for c in columns if c.build is not None]
        cache = {k: v for c in columns for k, v in c.cache.items()}
        return PromptColumn([r for c in columns for r in c.refs], builders[0] if builders else None, cache)


def pad_rows(rows: Sequence[Sequence[float]] | Sequence[Sequence[int]], dtype: torch.dtype,
             width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged rows -> (right-padded [len(rows), width] tensor of ``dtype``, its bool mask), in one
    scatter (the rows' values are flattened once, never copied row by row)."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    if width is None:
        width = int(lengths.max()) if len(rows) else 0
    mask = torch.arange(width)[None, :] < lengths[:, None]
    out = torch.zeros((len(rows), width), dtype=dtype)
    total = int(lengths.sum())
    if total:  # np.fromiter over one chained iterator: ~3x faster than torch.tensor(list)
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=_NUMPY[dtype], count=total)
        out[mask] = torch.from_numpy(flat)
    return out, mask


_NUMPY = {torch.long: np.int64, torch.float32: np.float32}


@dataclass
class ResponseColumns:
    """One rank's responses as columns, without prompts or records: what the ranks all-gather
    (tensors pickle as bytes, not as lists of Python numbers). ``prompt_index`` [n] is each
    response's position in the step's prompt list."""

    prompt_index: torch.Tensor  # [n] long
    responses: torch.Tensor  # [n, R] long
    response_mask: torch.Tensor  # [n, R] float32
    engine_logprobs: torch.Tensor  # [n, R] float32
    has_engine_logprobs: torch.Tensor  # [n] bool
    rewards: torch.Tensor  # [n]
    accuracies: torch.Tensor  # [n]
    texts: list[str]
    finish_reasons: list[str]

    @classmethod
    def from_rows(cls, prompt_index: Sequence[int], response_ids: Sequence[Sequence[int]], texts: Sequence[str],
                  engine_logprobs: Sequence[Sequence[float]], finish_reasons: Sequence[str],
                  rewards: torch.Tensor, accuracies: torch.Tensor) -> "ResponseColumns":
        """Padded here, once. A row's engine log-probs count only when there is one per response token."""
        responses, mask = pad_rows(response_ids, torch.long)
        has = torch.tensor([len(lp) == len(r) for lp, r in zip(engine_logprobs, response_ids)], dtype=torch.bool)
        engine, _ = pad_rows([lp if ok else [] for lp, ok in zip(engine_logprobs, has.tolist())], torch.float32,
                             width=responses.shape[1])
        return cls(torch.tensor(list(prompt_index), dtype=torch.long), responses, mask.float(), engine, has,
                   rewards, accuracies, list(texts), list(finish_reasons))

    @staticmethod
    def merge(parts: Sequence["ResponseColumns"]) -> "ResponseColumns":
        """Every part's rows, ordered by prompt (stable: a prompt's responses keep their order,
        parts in the order given); [n, R] columns padded to the widest."""
        width = max(p.responses.shape[1] for p in parts)
        index = torch.cat([p.prompt_index for p in parts])
        order = torch.sort(index, stable=True).indices
        tensors = {f.name: torch.cat([_widen(getattr(p, f.name), width) for p in parts])[order]
                   for f in fields(ResponseColumns) if f.name not in ("texts", "finish_reasons")}
        rows = order.tolist()
        texts = [t for p in parts for t in p.texts]
        reasons = [t for p in parts for t in p.finish_reasons]
        return ResponseColumns(**tensors, texts=[texts[i] for i in rows], finish_reasons=[reasons[i] for i in rows])


_ROW_FIELDS = ("uids", "records", "texts", "finish_reasons")
_OPTIONAL = ("advantages", "old_logprobs", "ref_logprobs")


@dataclass
class RolloutBatch:
    prompts: PromptColumn
    uids: list[str]  # question uid per response
    records: list[Record]  # the question each response answers (answer, choices, row_id, ...)
    texts: list[str]
    finish_reasons: list[str]
    responses: torch.Tensor  # [N, R] long, right-padded with 0
    response_mask: torch.Tensor  # [N, R] float32, 1 on response tokens
    engine_logprobs: torch.Tensor  # [N, R] float32, 0 off the mask and on rows without them
    has_engine_logprobs: torch.Tensor  # [N] bool: the engine gave one log-prob per response token
    rewards: torch.Tensor  # [N] overall reward
    accuracies: torch.Tensor  # [N] 0/1
    advantages: torch.Tensor | None = None  # [N], set by the advantage stage
    old_logprobs: torch.Tensor | None = None  # [N, R] float32 CPU, 0 off the mask
    ref_logprobs: torch.Tensor | None = None  # [N, R] float32 CPU, 0 off the mask

    def __post_init__(self) -> None:
        n, shape = len(self.uids), tuple(self.responses.shape)
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and len(value) != n:
                raise ValueError(f"RolloutBatch: column {f.name} has {len(value)} rows, uids has {n}")
        for name in ("response_mask", "engine_logprobs", "old_logprobs", "ref_logprobs"):
            value = getattr(self, name)
            if value is not None and tuple(value.shape) != shape:
                raise ValueError(f"RolloutBatch: column {name} is {tuple(value.shape)}, responses is {shape}")

    @classmethod
    def from_rows(cls, prompts: PromptColumn | Sequence[PromptInput | PromptTokens], uids: Sequence[str],
                  response_ids: Sequence[Sequence[int]], texts: Sequence[str],
                  engine_logprobs: Sequence[Sequence[float]], finish_reasons: Sequence[str],
                  records: Sequence[Record], rewards: torch.Tensor | None = None,
                  accuracies: torch.Tensor | None = None) -> "RolloutBatch":
        """A batch from per-response lists, padded here once (rewards and accuracies default to 0)."""
        n = len(uids)
        columns = ResponseColumns.from_rows(range(n), response_ids, texts, engine_logprobs, finish_reasons,
                                            torch.zeros(n) if rewards is None else rewards,
                                            torch.zeros(n) if accuracies is None else accuracies)
        return cls.from_columns(prompts, uids, records, columns)

    @classmethod
    def from_columns(cls, prompts: PromptColumn | Sequence[PromptInput | PromptTokens], uids: Sequence[str],
                     records: Sequence[Record], columns: ResponseColumns) -> "RolloutBatch":
        """A batch from response columns and each row's prompt, uid and record."""
        column = prompts if isinstance(prompts, PromptColumn) else PromptColumn(list(prompts))
        return cls(prompts=column, uids=list(uids), records=list(records), texts=columns.texts,
                   finish_reasons=columns.finish_reasons, responses=columns.responses,
                   response_mask=columns.response_mask, engine_logprobs=columns.engine_logprobs,
                   has_engine_logprobs=columns.has_engine_logprobs, rewards=columns.rewards,
                   accuracies=columns.accuracies)

    def __len__(self) -> int:
        return len(self.uids)

    @property
    def width(self) -> int:
        """R: the padded response width of every [N, R] column."""
        return int(self.responses.shape[1])

    @property
    def response_lengths(self) -> torch.Tensor:
        """[N] long: response tokens per row."""
        return self.response_mask.sum(dim=1).long()

    def response_ids_of(self, rows: Sequence[int]) -> list[list[int]]:
        """The given rows' response token ids, unpadded, as lists."""
        lengths = self.response_lengths.tolist()
        return [self.responses[i, : lengths[i]].tolist() for i in (int(r) for r in rows)]

    @property
    def response_ids(self) -> list[list[int]]:
        """Every row's response token ids, unpadded, as lists (what the pruners take; building
        the Python lists is ~0.1 s at the paper's 2 M tokens: ``packed_responses`` is not)."""
        return self.response_ids_of(range(len(self)))

    @property
    def packed_responses(self) -> PackedTokens:
        """Every row's response token ids as one flat tensor and lengths (what the similarity
        kernels pack ``response_ids`` into), straight from the padded column."""
        return PackedTokens.from_padded(self.responses, self.response_mask)

    @property
    def question_ids(self) -> list[int | None]:
        """The release's question order: each row's record row_id."""
        return [r.row_id for r in self.records]

    def with_columns(self, **columns: torch.Tensor | None) -> "RolloutBatch":
        """This batch with the given columns added or replaced (shapes checked)."""
        return replace(self, **columns)

    def select(self, indices: Sequence[int] | torch.Tensor) -> "RolloutBatch":
        """Rows ``indices`` of every column, in that order."""
        rows = [int(i) for i in indices]
        idx = torch.as_tensor(rows, dtype=torch.long)
        out: dict[str, Any] = {"prompts": self.prompts.select(rows)}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _ROW_FIELDS:
                out[f.name] = [value[i] for i in rows]
            elif isinstance(value, torch.Tensor):
                out[f.name] = value[idx]
            elif f.name != "prompts":
                out[f.name] = value
        return RolloutBatch(**out)

    @staticmethod
    def concat(batches: Sequence["RolloutBatch"]) -> "RolloutBatch":
        """The rows of ``batches`` in order; [N, R] columns padded to the widest."""
        if not batches:
            raise ValueError("RolloutBatch.concat: no batches")
        width = max(b.width for b in batches)
        out: dict[str, Any] = {"prompts": PromptColumn.concat([b.prompts for b in batches])}
        for f in fields(RolloutBatch):
            values = [getattr(b, f.name) for b in batches]
            if f.name in _ROW_FIELDS:
                out[f.name] = [x for v in values for x in v]
            elif f.name in _OPTIONAL and any(v is None for v in values):
                if not all(v is None for v in values):
                    raise ValueError(f"RolloutBatch.concat: column {f.name} is set on some batches only")
                out[f.name] = None
            elif f.name != "prompts":
                out[f.name] = torch.cat([_widen(v, width) for v in values])
        return RolloutBatch(**out)

    def group_indices(self) -> dict[str, list[int]]:
        """Response indices per question uid, in batch order."""
        groups: dict[str, list[int]] = {}
        for i, uid in enumerate(self.uids):
            groups.setdefault(uid, []).append(i)
        return groups

    def num_response_tokens(self) -> int:
        return int(self.response_lengths.sum())


def _widen(column: torch.Tensor, width: int) -> torch.Tensor:
    """A [N, R] column right-padded with zeros to ``width`` (a [N] column unchanged)."""
    if column.dim() < 2 or column.shape[1] == width:
        return column
    return torch.nn.functional.pad(column, (0, width - column.shape[1]))
