"""Every value a user or a file gives is checked where it enters: pool files (and YAML alias bombs),
policy directories, CLI numbers, served request fields, policy specs that are paths; secrets in
overrides are redacted from every file a run writes."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from puppeteer.agents.pool import PoolError, load_pool, pool_from_dict
from puppeteer.cli.app import main
from puppeteer.utils.yamlsafe import YamlLimitError, load_yaml

POOL = {
    "name": "p",
    "models": {"m": {"backend": "sim", "target": "gpt5", "params_b": 7, "price_in": 1.0, "price_out": 2.0}},
    "agents": [{"name": "a", "model": "m", "pattern": "cot", "max_tokens": 256}],
}


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert "Traceback" not in text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, text
    return errors[0]


def _with_model(**fields: object) -> dict[str, object]:
    return {**POOL, "models": {"m": {**POOL["models"]["m"], **fields}}}  # type: ignore[dict-item]


def _with_agent(**fields: object) -> dict[str, object]:
    return {**POOL, "agents": [{**POOL["agents"][0], **fields}]}  # type: ignore[dict-item]


# --------------------------------------------------------------------------- pool files


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_with_model(price_in=-1.0), r"price_in must be a finite number >= 0, got -1.0"),
        (_with_model(price_out=float("nan")), r"price_out must be a finite number >= 0, got nan"),
        (_with_model(price_in=float("inf")), r"price_in must be a finite number"),
        (_with_model(params_b=-1e9), r"params_b must be a finite number >= 0"),
        (_with_model(params_b="big"), r"params_b must be a number"),
        (_with_model(price_in=True), r"price_in must be a number"),
        (_with_model(backend=["sim"]), r"backend must be a string, got list"),
        (_with_agent(max_tokens=-100), r"max_tokens must be a whole number in 1\.\."),
        (_with_agent(max_tokens=1.5), r"max_tokens must be a whole number"),
        (_with_agent(name=["x", "y"]), r"name must be a string, got list"),
        (_with_agent(description={"a": 1}), r"description must be a string, got dict"),
        (_with_agent(tools="calculator"), r"tools must be a list of tool names"),
        ({**POOL, "agents": ["a"]}, r"agent #0: must be a mapping"),
        ({**POOL, "models": ["m"]}, r"'models' must be a mapping"),
    ],
)
def test_a_bad_pool_value_is_refused_naming_its_field(raw: dict[str, object], message: str) -> None:
    with pytest.raises(PoolError, match=message):
        pool_from_dict(raw)


@settings(max_examples=80, deadline=None)
@given(
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(10**12), max_value=10**12),
        st.booleans(),
        st.text(max_size=5),
        st.none(),
        st.lists(st.integers(), max_size=2),
    ),
    field=st.sampled_from(["price_in", "price_out", "params_b", "prefill_tps", "decode_tps"]),
)
def test_any_model_number_loads_finite_and_in_range_or_is_refused(value: object, field: str) -> None:
    try:
        pool = pool_from_dict(_with_model(**{field: value}))
    except PoolError as e:
        assert "\n" not in str(e) and field in str(e)
        return
    got = getattr(pool.agents[0].model, field)
    assert got is None or (math.isfinite(got) and got >= 0)
    if field in ("prefill_tps", "decode_tps") and got is not None:
        assert got > 0


def test_a_bad_pool_file_is_one_cli_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "neg.yaml"
    path.write_text(json.dumps(_with_model(price_in=-5)))  # JSON is YAML
    args = ["eval", "--pool", str(path), "--suite", "arith", "--policy", "single:0", "--n", "2", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "ev")]) == 2
    line = _one_error(capsys)
    assert str(path) in line and "price_in" in line
    assert not (tmp_path / "ev").exists()


def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        refs = ", ".join(f"*a{i - 1}" for _ in range(width))
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append(
        f"models: {{m: {{backend: sim, params_b: 1}}}}\nagents: [{{name: *a{levels - 1}, model: m}}]"
    )
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_in_a_pool_file_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())
    assert path.stat().st_size < 8000
    start = time.perf_counter()
    with pytest.raises(PoolError, match=rf"{path}: the document stands for more than"):
        load_pool(path)
    assert time.perf_counter() - start < 5


def test_the_bounded_loader_reads_ordinary_aliases_and_refuses_recursive_ones() -> None:
    assert load_yaml("base: &b {x: 1}\nother: *b\n") == {"base": {"x": 1}, "other": {"x": 1}}
    with pytest.raises(YamlLimitError, match="refers to the value that holds it"):
        load_yaml("a: &a [1, *a]\n", "f.yaml")
    with pytest.raises(YamlLimitError, match=r"f\.yaml: the document stands for"):
        load_yaml(_alias_bomb(levels=7, width=8), "f.yaml")


def test_every_shipped_pool_still_loads() -> None:
    from puppeteer.utils.resources import data_dir

    for path in sorted(data_dir("agents").glob("*.yaml")):
        assert len(load_pool(path)) >= 1, path


# --------------------------------------------------------------------------- policy directories


def _saved_policy(tmp_path: Path) -> Path:
    from puppeteer.policies.puppeteer import PuppeteerPolicy
    from puppeteer.policies.puppeteer_config import PolicyConfig

    d = tmp_path / "pol"
    PuppeteerPolicy(load_pool("sim-paper"), PolicyConfig(encoder="hashing", hidden=8, max_steps=3)).save(d)
    return d


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"surprise": 1}, r"config.surprise is not a policy setting"),
        ({"hidden": -1}, r"policy.hidden must be a whole number in 1\.\.1024, got -1"),
        ({"hidden": "abc"}, r"policy.hidden must be a whole number"),
        ({"hidden": 1_000_000}, r"policy.hidden must be a whole number in 1\.\.1024"),
        ({"hidden": True}, r"policy.hidden must be a whole number"),
        ({"max_steps": -1}, r"policy.max_steps must be a whole number in 1\.\.256"),
        ({"encoder_options": [["dim", 100_000_000_000]]}, r"dim must be a whole number in 1\.\.16384"),
        ({"encoder_options": "dim"}, r"encoder_options must be a list of \[name, value\] pairs"),
    ],
)
def test_a_bad_policy_directory_is_refused_before_any_layer_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, object], message: str
) -> None:
    d = _saved_policy(tmp_path)
    meta = json.loads((d / "policy.json").read_text())
    meta["config"].update(change)
    (d / "policy.json").write_text(json.dumps(meta))
    args = ["eval", "--pool", "sim-paper", "--suite", "arith", "--policy", f"puppeteer:{d}", "--n", "2"]
    assert main([*args, "--out", str(tmp_path / "ev"), "--quiet"]) == 2
    line = _one_error(capsys)
    assert str(d / "policy.json") in line
    import re

    assert re.search(message, line), line


_JSON_VALUES = st.one_of(
    st.integers(min_value=-(10**13), max_value=10**13),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=2),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.sampled_from(["hidden", "max_steps", "min_steps", "task_dims", "card_noise", "encoder", "layers"]),
    value=_JSON_VALUES,
)
def test_any_policy_setting_loads_a_bounded_scorer_or_is_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, key: str, value: object
) -> None:
    from puppeteer.policies.puppeteer import PuppeteerPolicy
    from puppeteer.policies.puppeteer_config import MAX_HIDDEN

    d = _saved_policy(tmp_path_factory.mktemp("p"))
    meta = json.loads((d / "policy.json").read_text())
    meta["config"][key] = value
    (d / "policy.json").write_text(json.dumps(meta))
    try:
        policy = PuppeteerPolicy.load(d, load_pool("sim-paper"))
    except ValueError as e:  # a bad value, or a good one that lays out another scorer than policy.pt
        assert "\n" not in str(e) and ("policy.json" in str(e) or "policy.pt" in str(e))
        return
    size = sum(p.numel() for p in policy.scorer.parameters())
    assert policy.config.hidden <= MAX_HIDDEN and size < 50_000_000


@settings(max_examples=60, deadline=None)
@given(levels=st.integers(min_value=1, max_value=12), width=st.integers(min_value=1, max_value=12))
def test_any_alias_pyramid_loads_within_bounds_or_is_refused_quickly(levels: int, width: int) -> None:
    start = time.perf_counter()
    try:
        load_yaml(_alias_bomb(levels, width), "f.yaml")
    except YamlLimitError as e:
        assert "f.yaml" in str(e)
        # only documents near or past the bound are refused (the top list is used twice, and each level
        # of lists counts too: a little over 2x the leaves)
        assert 9 * width ** (levels - 1) > 50_000
    assert time.perf_counter() - start < 2


def test_a_policy_file_that_is_not_an_object_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _saved_policy(tmp_path)
    for text in ("[1, 2]", '{"config": 3, "agents": []}', "not json"):
        (d / "policy.json").write_text(text)
        args = ["run", "--pool", "sim-paper", "--suite", "arith", "--policy", f"puppeteer:{d}"]
        assert main(args) == 2
        assert str(d / "policy.json") in _one_error(capsys)


def test_an_sb3_directory_with_huge_layers_or_bad_settings_is_refused(tmp_path: Path) -> None:
    import zipfile

    from puppeteer.policies.external import load_sb3

    d = tmp_path / "sb3"
    d.mkdir()
    pool = load_pool("sim-paper")
    meta = {
        "algorithm": "MaskablePPO",
        "encoder": "hashing",
        "max_steps": 3,
        "agents": [a.name for a in pool.agents],
    }
    (d / "puppeteer.json").write_text(json.dumps({**meta, "max_steps": -1}))
    (d / "model.zip").write_bytes(b"")
    with pytest.raises(ValueError, match=r"max_steps must be a whole number in 1\.\.256"):
        load_sb3(d, pool)
    (d / "puppeteer.json").write_text(json.dumps({**meta, "extra": 1}))
    with pytest.raises(ValueError, match="unknown setting 'extra'"):
        load_sb3(d, pool)
    pytest.importorskip("sb3_contrib")
    (d / "puppeteer.json").write_text(json.dumps(meta))
    with zipfile.ZipFile(d / "model.zip", "w") as zf:
        zf.writestr("data", json.dumps({"policy_kwargs": {"net_arch": [200000, 200000]}}))
        zf.writestr("policy.pth", b"")
    with pytest.raises(ValueError, match=r"net_arch must list at most 16 layer widths in 1\.\.4096"):
        load_sb3(d, pool)


# --------------------------------------------------------------------------- CLI numbers, specs, commands


@pytest.mark.parametrize("value", ["0", "-5", "two"])
def test_eval_concurrency_below_one_is_refused_at_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    args = ["eval", "--pool", "sim-paper", "--suite", "arith", "--policy", "single:0", "--n", "2"]
    with pytest.raises(SystemExit) as done:
        main([*args, "--concurrency", value, "--out", str(tmp_path / "ev")])
    assert done.value.code == 2 and "--concurrency" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize("kind", ["missing", "file", "empty"])
def test_ab_with_a_path_that_is_no_policy_names_it_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    arm = tmp_path / "arm"
    if kind == "file":
        arm.write_text("x")
    elif kind == "empty":
        arm.mkdir()
    args = ["ab", str(arm), "single:0", "--pool", "sim-paper", "--suite", "arith", "--n", "3"]
    assert main([*args, "--out", str(tmp_path / "ab")]) == 2
    line = _one_error(capsys)
    want = {"missing": "does not exist", "file": "is a file", "empty": "is an empty folder"}[kind]
    assert str(arm) in line and want in line


def test_ab_with_one_arm_and_run_without_a_question_print_one_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["ab", "vote:3", "--pool", "sim-paper", "--suite", "arith"]) == 2
    assert "at least two arms" in _one_error(capsys)
    assert main(["run", "--pool", "sim-paper", "--chain", "0"]) == 2
    assert "give a question" in _one_error(capsys)
    assert main(["run", "--pool", "sim-paper", "--suite", "arith", "--workflow", "garbage"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: --workflow rejected") and "final answer" not in out


def test_pool_show_takes_the_name_as_an_argument_or_an_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pool", "show", "--pool", "sim-paper"]) == 0
    by_option = capsys.readouterr().out
    assert main(["pool", "show", "sim-paper"]) == 0
    assert capsys.readouterr().out == by_option and "pool sim-paper" in by_option


# --------------------------------------------------------------------------- the served endpoint


@pytest.fixture(scope="module")
def http():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from puppeteer.serving.orchestrator import Orchestrator
    from puppeteer.serving.serve import create_app

    with Orchestrator.load("vote:3", "sim-paper", suite="arith") as orch:
        yield TestClient(create_app(orch))


@pytest.mark.parametrize("lam", [True, "0.3", -1, None])
def test_served_lam_must_be_a_finite_json_number_in_range(http, lam: object) -> None:
    body = {"model": "puppeteer", "messages": [{"role": "user", "content": "What is 2 + 2?"}], "lam": lam}
    # JSON has no NaN; Python's encoder writes one
    raw = json.dumps(body | {"lam": float("nan")} if lam is None else body).encode()
    reply = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith(
        "malformed request: body.lam"
    )


def test_a_body_that_is_not_utf8_gets_an_openai_shaped_400(http) -> None:
    raw = b'{"model": "puppeteer", "messages": [{"role": "user", "content": "\xff\xfe"}]}'
    reply = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 400 and "detail" not in reply.json()
    assert reply.json()["error"]["type"] == "invalid_request_error"


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize("secret", ["sk-test-SECRET456", "sk-a1"])
def test_a_short_key_shaped_override_is_written_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    monkeypatch.setenv("NOTE", "")  # the override is moved here: restored after the test
    out, hydra_dir = tmp_path / "run", tmp_path / "hydra"
    args = ["trainer.episodes=16", "trainer.batch_episodes=16", "policy.encoder=hashing", "suite.n_eval=4"]
    args += [
        "suite.n_val=4",
        "wandb.enabled=false",
        f"+note={secret}",
        f"out={out}",
        f"hydra.run.dir={hydra_dir}",
    ]
    assert main(["train", *args]) == 0
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "config.json" for p in files) and any(p.parent.name == ".hydra" for p in files)
    assert [p for p in files if secret.encode() in p.read_bytes()] == []


def test_the_conductor_track_moves_key_shaped_overrides_out_of_hydra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setattr(sys, "argv", sys.argv[:])  # Hydra's entry rewrites it
    monkeypatch.setenv("NOTE", "")
    assert main(["train", "track=conductor", "+note=sk-tiny1", "--cfg", "job"]) == 0
    printed = capsys.readouterr().out
    assert "pool:" in printed and "sk-tiny1" not in printed  # Hydra composed the job without it
    assert os.environ["NOTE"] == "sk-tiny1"
