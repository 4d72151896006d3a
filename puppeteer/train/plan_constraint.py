"""Every sampled plan parses: grammar-constrained generation for a ``transformers`` conductor.

The llama.cpp conductor decodes under the GBNF grammar of :mod:`puppeteer.envs.conductor_grammar`; this
is the same grammar for ``model.generate`` (GRPO sampling and the held-out evaluation), enforced with
llguidance (Microsoft's grammar engine, also used by llama.cpp and vLLM; a 3 MB wheel with no
dependencies): at every step each row's matcher gives the bitmask of the tokens its grammar allows,
the disallowed logits become ``-inf``, and the sampled token advances the matcher. Chosen over
xgrammar (needs triton on Linux), outlines (a dozen dependencies) and transformers-cfg (pure-Python
token matching) because it reads the GBNF text as it is and costs microseconds per token.

Each row gets the grammar of its own item (its agents: the dataset row's ``available``), found by
its prompt's tokens (:class:`PlanGrammars`); a prompt not registered gets the default grammar. With
an answer prefix (the prompt already opened the plan with ``model_id = [``) the grammar has no free
reasoning and the prefix is fed to the matcher first. As with :mod:`~puppeteer.train.conductor_generation`,
a logits processor cannot travel in trl's ``GenerationConfig``, so :func:`install_plan_constraint`
wraps the model instance's ``generate``.

GRPO note: the completion is sampled from the constrained distribution while trl's loss uses the
unconstrained model's log-probabilities of the same tokens; with one gradient step per batch (trl's
default) the ratio is 1 and the gradient is the policy gradient of the masked policy's samples.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from puppeteer.envs.conductor_grammar import plan_grammar
from puppeteer.train.extras import require

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from puppeteer.envs.env import ConductorEnv

log = logging.getLogger(__name__)


class PlanConstraint:
    """A ``LogitsProcessor`` for one ``generate`` call: row ``i`` follows ``matchers[i]`` (None: free).

    ``prompt_len`` is the batch's padded prompt length. A row whose grammar is complete (or that
    sampled a token its matcher refuses, which the mask makes impossible) may only end: EOS.
    """

    def __init__(self, matchers: Sequence[Any], prompt_len: int, eos: int, vocab: int) -> None:
        import llguidance.torch as lt

        self._lt = lt
        self.matchers = list(matchers)
        self.prompt_len = prompt_len
        self.eos = eos
        self.ended = [m is None for m in self.matchers]  # rows left alone count as ended for the mask
        self.free = [m is None for m in self.matchers]
        self._mask = lt.allocate_token_bitmask(len(self.matchers), vocab)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] > self.prompt_len:
            for row, token in enumerate(input_ids[:, -1].tolist()):
                matcher = self.matchers[row]
                if matcher is None or self.ended[row]:
                    continue
                if token == self.eos or matcher.is_stopped() or not matcher.consume_token(int(token)):
                    self.ended[row] = True
        active = [r for r, m in enumerate(self.matchers) if m is not None and not self.ended[r]]
        for row in active:
            matcher = self.matchers[row]
            if matcher.is_stopped():
                self.ended[row] = True
                continue
            self._lt.fill_next_token_bitmask(matcher, self._mask, row)
        active = [r for r in active if not self.ended[r]]
        if active:
            rows = scores[active]
            self._lt.apply_token_bitmask_inplace(rows, self._mask[active].to(rows.device))
            scores[active] = rows
        ended = [r for r in range(len(self.matchers)) if self.ended[r] and not self.free[r]]
        if ended:
            scores[ended] = float("-inf")
            scores[ended, self.eos] = 0.0
        return scores


class PlanGrammars:
    """The grammar of each registered prompt (by its token ids), and a default for any other prompt.

    ``prefix``: the text the prompt already ends with (the answer prefix): fed to each matcher first.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        vocab: int,
        default: str | None = None,
        prefix: str = "",
    ) -> None:
        require("llguidance", "constrained=true", "grpo")
        import llguidance
        import llguidance.hf

        self._llguidance = llguidance
        self.tokenizer = tokenizer
        self.vocab = vocab
        self._lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab)
        self._prefix = tokenizer(prefix, add_special_tokens=False)["input_ids"] if prefix else []
        self._by_prompt: dict[tuple[int, ...], str] = {}
        self._compiled: dict[str, str] = {}
        self.default = default
        self.misses = 0  # prompts that got the default grammar

    def _grammar(self, gbnf: str) -> str:
        if gbnf not in self._compiled:
            self._compiled[gbnf] = self._llguidance.grammar_from("gbnf", gbnf)
        return self._compiled[gbnf]

    def add(self, prompt: str, gbnf: str) -> None:
        ids = tuple(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        self._by_prompt[ids] = gbnf
        self._grammar(gbnf)  # a grammar llguidance cannot read fails here, not mid-generation

    def matcher(self, prompt_ids: Sequence[int]) -> Any:
        """A fresh matcher for a prompt (its prefix consumed); None when no grammar applies."""
        ids = tuple(int(i) for i in prompt_ids)
        gbnf = self._by_prompt.get(ids)
        bos = self.tokenizer.bos_token_id
        if gbnf is None and ids and bos is not None and ids[0] == bos:  # a tokenizer that added BOS
            gbnf = self._by_prompt.get(ids[1:])
        if gbnf is None:
            self.misses += 1
            gbnf = self.default
        if gbnf is None:
            return None
        matcher = self._llguidance.LLMatcher(self._lltok, self._grammar(gbnf))
        if self._prefix and not matcher.consume_tokens(self._prefix):
            raise ValueError(f"the grammar refuses the answer prefix: {matcher.get_error()}")
        return matcher

    def processor(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> PlanConstraint:
        matchers = []
        for row in range(input_ids.shape[0]):
            ids = input_ids[row]
            if attention_mask is not None:
                ids = ids[attention_mask[row].bool()]
            matchers.append(self.matcher(ids.tolist()))
        eos = self.tokenizer.eos_token_id
        if eos is None:
            raise ValueError("constrained generation needs an eos token id")
        return PlanConstraint(matchers, int(input_ids.shape[1]), int(eos), self.vocab)


def row_grammar(
    available: Sequence[int],
    max_steps: int,
    max_tokens: int,
    prefix: str,
    final: bool = False,
    cascade: bool = False,
) -> str:
    """The GBNF of a conductor completion that may use ``available`` (no free reasoning after a prefix;
    ``final``: the plan may name its final answer; ``cascade``: a cascade too)."""
    return plan_grammar(
        available, max_steps, max_tokens, reasoning=not prefix, final=final, cascade=cascade
    ).text


def plan_grammars(
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    envs: Sequence[ConductorEnv],
    chat: bool,
    seed: int,
    max_steps: int,
    budget: int,
    prefix: str = "",
    final: bool = False,
    cascade: bool = False,
) -> PlanGrammars:
    """Each conductor prompt of ``envs`` (the text the trainer and the held-out generation tokenize)
    with the grammar of its item's agents (the row's ``available``), sized to ``budget`` tokens; any
    other prompt gets the grammar of every agent the envs offer."""
    import numpy as np

    from puppeteer.integrations.trl import conductor_rows, prefixed_rows

    vocab = int(model.get_output_embeddings().weight.shape[0])
    offered = sorted({int(i) for env in envs for i in np.flatnonzero(env.available())})
    default = row_grammar(offered, max_steps, budget, prefix, final, cascade)
    grammars = PlanGrammars(tokenizer, vocab, default=default, prefix=prefix)
    for env in envs:
        rows = conductor_rows(env, chat=chat, seed=seed)
        if prefix:
            rows = prefixed_rows(rows, tokenizer, prefix)
        for row in rows:
            prompt = row["prompt"]
            if not isinstance(prompt, str):
                messages = list(prompt)
                prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            grammars.add(prompt, row_grammar(row["available"], max_steps, budget, prefix, final, cascade))
    return grammars


def install_plan_constraint(model: PreTrainedModel, grammars: PlanGrammars) -> None:
    """Wrap ``model.generate`` so that every call decodes each row under its prompt's grammar."""
    from transformers import LogitsProcessorList

    if getattr(model, "_plan_grammars", None) is not None:
        model._plan_grammars = grammars  # type: ignore[attr-defined]
        return
    original = model.generate
    model._plan_grammars = grammars  # type: ignore[attr-defined]

    def generate(*args: Any, **kwargs: Any) -> Any:
        inputs = kwargs.get("input_ids")
        if inputs is None:
            return original(*args, **kwargs)
        constraint = model._plan_grammars.processor(inputs, kwargs.get("attention_mask"))  # type: ignore[attr-defined]
        processors = LogitsProcessorList(kwargs.get("logits_processor") or [])
        processors.append(constraint)
        return original(*args, **{**kwargs, "logits_processor": processors})

    model.generate = generate  # type: ignore[method-assign]


__all__ = ["PlanConstraint", "PlanGrammars", "install_plan_constraint", "plan_grammars", "row_grammar"]
