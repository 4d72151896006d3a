"""Ending a conductor's completion after its access_list: the check, the logits processor, the wrapper."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from puppeteer.train.conductor_generation import (  # noqa: E402
    AccessListStop,
    closes_access_list,
    install_access_list_stop,
)
from puppeteer.train.conductor_model import tiny_tokenizer  # noqa: E402

CLOSED = "# plan\nmodel_id = [0, 1]\nsubtasks = ['a [b', \"c\"]\naccess_list = [[], 'all']"


@pytest.mark.parametrize(
    ("text", "closed"),
    [
        (CLOSED, True),
        ("model_id = [0]\nsubtasks = ['x']\naccess_list = [[], ", False),
        ("access_list = ['a ] b'", False),  # a bracket inside a string does not close the list
        ("access_list = ['a ] b']", True),
        ("access_list: [0, 1]", True),
        ("no lists at all ]", False),
    ],
)
def test_closes_access_list(text: str, closed: bool) -> None:
    assert closes_access_list(text) is closed


def ids(tok: Any, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_processor_forces_eos_only_for_rows_whose_completion_closed_its_access_list() -> None:
    tok = tiny_tokenizer()
    prompt = ids(tok, "access_list = [[]]\nQ:")  # a closed list in the PROMPT does not count
    done = ids(tok, CLOSED)
    open_ = ids(tok, "model_id = [0]\nsubtasks = ['a']\naccess_list = [[], ")
    width = max(len(done), len(open_))
    pad = tok.pad_token_id  # pad both completions to one width (the pad decodes to nothing)
    batch = torch.tensor(
        [prompt + [pad] * (width - len(done)) + done, prompt + [pad] * (width - len(open_)) + open_]
    )
    stop = AccessListStop(tok, prompt_len=len(prompt))
    scores = torch.zeros(2, len(tok))
    out = stop(batch, scores.clone())
    eos = tok.eos_token_id
    assert out[0, eos] == 0.0 and torch.isinf(out[0]).sum() == len(tok) - 1
    assert torch.isfinite(out[1]).all()  # the open list goes on
    # once closed, a row stays closed whatever comes next
    later = torch.cat([batch, torch.tensor([[eos], [ids(tok, "x")[0]]])], dim=1)
    out2 = stop(later, torch.zeros(2, len(tok)))
    assert torch.isinf(out2[0]).sum() == len(tok) - 1 and torch.isfinite(out2[1]).all()


def test_install_wraps_generate_once_and_adds_a_fresh_processor_per_call() -> None:
    tok = tiny_tokenizer()
    seen: list[dict[str, Any]] = []

    class FakeModel:
        def generate(self, *args: Any, **kwargs: Any) -> str:
            seen.append(kwargs)
            return "ok"

    model = FakeModel()
    install_access_list_stop(model, tok)  # type: ignore[arg-type]
    install_access_list_stop(model, tok)  # idempotent: one processor, not two
    x = torch.tensor([[1, 2, 3]])
    assert model.generate(input_ids=x, max_new_tokens=4) == "ok"
    assert model.generate(input_ids=torch.tensor([[1, 2]])) == "ok"
    procs = [kw["logits_processor"] for kw in seen]
    assert [len(p) for p in procs] == [1, 1]
    assert procs[0][0] is not procs[1][0]
    assert procs[0][0].prompt_len == 3 and procs[1][0].prompt_len == 2


def test_tiny_model_generation_ends_right_after_a_forced_access_list() -> None:
    """End to end through transformers' generate: a model biased to write the lists stops after them."""
    from transformers import LogitsProcessor, LogitsProcessorList

    from puppeteer.train.conductor_model import ModelSpec, load_conductor_model

    model, tok = load_conductor_model(ModelSpec(id="tiny-random"))
    script = ids(tok, "access_list = [[]]") + ids(tok, " more text that should never appear" * 3)

    class Teacher(LogitsProcessor):  # runs before the stop: makes the model "write" the script
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            step = input_ids.shape[1] - prompt_len
            forced = torch.full_like(scores, float("-inf"))
            forced[:, script[min(step, len(script) - 1)]] = 0.0
            return forced

    enc = tok(["Q: plan"], return_tensors="pt")
    prompt_len = enc["input_ids"].shape[1]
    install_access_list_stop(model, tok)
    out = model.generate(
        **enc,
        max_new_tokens=40,
        do_sample=False,
        logits_processor=LogitsProcessorList([Teacher()]),
        pad_token_id=tok.pad_token_id,
    )
    new = out[0, prompt_len:].tolist()
    text = tok.decode(new, skip_special_tokens=True)
    assert text == "access_list = [[]]"
    assert new[-1] == tok.eos_token_id and len(new) == len(ids(tok, "access_list = [[]]")) + 1


def test_probe_counts_groups_and_writes_every_sample(tmp_path: Any) -> None:
    from puppeteer.train.conductor_model import ModelSpec
    from tests.experiment_modules import experiment_module

    probe = experiment_module("conductor-grpo", "conductor_probe")
    ProbeSpec, SamplingSpec, run_probe = probe.ProbeSpec, probe.SamplingSpec, probe.run_probe

    spec = ProbeSpec(
        model=ModelSpec(id="tiny-random"), questions=2, samples=3, sampling=SamplingSpec(max_new_tokens=6)
    )
    summary = run_probe(spec, out=tmp_path)
    assert summary["questions"] == 2 and summary["samples"] == 6
    assert "workers = sim" in summary["backend"] and "tiny-random" in summary["backend"]
    # a random model writes no workflow: nothing parses, no group has variance, every sample hits the cap
    assert summary["parse_rate"] == 0.0 and summary["groups_with_variance"] == 0
    assert [g["n"] for g in summary["groups"]] == [3, 3]
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 6 and (tmp_path / "probe.json").is_file()


def test_group_stats_variance_and_cap() -> None:
    from puppeteer.integrations.trl import WorkflowOutcome
    from tests.experiment_modules import experiment_module

    probe = experiment_module("conductor-grpo", "conductor_probe")
    group_stats, summarize_groups = probe.group_stats, probe.summarize_groups

    def outcome(parsed: bool, correct: bool) -> WorkflowOutcome:
        reward = 1.0 if correct else 0.5 if parsed else 0.0
        return WorkflowOutcome("t", parsed, correct, reward, 0.0, 1, 1)

    three = [outcome(False, False), outcome(True, False), outcome(True, True)]
    g = group_stats("t", three, [8, 3, 5], 8, 1.0)
    assert (g.parsed, g.correct, g.capped) == (2, 1, 1)
    assert g.reward_mean == pytest.approx(0.5) and g.has_variance
    flat = group_stats("u", [outcome(False, False)] * 2, [8, 8], 8, 1.0)
    assert not flat.has_variance and flat.capped == 2
    s = summarize_groups([g, flat])
    assert s["samples"] == 5 and s["parse_rate"] == pytest.approx(0.4) and s["groups_with_variance"] == 1
    assert s["questions_with_a_parse"] == 1 and s["capped_rate"] == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("model_id = [0, 1]\nsubtasks = ['a', 'b']\naccess_list = [[], 'all']", 1.0),
        ("model_id = [0, 1]\nsubtasks = ['a']\naccess_list = [[], 'all']", 0.75),  # lengths differ
        ("model_id = [0, 1]\nsubtasks = ['a', 'b']\naccess_list = [[], ", 0.5),  # access_list not closed
        ("model_id = [0]*9\nsubtasks = ['a']", 0.25),  # model_id is not a literal list
        ("model_id = [0, 1, 2, 3, 4, 5]\nsubtasks = ['a'] \naccess_list = []", 0.75),
        ("model_id = [0]*6", 0.0),
        ("def f(): pass", 0.0),
        ("model_id = [0,0,0,0,0,0]\nsubtasks = ['a']*6\naccess_list = [[]]*6", 0.25),
    ],
)
def test_format_score_grades_the_three_lists(text: str, score: float) -> None:
    from puppeteer.train.format_reward import format_score

    assert format_score(text, max_steps=5) == score


def test_format_reward_puts_the_prefix_back() -> None:
    from puppeteer.train.format_reward import FormatReward

    rest = "0]\nsubtasks = ['a']\naccess_list = [[]]"
    assert FormatReward("model_id = [")([None, None], [rest, "junk"]) == [1.0, 0.0]
    assert FormatReward()([None], [rest]) == [0.5]  # without the prefix model_id is not there
