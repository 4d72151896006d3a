"""``puppeteer train``'s Hydra configs: groups from envs/ and agents/, types, flags, sweep directories."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from puppeteer.cli import main
from puppeteer.envs.env import EnvConfig
from puppeteer.tasks import split_sizes
from puppeteer.tasks.spec import suite_names
from puppeteer.train.config_schema import (
    ENV_KEYS,
    TrainConfig,
    TrainerNode,
    check_overrides,
    fit_to_split,
    job_dirname,
    register_configs,
    single_runs,
)
from puppeteer.train.reinforce import ReinforceConfig
from puppeteer.utils.resources import available, data_dir

CONFIGS = str(data_dir("configs"))


@pytest.fixture
def composer() -> Iterator[object]:
    register_configs()
    with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
        yield lambda *overrides: compose(config_name="train", overrides=list(overrides))
    GlobalHydra.instance().clear()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # rich would wrap the one-line errors


# ------------------------------------------------------------------ groups from the declarative files


def test_every_suite_and_pool_is_a_config_group_option(composer) -> None:
    assert len(suite_names()) >= 12 and len(available("agents")) >= 3
    for suite in suite_names():
        cfg: DictConfig = composer(f"suite={suite}")
        assert cfg.suite.name == suite and cfg.suite.eval_split == "test"
    for pool in available("agents"):
        assert composer(f"pool={pool}").pool.name == pool


def test_no_copies_of_suites_or_pools_under_configs() -> None:
    assert not (Path(CONFIGS) / "suite").exists() and not (Path(CONFIGS) / "pool").exists()


def test_suite_sizes_are_upper_bounds_that_fit_the_split(caplog: pytest.LogCaptureFixture) -> None:
    capacity = split_sizes("mix-paper")["test"]
    assert capacity < 200  # the README's suite=mix-paper used to ask for more than the mix holds
    with caplog.at_level(logging.WARNING):
        assert fit_to_split("mix-paper", "test", 200) == capacity
    assert "mix-paper" in caplog.text and str(capacity) in caplog.text
    assert fit_to_split("arith", "test", 200) == 200  # arith keeps its documented default
    assert fit_to_split("arith", "test", None) is None


# --------------------------------------------------------------------------- types


def test_defaults_compose_with_types(composer) -> None:
    cfg = composer()
    assert OmegaConf.get_type(cfg, "lam") is float and cfg.lam == pytest.approx(0.1)
    assert cfg.suite.name == "arith" and cfg.pool.name == "sim-paper" and cfg.trainer.episodes == 16384
    assert composer("lam=0.2", "trainer.lr=1e-3", "suite.n_eval=7").suite.n_eval == 7


def test_trainer_and_env_schemas_follow_the_library_dataclasses() -> None:
    names = [f.name for f in dataclasses.fields(TrainerNode)]
    assert names == [f.name for f in dataclasses.fields(ReinforceConfig) if f.name != "seed"]
    env_defaults = {f.name: f.default for f in dataclasses.fields(EnvConfig) if f.name in ENV_KEYS}
    assert len(env_defaults) == len(ENV_KEYS)
    assert {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.name in ENV_KEYS} == env_defaults


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("lam=abc", ("lam", "abc", "Float")),
        ("trainer.episodes=many", ("trainer.episodes", "many", "Integer")),
        ("policy.hidden=1.5", ("policy.hidden", "Integer")),
        ("suite=no-such-suite", ("suite/no-such-suite",)),
        ("no_such_key=1", ("no_such_key",)),
    ],
)
def test_a_bad_override_fails_at_composition_with_one_line(override: str, words: tuple[str, ...]) -> None:
    register_configs()
    message = check_overrides(CONFIGS, "train", [override])
    assert message is not None and "\n" not in message
    assert all(w in message for w in words), message


def test_cli_reports_a_bad_override_in_one_line_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "lam=abc", f"out={tmp_path / 'run'}"]) == 2
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1 and out.startswith("error: config:") and "lam=abc" in out
    assert not (tmp_path / "run").exists()


def test_sweeps_are_checked_value_by_value() -> None:
    assert single_runs(["lam=0,0.1", "seed=1", "gamma=0.9,0.8"]) == [
        ["seed=1", "lam=0", "gamma=0.9"],
        ["seed=1", "lam=0.1", "gamma=0.9"],
        ["seed=1", "lam=0", "gamma=0.8"],
    ]
    register_configs()
    assert check_overrides(CONFIGS, "train", ["-m", "lam=0,0.1"]) is None
    message = check_overrides(CONFIGS, "train", ["-m", "lam=0,abc"])
    assert message is not None and "abc" in message


# ------------------------------------------------------------------ Hydra's flags and sweep directories


def test_hydra_flags_pass_through_puppeteer_train(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--cfg", "job", "suite=gsm8k", "lam=0.3"]) == 0
    shown = OmegaConf.create(capsys.readouterr().out)
    assert shown.suite.name == "gsm8k" and shown.lam == pytest.approx(0.3)
    assert main(["train", "--info", "defaults"]) == 0
    assert "suite/arith" in capsys.readouterr().out


def test_job_dirname_is_short_unique_and_one_path_component() -> None:
    assert job_dirname(3, "lam=0.1,seed=2") == "3_lam=0.1,seed=2"
    assert job_dirname(0, "") == "0"
    long_a = ",".join(f"trainer.key_{i}=value_{i}" for i in range(18))
    long_b = long_a.replace("value_17", "value_x")
    a, b = job_dirname(1, long_a), job_dirname(1, long_b)
    assert len(a) <= 90 and a != b and a[:40] == b[:40]
    assert "/" not in job_dirname(2, "out=/tmp/x,cache=~/c.sqlite")


def test_multirun_with_many_overrides_writes_short_job_directories(tmp_path: Path) -> None:
    overrides = [
        "trainer.episodes=8",
        "trainer.batch_episodes=8",
        "trainer.group_size=4",
        "trainer.lr_final_fraction=0.2",
        "trainer.eval_every=1",
        "trainer.checkpoint_every=1",
        "trainer.lr=0.02",
        "trainer.weight_decay=0.001",
        "trainer.entropy_coef=0.02",
        "trainer.max_grad_norm=2.0",
        "trainer.ema_decay=0.8",
        "policy.encoder=hashing",
        "policy.hidden=16",
        "suite.n_train=8",
        "suite.n_val=4",
        "suite.n_eval=4",
        "wandb.enabled=false",
        "gamma=0.95",
    ]
    assert len(overrides) == 18 and len(",".join(overrides)) > 255  # Hydra's default name was too long
    assert main(["train", "-m", *overrides, f"hydra.sweep.dir={tmp_path}"]) == 0
    jobs = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(jobs) == 1 and jobs[0].name.startswith("0_") and len(jobs[0].name) <= 90
    assert (jobs[0] / "results.json").exists()


def test_a_training_that_learns_to_call_nobody_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """min_steps=0 at a price no answer is worth: the policy learns to stop at once; the job says so
    and exits non-zero instead of reporting accuracy 0.000 as a result (issue 29)."""
    common = [
        "pool=sim-paper",
        "suite=arith",
        "policy.encoder=hashing",
        "trainer.episodes=128",
        "trainer.batch_episodes=32",
        "trainer.eval_every=1",
        "trainer.parallel_envs=4",
        "suite.n_train=16",
        "suite.n_val=8",
        "suite.n_eval=8",
        "wandb.enabled=false",
        "progress=false",
    ]
    degenerate = main(["train", *common, "min_steps=0", "lam=50", f"out={tmp_path / 'a'}"])
    err = capsys.readouterr().out
    assert degenerate == 2 and "degenerate policy: it calls no agent" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["train", *common, "lam=50", f"out={tmp_path / 'b'}"]) == 0  # min_steps defaults to 1


def test_train_into_a_file_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 33: `train out=<a file>` showed a FileExistsError traceback."""
    target = tmp_path / "a-file"
    target.write_text("not a directory")
    argv = ["train", f"out={target}", "policy.encoder=hashing", "trainer.episodes=8", "wandb.enabled=false"]
    assert main(argv) == 2
    out = capsys.readouterr().out
    assert "Traceback" not in out and out.startswith("error:") and "a-file" in out
    assert target.read_text() == "not a directory"


@pytest.mark.parametrize(
    "override",
    [
        "trainer.batch_episodes=7",
        "trainer.baseline=nope",
        "policy.encoder=nope",
        "cost_model=nope",
        "k_available=0",
        "pool.options={sim:{repeat_corr:3}}",
        "pool.options={sim:{nope:1}}",
        "pool.options={llamacpp:{n_threads:1}}",
        "pool.options=3",
    ],
)
def test_a_bad_value_fails_before_anything_is_written(
    override: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: these were checked only once training started, after config.json, wandb/ or Hydra's
    .hydra/ had been written."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", override, f"out={tmp_path / 'run'}"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error:") and len(out.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_pool_options_reach_the_backend_and_the_resume_fingerprint(composer) -> None:
    """``pool.options`` merges over the pool file's backend options; a run resumed with other options
    is refused (they change the draws)."""
    from puppeteer.jobs.train import job_of
    from puppeteer.train.reinforce import run_fingerprint

    def job(*overrides: str):
        base = ("pool=sim-routing", "suite=mix-routing", "policy.encoder=hashing")
        return job_of(OmegaConf.to_container(composer(*base, *overrides), resolve=True))

    plain, rep = job(), job("pool.options={sim:{repeat_corr:1.0}}")
    plain_env, rep_env = plain.env("train"), rep.env("train")
    assert plain_env.backend_spec.options == {}
    assert dict(rep_env.backend_spec.options["sim"]) == {"repeat_corr": 1.0}
    fp_plain = run_fingerprint(plain_env, plain.policy(), plain.trainer)
    fp_rep = run_fingerprint(rep_env, rep.policy(), rep.trainer)
    assert "backend" not in fp_plain  # a plain run's fingerprint as before
    assert "repeat_corr" in fp_rep["backend"] and fp_rep["policy"] == fp_plain["policy"]
