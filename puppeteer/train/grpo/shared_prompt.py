"""``trl.GRPOTrainer`` whose training forward runs a group's shared prompt once.

With one question per device batch (the CPU presets: 1 question x 8 samples) every row of the
training forward starts with the same prompt: :func:`~puppeteer.train.shared_prefix.shared_prompt_logps`
runs it once, with gradients, instead of once per sample. Batches it does not cover (several
questions, padded prompts, images, MoE auxiliary losses, trl's chunking) take trl's own path.
"""

from __future__ import annotations

from typing import Any

from trl import GRPOTrainer

from puppeteer.train.shared_prefix import shared_prompt_logps

_MULTIMODAL = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


class SharedPromptGRPOTrainer(GRPOTrainer):
    """A ``GRPOTrainer``; the per-token log-probs of a one-prompt batch come from a shared prompt pass."""

    def _get_per_token_logps_and_entropies(  # type: ignore[override]
        self,
        model: Any,
        input_ids: Any,
        attention_mask: Any,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **kwargs: Any,
    ) -> tuple[Any, Any, Any]:
        plain = compute_aux_loss or any(kwargs.get(k) is not None for k in _MULTIMODAL)
        if not plain and (batch_size is None or batch_size >= input_ids.size(0)):
            with self.accelerator.autocast():
                shared = shared_prompt_logps(
                    model, input_ids, attention_mask, logits_to_keep, compute_entropy
                )
            if shared is not None:
                return shared[0], shared[1], None
        return super()._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=batch_size,
            compute_entropy=compute_entropy,
            compute_aux_loss=compute_aux_loss,
            **kwargs,
        )
