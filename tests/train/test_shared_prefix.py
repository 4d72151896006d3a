"""The shared-prefix generate: one prefill for a group of copies, the same tokens as without it."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from puppeteer.train.conductor_model import ModelSpec, load_conductor_model  # noqa: E402
from puppeteer.train.shared_prefix import common_prefix, install_shared_prefix  # noqa: E402


def _tiny_model() -> Any:
    """The project's tiny random Llama (400-token vocabulary, pad and eos 0), the same weights each call."""
    return load_conductor_model(ModelSpec(id="tiny-random"))[0].eval()


def _count_prefill_rows(model: Any) -> list[tuple[int, int]]:
    """(rows, tokens) of every forward pass, recorded at the embedding."""
    shapes: list[tuple[int, int]] = []
    model.model.embed_tokens.register_forward_hook(lambda m, i, o: shapes.append(tuple(i[0].shape)))
    return shapes


def _generate(model: Any, ids: Any, mask: Any, **kwargs: Any) -> Any:
    options = {"do_sample": False, "max_new_tokens": 12, "min_new_tokens": 12, **kwargs}
    return model.generate(input_ids=ids, attention_mask=mask, pad_token_id=0, **options)


def test_a_group_of_copies_is_prefilled_once_and_decodes_the_same_tokens() -> None:
    ids = torch.randint(3, 400, (1, 20)).repeat(6, 1)
    mask = torch.ones_like(ids)
    plain = _tiny_model()
    expected = _generate(plain, ids, mask)
    shared = _tiny_model()
    install_shared_prefix(shared)
    install_shared_prefix(shared)  # idempotent
    shapes = _count_prefill_rows(shared)
    got = _generate(shared, ids, mask)
    assert torch.equal(got, expected)
    assert shapes[0] == (1, 19)  # the prompt but its last token, once
    assert shapes[1] == (6, 1)  # then the 6 rows go on from the shared cache, one token at a time
    assert all(s[1] == 1 for s in shapes[1:])


def test_num_return_sequences_on_one_prompt_is_shared_too() -> None:
    ids = torch.randint(3, 400, (1, 24))
    mask = torch.ones_like(ids)
    model = _tiny_model()
    install_shared_prefix(model)
    shapes = _count_prefill_rows(model)
    torch.manual_seed(1)
    out = _generate(
        model, ids, mask, do_sample=True, num_return_sequences=4, max_new_tokens=8, min_new_tokens=8
    )
    assert out.shape[0] == 4
    assert torch.equal(out[:, :24], ids.repeat(4, 1))
    assert shapes[0] == (1, 23)
    assert shapes[1] == (4, 1)


def _left_padded(rows: list[Any]) -> tuple[Any, Any]:
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = r
        mask[i, width - len(r) :] = 1
    return ids, mask


def test_distinct_questions_after_a_common_prompt_share_its_prefill_and_decode_the_same() -> None:
    torch.manual_seed(3)
    prefix = torch.randint(3, 400, (24,))
    rows = [torch.cat([prefix, torch.randint(3, 400, (n,))]) for n in (3, 7, 5)]
    ids, mask = _left_padded(rows)  # as trl and the held-out evaluation pad: on the left
    expected = _generate(_tiny_model(), ids, mask)
    model = _tiny_model()
    install_shared_prefix(model)
    shapes = _count_prefill_rows(model)
    got = _generate(model, ids, mask)
    assert torch.equal(got, expected)  # the caller's prompt tensor, then the same new tokens
    assert shapes[0] == (1, 24)  # the common prefix, once
    assert shapes[1] == (3, 7)  # every row's own tokens (padded to the longest) in one pass


def test_rows_without_a_common_prefix_pass_through_unchanged() -> None:
    torch.manual_seed(4)
    ids = torch.randint(3, 400, (3, 10))
    ids[:, 0] = torch.tensor([3, 4, 5])  # no common first token
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding on one row
    expected = _generate(_tiny_model(), ids, mask)
    model = _tiny_model()
    install_shared_prefix(model)
    shapes = _count_prefill_rows(model)
    assert torch.equal(_generate(model, ids, mask), expected)
    assert shapes[0] == (3, 10)  # an ordinary prefill of every row


def test_common_prefix_leaves_each_row_a_token_of_its_own() -> None:
    assert common_prefix([[1, 2, 3], [1, 2, 3]]) == 2
    assert common_prefix([[1, 2, 3, 4], [1, 2, 9]]) == 2
    assert common_prefix([[5], [5]]) == 0
    assert common_prefix([]) == 0
