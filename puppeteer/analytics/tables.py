"""Tables of evaluation results: a one-run summary (label, value) and the markdown comparison table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from puppeteer.evaluation.results import EvalResult


def _fmt_num(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1e6 or abs(x) < 1e-3:
        return f"{x:.2e}"
    return f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.0f}"


def summary_rows(result: EvalResult) -> list[tuple[str, str]]:
    """(label, value) pairs for a one-run summary."""
    rows = [
        ("policy", result.policy),
        ("pool / backends", f"{result.pool} / {', '.join(result.backends)}"),
        ("suite / split", f"{result.suite} / {result.split}  (n={result.n}, seed={result.seed})"),
        (
            "accuracy",
            f"{result.accuracy:.3f}  [{result.ci_low:.3f}, {result.ci_high:.3f}] 95% Wilson"
            f"  ({result.correct}/{result.n})",
        ),
        ("errors / unparsable", f"{result.n_errors} / {result.n_parse_errors}"),
        ("mean calls", f"{result.mean_calls:.2f}"),
        (
            "mean tokens (prompt + completion)",
            f"{result.mean_prompt_tokens:.0f} + {result.mean_completion_tokens:.0f}",
        ),
        ("mean USD", f"{result.mean_usd:.5f}"),
        ("mean FLOPs", _fmt_num(result.mean_flops)),
        *(
            [("single-stream model s", f"{result.mean_model_s:.1f} at the pool's declared speeds")]
            if result.mean_model_s is not None
            else []
        ),
        ("wall time", f"{result.wall_s:.1f} s"),
    ]
    if result.cache_hits is not None:
        rows.append(("cache hits / misses", f"{result.cache_hits} / {result.cache_misses}"))
    if not result.completed:
        rows.append(("completed", "NO (interrupted)"))
    return rows


MARKDOWN_HEADER = (
    "| policy | suite | n | accuracy (95% CI) | calls | tokens (prompt+completion) | USD | "
    "model s/item | single-stream s/item | truncated | tool calls | wall s | backend | cache hits/misses |\n"
    "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
)


def markdown_row(r: EvalResult) -> str:
    cache = f"{r.cache_hits}/{r.cache_misses}" if r.cache_hits is not None else "-"
    errors = f" ({r.n_errors} errors)" if r.n_errors else ""
    single = f"{r.mean_model_s:.1f}" if r.mean_model_s is not None else "-"
    policy = r.policy.replace("|", "\\|")  # a pipe would end the table cell, even inside backticks
    return (
        f"| `{policy}` | {r.suite}/{r.split} | {r.n} | {r.accuracy:.3f} "
        f"[{r.ci_low:.3f}, {r.ci_high:.3f}]{errors} | {r.mean_calls:.2f} | "
        f"{r.mean_prompt_tokens:.0f}+{r.mean_completion_tokens:.0f} | {r.mean_usd:.5f} | "
        f"{r.mean_latency_s:.1f} | {single} | {r.truncated_rate:.0%} | {r.tool_call_rate:.0%} | "
        f"{r.wall_s:.1f} | {', '.join(r.backends)} | {cache} |"
    )


def markdown_table(results: Sequence[EvalResult]) -> str:
    return "\n".join([MARKDOWN_HEADER, *(markdown_row(r) for r in results)])
