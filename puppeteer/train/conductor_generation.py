"""Make a conductor's sampled completions end where its workflow ends.

A small conductor that has written its three lists often goes on writing (code, another
workflow, a repeated subtask) until the token cap: the completion costs the full budget in
generation and in the GRPO backward pass, and the trailing text earns nothing.
:class:`AccessListStop` is a ``transformers`` logits processor that forces the end-of-sequence
token once the completion holds a closed ``access_list = [...]`` literal (the last of the
three lists). Forcing EOS (rather than stopping silently) keeps trl's completion mask right:
trl masks everything after the first EOS, and the policy learns to stop there itself.

trl builds its ``GenerationConfig`` from :class:`trl.GRPOConfig` and calls
``model.generate(**inputs, generation_config=...)``: a logits processor cannot travel in a
``GenerationConfig``, so :func:`install_access_list_stop` wraps the model instance's
``generate`` (the wrapper adds the processor to every call; it is not saved with the model).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from puppeteer.envs.listscan import match_lists
from puppeteer.envs.workflow import MAX_LIST_CHARS

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_ACCESS = re.compile(r"\baccess_list\b\s*[:=]\s*(?=\[)")


def closes_access_list(text: str) -> bool:
    """Whether ``text`` holds a complete ``access_list = [...]`` literal (brackets inside strings ignored)."""
    starts = [m.end() for m in _ACCESS.finditer(text)]
    if not starts:
        return False
    return any(end is not None for end in match_lists(text, starts, MAX_LIST_CHARS).ends)


def bracket_token_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Ids of the tokens whose text contains ``]``: only after one of them can a list have closed."""
    return frozenset(
        i for i in range(len(tokenizer)) if "]" in tokenizer.decode([i], skip_special_tokens=False)
    )


class AccessListStop:
    """A ``LogitsProcessor``: after a closed ``access_list`` literal, only EOS may follow.

    ``prompt_len`` is the (padded) prompt length of the batch, so that the prompt's own example
    workflows do not count. A row is decoded only when its last token holds a ``]``.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompt_len: int,
        eos_token_id: int | None = None,
        brackets: frozenset[int] | None = None,
    ) -> None:
        eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
        if eos is None:
            raise ValueError("AccessListStop needs an eos token id")
        self.tokenizer = tokenizer
        self.prompt_len = prompt_len
        self.eos = int(eos)
        self.brackets = brackets if brackets is not None else bracket_token_ids(tokenizer)
        self.closed: set[int] = set()

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] > self.prompt_len:
            last = input_ids[:, -1].tolist()
            for row, tok in enumerate(last):
                if row in self.closed or tok not in self.brackets:
                    continue
                text = self.tokenizer.decode(input_ids[row, self.prompt_len :], skip_special_tokens=True)
                if closes_access_list(text):
                    self.closed.add(row)
        if self.closed:
            rows = sorted(self.closed)
            scores[rows] = float("-inf")
            scores[rows, self.eos] = 0.0
        return scores


def access_list_stop_kwargs(
    tokenizer: PreTrainedTokenizerBase, brackets: frozenset[int] | None = None
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A function that adds a fresh :class:`AccessListStop` to the kwargs of one ``generate`` call."""
    from transformers import LogitsProcessorList

    ids = brackets if brackets is not None else bracket_token_ids(tokenizer)

    def add(kwargs: dict[str, Any]) -> dict[str, Any]:
        inputs = kwargs.get("input_ids")
        if inputs is None:
            return kwargs
        stop = AccessListStop(tokenizer, int(inputs.shape[1]), brackets=ids)
        processors = LogitsProcessorList(kwargs.get("logits_processor") or [])
        processors.append(stop)
        return {**kwargs, "logits_processor": processors}

    return add


def install_access_list_stop(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Wrap ``model.generate`` so that every call ends a row's completion after its ``access_list``."""
    if getattr(model, "_access_list_stop", False):
        return
    original = model.generate
    add = access_list_stop_kwargs(tokenizer)

    def generate(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **add(kwargs))

    model.generate = generate  # type: ignore[method-assign]
    model._access_list_stop = True  # type: ignore[attr-defined]
