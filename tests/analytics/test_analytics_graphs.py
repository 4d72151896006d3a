from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analytics_fixtures import trajectory, write_eval_run, write_train_run

from puppeteer.analytics import graphs, load
from puppeteer.analytics.graph_report import build_report


@pytest.fixture()
def step_run(tmp_path: Path) -> Path:
    trajs = [
        trajectory("t0", ["A", "B", "A"], True),
        trajectory("t1", ["A", "A"], True),
        trajectory("t2", ["B"], False),
    ]
    return write_eval_run(tmp_path / "step", trajs)


def test_step_mode_graph_metrics_on_hand_built_episodes(step_run: Path) -> None:
    steps, eps = load(step_run, level="steps"), load(step_run)
    g = graphs.fold(steps)
    assert {(u, v): d["weight"] for u, v, d in g.edges(data=True)} == {
        ("A", "B"): 1,
        ("B", "A"): 1,
        ("A", "A"): 1,
    }
    m = graphs.metrics(steps, eps)
    assert m.density == pytest.approx(3 / 2)  # 3 edges over 2 * 1 ordered pairs (self-loops count)
    assert m.cycles[1] == 1 and m.cycles[2] == 1 and m.cycles[3] == 0
    assert m.mean_steps == pytest.approx(2.0)
    assert m.cyclic_fraction == pytest.approx(2 / 3)  # A->B->A and A->A come back; B alone does not
    assert m.accuracy == pytest.approx(2 / 3)
    assert m.distribution == pytest.approx({"A": 4 / 6, "B": 2 / 6})
    assert m.degree == {"A": 4.0, "B": 2.0}  # A: out 2 (incl. self-loop) + in 2; B: 1 + 1
    assert m.hub == "A" and sum(m.pagerank.values()) == pytest.approx(1.0)


def test_workflow_mode_uses_access_edges(tmp_path: Path) -> None:
    t = trajectory("w0", ["A", "B", "C"], True, mode="workflow", access=[[], [0], [0, 1]])
    run = write_eval_run(tmp_path / "wf", [t])
    g = graphs.fold(load(run, level="steps"))
    assert sorted(g.edges) == [("A", "B"), ("A", "C"), ("B", "C")]
    assert graphs.cycles_by_length(g) == {1: 0, 2: 0, 3: 0, 4: 0, 5: 0}
    assert graphs.episode_edges(["A", "B"], [[], []], "workflow") == []  # independent steps: no edges


def test_evolution_across_training_updates(tmp_path: Path) -> None:
    # updates 1-2: single agents (no cycles); updates 3-4: A -> B -> A every time
    early = [trajectory(f"e{i}", ["A"], False) for i in range(4)]
    late = [trajectory(f"l{i}", ["A", "B", "A"], True) for i in range(4)]
    run = write_train_run(tmp_path / "tr", early + late, batch_episodes=2)
    evo = graphs.evolution(load(run, level="steps"), load(run), n_bins=2)
    assert list(evo["checkpoint"]) == [2, 4]
    assert list(evo["cyclic_fraction"]) == [0.0, 1.0]
    assert list(evo["mean_steps"]) == [1.0, 3.0]
    assert list(evo["accuracy"]) == [0.0, 1.0]
    assert evo["density"].iloc[1] > evo["density"].iloc[0]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def test_html_report_is_self_contained(step_run: Path, tmp_path: Path) -> None:
    train = write_train_run(
        tmp_path / "tr",
        [trajectory(f"t{i}", ["A", "B"][: 1 + i % 2], True) for i in range(8)],
        batch_episodes=2,
    )
    report = build_report([step_run, train], tmp_path / "report")
    html = report.html.read_text()
    assert "<img" in html and "data:image/png;base64," in html
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", html)  # nothing fetched at view time
    for table_id in ("metrics", "paths", "distribution", "evolution"):
        assert f'id="{table_id}"' in html
    assert all(p.stat().st_size > 2000 for p in report.images)
    assert len(report.metrics) == 2
    evo = pd.read_csv(tmp_path / "report" / "evolution.csv")  # the numbers behind evolution.png
    assert evo["episodes"].sum() == 8  # every training episode, once, in order of its stretch
    assert evo["checkpoint"].is_monotonic_increasing


def _chromium_run(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )


def test_html_report_renders_in_headless_chromium(step_run: Path, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); CI installs it")
    from PIL import Image

    report = build_report([step_run], tmp_path / "report")
    url = report.html.resolve().as_uri()
    dom = _chromium_run(browser, "--dump-dom", url).stdout
    assert 'id="metrics"' in dom and "<td>" in dom and "density" in dom
    assert dom.count("data:image/png;base64,") >= 2
    shot = tmp_path / "shot.png"
    _chromium_run(browser, f"--screenshot={shot}", "--window-size=1200,2400", url)
    assert shot.exists()
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.std() > 10  # not a blank page
    # some of the orange edge colour of the graph drawing (#fb8500) is on screen
    rgb = np.asarray(Image.open(shot).convert("RGB"), dtype=int)
    orange = (abs(rgb[..., 0] - 0xFB) < 30) & (abs(rgb[..., 1] - 0x85) < 40) & (rgb[..., 2] < 60)
    assert orange.sum() > 50


def test_agent_names_with_dollar_signs_are_drawn_as_written(tmp_path: Path) -> None:
    """Issue 33: an agent named with `$` started matplotlib's math mode and broke `graph` with a
    multi-line parse error."""
    trajs = [trajectory("t0", ["cheap$bot", "A"], True), trajectory("t1", ["$x$", "cheap$bot"], False)]
    run = write_eval_run(tmp_path / "dollar", trajs)
    report = build_report([run], tmp_path / "report")
    assert all(p.stat().st_size > 2000 for p in report.images)
    assert "cheap$bot" in report.html.read_text()


def _boxes_overlap(a: object, b: object) -> bool:
    return bool(a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1)  # type: ignore[attr-defined]


@pytest.mark.parametrize("n_agents", [3, 8, 12])
def test_graph_labels_of_a_large_pool_cover_no_node_and_no_other_label(n_agents: int) -> None:
    """Issue 33: node labels were drawn on the nodes' centres, so the long names of a large pool
    ran into each other and into the nodes. Each label's box on the rendered figure must be clear
    of every other label and every node."""
    import matplotlib.pyplot as plt
    import networkx as nx

    from puppeteer.analytics.graph_report import graph_figure

    names = [f"qwen{i}.5b-program-of-thought" for i in range(n_agents)]
    g = nx.DiGraph()
    for i, n in enumerate(names):
        g.add_node(n, activations=10 + i)
        g.add_edge(n, names[(i + 1) % n_agents], weight=1 + i)
    fig = graph_figure(g, "a pool with long agent names")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    ax = fig.axes[0]
    labels = [t for t in ax.texts if (t.get_gid() or "").startswith("label:")]
    assert len(labels) == n_agents
    label_boxes = [t.get_window_extent(renderer) for t in labels]
    nodes = ax.collections[0]  # the node circles, drawn first
    # each node's marker is centred on its offset; its radius in display units from its area (points^2)
    offsets = nodes.get_offset_transform().transform(nodes.get_offsets())
    radii = np.sqrt(np.asarray(nodes.get_sizes()) / np.pi) * fig.dpi / 72.0
    assert len(offsets) == len(radii) == n_agents
    for i, a in enumerate(label_boxes):
        for b in label_boxes[i + 1 :]:
            assert not _boxes_overlap(a, b), (a, b)
        for (cx, cy), r in zip(offsets, radii, strict=True):
            # the nearest point of the label's box to the node's centre lies outside the node
            nx_ = min(max(cx, a.x0), a.x1)
            ny_ = min(max(cy, a.y0), a.y1)
            assert np.hypot(nx_ - cx, ny_ - cy) > r
    fig_box = fig.bbox
    assert all(b.x0 >= fig_box.x0 - 1 and b.x1 <= fig_box.x1 + 1 for b in label_boxes)  # nothing cut off
    plt.close(fig)


def test_html_report_keeps_a_wide_table_inside_a_narrow_window(step_run: Path, tmp_path: Path) -> None:
    """Issue 33: the metrics table is wider than a narrow window; it scrolls in its own box and the
    page itself does not overflow sideways (measured in headless Chromium)."""
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); CI installs it")
    report = build_report([step_run], tmp_path / "report")
    probe = (
        "<script>const t=document.getElementById('metrics');"
        "document.body.setAttribute('data-page',document.documentElement.scrollWidth);"
        "document.body.setAttribute('data-view',window.innerWidth);"
        "document.body.setAttribute('data-table',t.scrollWidth);</script></body>"
    )
    page = tmp_path / "probe.html"
    page.write_text(report.html.read_text().replace("</body>", probe))
    dom = _chromium_run(browser, "--window-size=420,900", "--dump-dom", page.resolve().as_uri()).stdout
    got = {k: int(v) for k, v in re.findall(r'data-(page|view|table)="(\d+)"', dom)}
    assert set(got) == {"page", "view", "table"}, dom[:500]
    assert got["table"] > got["view"]  # the table really is wider than the window
    assert got["page"] <= got["view"]  # and the page does not scroll sideways because of it
