"""Prefill the prompt text a batch shares once, not once per row.

trl samples ``num_generations`` completions of one question by repeating its prompt in the
batch, and ``transformers``' ``generate`` prefills every copy; the held-out evaluation's
questions differ only after the conductor prompt's fixed part (instructions, agent table,
few-shot example). On a CPU, where that prompt is 450-650 tokens and a completion ~100, the
prefill is most of the generation time (Qwen2.5-Coder-0.5B, fp32, 2 threads: 6.8 s for one
644-token prompt, so ~54 s for a group of 8, against 0.33 s a decoding step for the 8 rows).

:func:`install_shared_prefix` wraps a model instance's ``generate``. When the rows of a call
(left-padded, as trl and :func:`puppeteer.train.grpo.generate` pad them) begin with the same
tokens, it runs that common prefix once, repeats its KV cache over the rows, and hands
``generate`` the rows laid out as ``[prefix | padding | rest of the row]`` with the matching
attention mask (positions come from the mask, so every row sees the same positions as alone).
The returned sequences hold the caller's own prompt tensor followed by the new tokens, as
without the wrapper. Rows without a common prefix of ``min_shared`` tokens pass through
unchanged. Like :func:`~puppeteer.train.conductor_generation.install_access_list_stop`, the
wrapper lives on the instance and is not saved with the model.
"""

from __future__ import annotations

import copy
import inspect
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)

MIN_SHARED = 16  # below this many common tokens a separate prefill is not worth a call


def common_prefix(rows: list[list[int]]) -> int:
    """Length of the longest common prefix of ``rows``, leaving every row at least one token of its own."""
    if not rows:
        return 0
    limit = min(len(r) for r in rows) - 1
    first = rows[0]
    n = 0
    while n < limit and all(r[n] == first[n] for r in rows):
        n += 1
    return max(n, 0)


def _unpadded(input_ids: torch.Tensor, mask: torch.Tensor | None) -> list[list[int]] | None:
    """Each row's tokens without its left padding; None when some row is not left-padded."""
    if mask is None:
        return [row.tolist() for row in input_ids]
    rows = []
    for ids, m in zip(input_ids, mask, strict=True):
        keep = m.bool()
        first = int(keep.float().argmax()) if bool(keep.any()) else len(keep)
        if not bool(keep[first:].all()):  # padding inside the row: not a layout this wrapper knows
            return None
        rows.append(ids[first:].tolist())
    return rows


def cache_keyword(model: Any) -> str:
    """The keyword a forward takes its KV cache by (transformers 5 renamed ``past_key_values``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft model's own model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _cache_of(output: Any) -> Any:
    """The KV cache a forward returned (``output.cache`` in transformers 5, ``past_key_values`` before)."""
    return output["cache"] if "cache" in output else output["past_key_values"]


def repeated_prefix_cache(model: Any, prefix: torch.Tensor, rows: int) -> Any:
    """Run ``prefix`` (one row) once and return its KV cache repeated over ``rows`` rows."""
    cache = _cache_of(model(input_ids=prefix, use_cache=True, logits_to_keep=1))
    cache.batch_repeat_interleave(rows)
    return cache


def install_shared_prefix(model: PreTrainedModel, min_shared: int = MIN_SHARED) -> None:
    """Wrap ``model.generate`` so that the prompt tokens common to a batch are prefilled once (idempotent)."""
    if getattr(model, "_shared_prefix", False):
        return
    original = model.generate
    cache_kw = cache_keyword(model)

    def generate(*args: Any, **kwargs: Any) -> Any:
        import torch

        positional = args
        input_ids = kwargs.get("input_ids")
        if input_ids is None and args:
            input_ids, positional = args[0], args[1:]
        config = kwargs.get("generation_config")
        if (
            not isinstance(input_ids, torch.Tensor)
            or input_ids.dim() != 2
            or any(kwargs.get(k) is not None for k in ("past_key_values", "cache", "inputs_embeds"))
            or kwargs.get("return_dict_in_generate")
            or getattr(config, "return_dict_in_generate", False)
            or (getattr(config, "num_beams", 1) or 1) > 1
            or (kwargs.get("num_beams") or 1) > 1
        ):
            return original(*args, **kwargs)
        mask = kwargs.get("attention_mask")
        k = int(kwargs.get("num_return_sequences") or getattr(config, "num_return_sequences", 1) or 1)
        if k > 1:  # k samples of each prompt: make the rows ourselves (generate repeats each row k times)
            input_ids = input_ids.repeat_interleave(k, dim=0)
            mask = mask.repeat_interleave(k, dim=0) if mask is not None else None
        rows = _unpadded(input_ids, mask)
        shared = common_prefix(rows) if rows is not None and len(rows) > 1 else 0
        if rows is None or shared < min_shared:
            return original(*args, **kwargs)
        prefix = torch.tensor([rows[0][:shared]], dtype=input_ids.dtype, device=input_ids.device)
        with torch.no_grad():
            cache = repeated_prefix_cache(model, prefix, len(rows))
        width = max(len(r) for r in rows) - shared
        ids = prefix.repeat(len(rows), 1)
        tails = torch.full((len(rows), width), rows[0][0], dtype=input_ids.dtype, device=input_ids.device)
        tail_mask = torch.zeros((len(rows), width), dtype=torch.long, device=input_ids.device)
        for i, r in enumerate(rows):
            rest = r[shared:]
            tails[i, width - len(rest) :] = torch.tensor(rest, dtype=input_ids.dtype)
            tail_mask[i, width - len(rest) :] = 1
        laid_out = torch.cat([ids, tails], dim=1)
        laid_mask = torch.cat([torch.ones_like(ids, dtype=torch.long), tail_mask], dim=1)
        rest = {key: v for key, v in kwargs.items() if key not in ("input_ids", "num_return_sequences")}
        if config is not None and k > 1:
            config = copy.deepcopy(config)
            config.num_return_sequences = 1
            rest["generation_config"] = config
        rest.update({"input_ids": laid_out, "attention_mask": laid_mask, cache_kw: cache})
        log.debug("shared prefix: %d tokens prefilled once for %d rows", shared, len(rows))
        new = original(*positional, **rest)[:, laid_out.shape[1] :]
        return torch.cat([input_ids, new], dim=1)

    model.generate = generate  # type: ignore[method-assign]
    model._shared_prefix = True  # type: ignore[attr-defined]


def shared_prompt_logps(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    compute_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """trl's per-token completion log-probs (and entropies) with the group's prompt run once.

    The training forward of a GRPO group runs ``k`` copies of one prompt followed by ``k``
    completions; the prompt's hidden states are the same in every row, so this runs the prompt
    but its last token once (with gradients), repeats its KV cache over the rows and runs only
    ``[last prompt token | completion]`` per row through trl's fused LM head (``fused_lm_head=True``,
    which :class:`trl.GRPOTrainer` adds to the model). Gradients flow into the shared prompt pass
    through the repeated cache, so the result is the same as the full forward (up to float
    rounding), for ``P - 1 + k * (C + 1)`` tokens instead of ``k * (P + C)``.

    None when the rows' prompts differ or are padded: the caller then runs the full forward.
    """

    prompt_len = input_ids.shape[1] - logits_to_keep
    if input_ids.shape[0] < 2 or prompt_len < 2:
        return None
    prompt, prompt_mask = input_ids[:, :prompt_len], attention_mask[:, :prompt_len]
    if not (bool((prompt == prompt[:1]).all()) and bool(prompt_mask.all())):
        return None
    rows = input_ids.shape[0]
    cache = repeated_prefix_cache(model, prompt[:1, :-1], rows)  # with gradients
    segment = input_ids[:, prompt_len - 1 :]
    labels = segment.masked_fill(attention_mask[:, prompt_len - 1 :] == 0, -100)
    labels[:, 0] = -100  # the last prompt token is context, not scored
    out = model(
        input_ids=segment,
        attention_mask=attention_mask,
        labels=labels,
        fused_lm_head=True,
        **{cache_keyword(model): cache},
    )
    logps = out.log_probs[:, -logits_to_keep:]
    entropy = out.entropy[:, -logits_to_keep:] if compute_entropy else None
    return logps, entropy
