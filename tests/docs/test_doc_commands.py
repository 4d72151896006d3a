"""Every ``puppeteer ...`` command that README.md, docs/ and experiments/ show runs (on the sim pool, tiny
sizes).

The commands are read from the markdown itself, so a changed or added command is tested without
editing this file. Each runs in-process through ``puppeteer.cli.main`` in a scratch directory,
shrunk by the rules in ``SHRINK`` (fewer items, a handful of episodes, the hashing encoder,
outputs under the scratch directory). Commands that need real models or a network are listed in
``NEEDS_REAL_MODELS`` with the reason: skipped in the fast run; the cheap ones run in the slow
suite. A new doc command that needs real models fails here until it is listed.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from puppeteer.cli import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "experiments").rglob("*.md")),
]

PROGRAM = "puppeteer"
_FENCE = re.compile(r"^\s*(```|~~~)\s*(\S*)")
_SHELL_FENCES = frozenset({"", "bash", "sh", "shell", "console", "zsh"})
_INLINE = re.compile(r"`([^`\n]+)`")
_SEPARATORS = frozenset({"&&", "||", ";", "|"})


@dataclass(frozen=True)
class DocCommand:
    """One ``puppeteer`` invocation shown in a document."""

    argv: tuple[str, ...]
    source: str
    line: int

    @property
    def text(self) -> str:
        return shlex.join([PROGRAM, *self.argv])

    @property
    def subcommand(self) -> str:
        return self.argv[0] if self.argv else ""


def _split(text: str) -> list[str] | None:
    """Shell words of ``text`` (comments dropped), or ``None`` while a quote is still open."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:
        return None


def _invocations(words: list[str]) -> Iterator[tuple[str, ...]]:
    """The argv (after the program name) of each ``puppeteer`` command in a pipeline or chain."""
    segment: list[str] = []
    for word in [*words, "&&"]:
        if word in _SEPARATORS:
            if PROGRAM in segment:
                yield tuple(segment[segment.index(PROGRAM) + 1 :])
            segment = []
        else:
            segment.append(word)


def _block_commands(lines: list[str], start: int, source: str) -> Iterator[DocCommand]:
    pending, first = "", 0
    for offset, raw in enumerate(lines):
        line = raw.strip()
        if not pending:
            line = line.removeprefix("$ ").strip()
            if not re.search(rf"(^|\s|&&\s*){PROGRAM}\s", line):
                continue
            first = start + offset
        pending = f"{pending}\n{raw}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        words = _split(pending)
        if words is None:
            continue
        for argv in _invocations(words):
            if argv:
                yield DocCommand(argv, source, first)
        pending = ""


def _inline_commands(text: str, line: int, source: str) -> Iterator[DocCommand]:
    for match in _INLINE.finditer(text):
        words = _split(match.group(1))
        if words and PROGRAM in words:
            for argv in _invocations(words):
                if argv and not argv[0].startswith(("-", "`")):
                    yield DocCommand(argv, source, line)


def commands_in(path: Path, root: Path | None = None) -> list[DocCommand]:
    """Every ``puppeteer`` command in one markdown file, in order."""
    source = str(path.relative_to(root)) if root is not None else str(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[DocCommand] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if _FENCE.match(lines[j])), len(lines))
            if fence.group(2).lower() in _SHELL_FENCES:
                found += _block_commands(lines[i + 1 : end], i + 2, source)
            i = end + 1
            continue
        found += _inline_commands(lines[i], i + 1, source)
        i += 1
    return found


def doc_commands(paths: Iterable[Path], root: Path | None = None) -> list[DocCommand]:
    """Commands of several files; a command shown in several places is kept once (first place)."""
    seen: set[tuple[str, ...]] = set()
    out: list[DocCommand] = []
    for path in paths:
        for cmd in commands_in(path, root):
            if cmd.argv not in seen:
                seen.add(cmd.argv)
                out.append(cmd)
    return out


# --------------------------------------------------------------------------- which commands, how shrunk


@dataclass(frozen=True)
class RealModels:
    """Why a command cannot run in the fast suite, and whether the slow suite runs it as shown."""

    reason: str
    slow: bool


# (pattern searched in the command text after ``puppeteer ``, why): the first match wins
NEEDS_REAL_MODELS: tuple[tuple[str, RealModels], ...] = (
    (
        r"^quickstart\b",
        RealModels(
            "trains on real local llama.cpp models for ~5-7 min on 2 cores "
            "(experiments/quickstart/results/report.md); "
            "the same code path runs on the simulator in tests/jobs/test_quickstart.py",
            slow=False,
        ),
    ),
    (
        r"^(eval|run|ab|graph|sweep)( --[a-z-]+( [A-Z,]+)?)?$"
        r"|^outcomes( (import|export|routers|steps|fit-sim))?$",
        RealModels("a mention of the sub-command in prose, not a command", slow=False),
    ),
    (
        r"^(graph|query) ",
        RealModels(
            "reads runs that earlier commands of the page made; tests/analytics/test_analytics_*.py run it",
            slow=False,
        ),
    ),
    (
        r"^sweep .*--track conductor",
        RealModels(
            "trains a language model with GRPO for each lambda and seed (~50 min a run on 2 cores); "
            "tests/jobs/test_sweep.py runs the same command with a tiny model",
            slow=False,
        ),
    ),
    (
        r"^sweep .*--seeds [3-9]",
        RealModels(
            "the full documented study (many training runs); the page's quick sweep runs here", slow=False
        ),
    ),
    (
        r"^sweep .*--n-eval 500\b",
        RealModels(
            "a training run of the n = 500 three-arm study (2048 MiniLM episodes or 512 with 500 held-out "
            "items: 3-10 min on 2 cores); the page's quick sweep runs here",
            slow=False,
        ),
    ),
    (
        r"\.\.\.|\[[A-Z_]+\]|\[--|^ab A B\b|HEAD_IP|=ADDRESS|=N\b| K\b",
        RealModels("a usage template with placeholders, not a runnable command", slow=False),
    ),
    (r"--ray (auto|ray://)|ray_address=auto", RealModels("needs a running Ray cluster", slow=False)),
    (
        r"--ray\b|rollout_workers=[1-9]",
        RealModels(
            "starts a local Ray instance (slow on 2 cores); tests/evaluation/test_ray.py runs the same paths",
            slow=True,
        ),
    ),
    (
        r"^ab( --\S+ \S+)* runs/|^ab\b.*(?<!--out) runs/",
        RealModels("compares a run directory made by an earlier command of the same page", slow=False),
    ),
    (
        r"(sb3|puppeteer|conductor(:grpo)?):(runs|/)",
        RealModels("needs a policy trained by an earlier command of the same page", slow=False),
    ),
    (
        r"track=conductor",
        RealModels(
            "trains a language model with GRPO (CPU minutes to GPU hours); "
            "tests/train/test_conductor_grpo.py runs one step of each shipped config with a tiny model",
            slow=False,
        ),
    ),
    (
        r"^serve\b",
        RealModels(
            "starts a server that runs until stopped; tests/serving/test_serve.py runs it on 127.0.0.1",
            slow=False,
        ),
    ),
    (
        r"^pool calibrate\b",
        RealModels(
            "loads each embedded llama.cpp model and times it alone (minutes on 2 cores); "
            "tests/cli/test_cli.py runs the command with the measurement faked",
            slow=False,
        ),
    ),
    (
        r"runs/mine\b",
        RealModels(
            "reads the user's own log file, or the folder its import made (docs/own-outcomes.md); "
            "tests/outcomes/test_outcomes_import.py, tests/jobs/test_bench_routers.py and "
            "tests/serving/test_outcomes_serve.py run the same commands on a toy table",
            slow=False,
        ),
    ),
    (
        r"runs/field-routers\b",
        RealModels(
            "reads the table the page's convert.py writes (minutes of routers on 5,989 queries); "
            "tests/outcomes/test_outcomes_import.py and tests/jobs/test_bench_routers.py run the same "
            "commands on a toy table",
            slow=False,
        ),
    ),
    (
        r"\boutcomes fit-sim\b",
        RealModels(
            "fits a simulated pool to a shipped table (a minute of maximum likelihood); "
            "tests/backends/test_sim_calibrated.py runs the fit on hand-built tables and checks the shipped "
            "sim-local",
            slow=False,
        ),
    ),
    (
        r"\boutcomes (build|steps)\b",
        RealModels("runs agents on real models to extend a shipped outcome table (hours)", slow=False),
    ),
    (
        # `local-mix` is not here: its calls replay from the shipped outcome table, so its commands run
        r"--pool (local|local-v2|local-v2-cascade|api-example)(\s|$)|pool=(local|local-v2|local-v2-cascade"
        r"|api-example)(\s|$)|--policy conductor\b",
        RealModels("calls real models (local llama.cpp or a provider's API)", slow=False),
    ),
)


def real_models(cmd: DocCommand) -> RealModels | None:
    text = " ".join(cmd.argv)
    for pattern, why in NEEDS_REAL_MODELS:
        if re.search(pattern, text):
            return why
    return None


def _set(argv: list[str], flag: str, value: str) -> list[str]:
    """``flag value`` in an argparse command line, replacing an existing value."""
    if flag in argv:
        i = argv.index(flag)
        return [*argv[: i + 1], value, *argv[i + 2 :]]
    return [*argv, flag, value]


def _override(argv: list[str], key: str, value: str) -> list[str]:
    """``key=value`` in a Hydra command line, replacing an existing one."""
    kept = [a for a in argv if a.split("=", 1)[0].lstrip("+~") != key]
    return [*kept, f"{key}={value}"]


def shrink_eval(argv: list[str], tmp: Path) -> list[str]:
    return [*_set(_set(argv, "--n", "4"), "--out", str(tmp / "eval")), "--quiet"]


TINY_TRAINING = {  # a handful of episodes of a tiny policy: what a documented `train` is shrunk to
    "trainer.episodes": "8",
    "trainer.batch_episodes": "8",
    "trainer.group_size": "4",
    "trainer.eval_every": "1",
    "policy.encoder": "hashing",
    "policy.hidden": "16",
    "wandb.enabled": "false",
}


def shrink_train(argv: list[str], tmp: Path) -> list[str]:
    # the suite keeps its default sizes: they must fit the suite (mix-paper's test split holds 150)
    tiny = {**TINY_TRAINING, "hydra.run.dir": str(tmp / "run"), "hydra.sweep.dir": str(tmp / "sweep")}
    for key, value in tiny.items():
        argv = _override(argv, key, value)
    return argv


def shrink_sweep(argv: list[str], tmp: Path) -> list[str]:
    """Each training run of a step-wise sweep as a short one (the documented budget is the study's)."""
    if "conductor" in argv:
        return argv
    short = {"trainer.episodes": "64", "trainer.batch_episodes": "32", "trainer.group_size": "4"}
    for key, value in short.items():
        argv = _override(argv, key, value)
    return argv


def shrink_ab(argv: list[str], tmp: Path) -> list[str]:
    return _set(_set(argv, "--n", "20"), "--out", str(tmp / "ab"))


def shrink_pool(argv: list[str], tmp: Path) -> list[str]:
    if argv[1:2] != ["cards"]:
        return argv
    # cards go to the scratch directory, not beside the shipped pool
    return _set(_set(argv, "--per-domain", "2"), "--out", str(tmp / "cards.json"))


SHRINK: dict[str, Callable[[list[str], Path], list[str]]] = {
    "ab": shrink_ab,
    "pool": shrink_pool,
    "eval": shrink_eval,
    "train": shrink_train,
    "sweep": shrink_sweep,
}


def runnable(cmd: DocCommand, tmp: Path) -> list[str]:
    shrink = SHRINK.get(cmd.subcommand)
    return shrink(list(cmd.argv), tmp) if shrink else list(cmd.argv)


COMMANDS = doc_commands(DOCS, ROOT)
SLOW = [c for c in COMMANDS if (why := real_models(c)) is not None and why.slow]


def _id(cmd: DocCommand) -> str:
    return f"{cmd.source}:{cmd.line}:{' '.join(cmd.argv)[:60]}"


@pytest.mark.parametrize("cmd", COMMANDS, ids=_id)
def test_doc_command_runs_on_the_simulator(
    cmd: DocCommand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = real_models(cmd)
    if why is not None:
        pytest.skip(f"not in the fast run: {why.reason}" + ("; runs in the slow suite" if why.slow else ""))
    monkeypatch.chdir(tmp_path)  # anything written to a relative path lands in the scratch directory
    monkeypatch.setenv("COLUMNS", "200")
    if "my-pool.yaml" in cmd.text:  # docs/pools.md: a user's own pool file, a renamed copy of sim-paper
        shipped = (ROOT / "agents" / "sim-paper.yaml").read_text(encoding="utf-8")
        (tmp_path / "my-pool.yaml").write_text(shipped.replace("name: sim-paper", "name: my-pool", 1))
    assert main(runnable(cmd, tmp_path)) == 0, cmd.text


@pytest.mark.slow
@pytest.mark.parametrize("cmd", SLOW, ids=_id)
def test_doc_command_runs_on_real_models(
    cmd: DocCommand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("llama_cpp")
    monkeypatch.chdir(tmp_path)
    assert main(runnable(cmd, tmp_path)) == 0, cmd.text


def test_the_documents_show_the_main_commands() -> None:
    """The extraction finds what the README shows (a broken extractor must not pass vacuously)."""
    subcommands = {c.subcommand for c in COMMANDS}
    assert {"pool", "run", "eval", "train", "quickstart"} <= subcommands
    assert ("train", "pool=sim-paper", "suite=mix-paper", "lam=0.2") in {c.argv for c in COMMANDS}
    assert sum(real_models(c) is None for c in COMMANDS) >= 5


def test_every_skip_is_listed_with_a_reason_and_matches_a_shown_command() -> None:
    for pattern, why in NEEDS_REAL_MODELS:
        assert why.reason
        assert any(re.search(pattern, " ".join(c.argv)) for c in COMMANDS), f"stale entry {pattern}"


# --------------------------------------------------------------------------- repository files the docs name

# a script, benchmark or study runner of this repository, as documents and docstrings name them
_REPO_FILE = re.compile(r"\b((?:scripts|benchmarks|experiments/[\w-]+)/[\w-]+\.py)\b")


def test_every_script_and_benchmark_named_exists() -> None:
    """A moved file leaves no stale path behind: every ``scripts/*.py``, ``benchmarks/*.py`` and
    ``experiments/<study>/*.py`` that README.md, docs/, experiments/ or the package names exists."""
    sources = [*DOCS, *sorted((ROOT / "puppeteer").rglob("*.py"))]
    named = {(src, m) for src in sources for m in _REPO_FILE.findall(src.read_text(encoding="utf-8"))}
    assert len({m for _, m in named}) >= 10  # the pattern finds what the documents show
    missing = sorted(f"{src.relative_to(ROOT)} names {m}" for src, m in named if not (ROOT / m).is_file())
    assert not missing


# messages of the installed package that may name a repository file, with why (none today: the doc writers
# that named their own runner moved out of the package, into experiments/)
REPO_FILE_MESSAGES: dict[tuple[str, str], str] = {}


def _messages(path: Path) -> Iterator[tuple[int, str]]:
    """The string constants of a module that are not docstrings (messages, help, written text)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_no_message_of_the_package_names_a_file_a_pip_user_lacks() -> None:
    """Errors and help name commands (``puppeteer pool calibrate``), not scripts/ or benchmarks/ files,
    which a pip install does not have; docstrings may cite a benchmark as the source of a figure."""
    found = {
        (path.relative_to(ROOT).as_posix(), name, line)
        for path in sorted((ROOT / "puppeteer").rglob("*.py"))
        for line, text in _messages(path)
        for name in _REPO_FILE.findall(text)
    }
    unexplained = sorted(
        f"{p}:{line} names {name}" for p, name, line in found if (p, name) not in REPO_FILE_MESSAGES
    )
    assert not unexplained
    stale = set(REPO_FILE_MESSAGES) - {(p, name) for p, name, _ in found}
    assert not stale, f"no longer named, remove from REPO_FILE_MESSAGES: {sorted(stale)}"


@pytest.mark.parametrize(
    "script",
    [
        "experiments/baselines-local/baselines_table.py",
        "experiments/local-experiment/local_experiment.py",
        "experiments/sim-study/sim_study.py",  # imports experiments/_shared/study.py
    ],
)
def test_study_runners_still_run(script: str) -> None:
    """Study runners answer ``--help``: their imports (sibling and experiments/_shared modules) resolve
    when started as scripts."""
    done = subprocess.run(
        [sys.executable, str(ROOT / script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")


# --------------------------------------------------------------------------- the extractor itself


def test_extractor_handles_prompts_chains_comments_and_multiline_quotes(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "Run `puppeteer pool list` first, then the `puppeteer quickstart` job.\n\n"
        "```bash\n"
        "pip install x && puppeteer eval --n 3   # a comment\n"
        "$ puppeteer run --workflow 'model_id=[0]\n"
        'subtasks=["a b"]\' "What is 2?"\n'
        "puppeteer train \\\n"
        "  lam=0.2\n"
        "```\n\n"
        "```python\nimport puppeteer  # not a command\n```\n"
    )
    assert [c.argv for c in commands_in(doc)] == [
        ("pool", "list"),
        ("quickstart",),
        ("eval", "--n", "3"),
        ("run", "--workflow", 'model_id=[0]\nsubtasks=["a b"]', "What is 2?"),
        ("train", "lam=0.2"),
    ]
    assert [c.line for c in commands_in(doc)] == [1, 1, 4, 5, 7]


def test_shrinking_replaces_sizes_and_keeps_the_rest(tmp_path: Path) -> None:
    cmd = DocCommand(("train", "-m", "lam=0,0.1", "trainer.episodes=1000"), "x.md", 1)
    argv = runnable(cmd, tmp_path)
    assert argv[:2] == ["train", "-m"] and "lam=0,0.1" in argv
    assert "trainer.episodes=8" in argv and "trainer.episodes=1000" not in argv
    assert not any(a.startswith("suite.") for a in argv)  # default sizes are part of what is tested
    ev = runnable(DocCommand(("eval", "--pool", "sim-paper", "--n", "100"), "x.md", 1), tmp_path)
    assert ev[ev.index("--n") + 1] == "4" and "--quiet" in ev
