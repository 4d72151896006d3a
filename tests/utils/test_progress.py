from __future__ import annotations

import io

from rich.console import Console

from puppeteer.utils.progress import LineSchedule, ProgressReporter


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=200), out


def test_not_a_terminal_writes_a_line_every_n_items_and_a_last_line() -> None:
    console, out = plain_console()
    clock = FakeClock()
    with ProgressReporter(
        "train", 100, console=console, schedule=LineSchedule(every_n=25, every_s=1e9), clock=clock
    ) as bar:
        for i in range(1, 91):
            clock.now += 1.0
            bar.update(advance=1, info=f"return {i / 100:.2f}")
    lines = out.getvalue().splitlines()
    assert [line.split(" ")[1] for line in lines] == ["25/100", "50/100", "75/100", "90/100"]
    assert lines[0] == "train: 25/100 (25%) 0:00:25 elapsed, ~0:01:15 left | return 0.25"
    assert lines[-1].startswith("train: 90/100 (90%) 0:01:30 elapsed, ~0:00:10 left")


def test_not_a_terminal_writes_a_line_after_every_s_seconds_even_between_item_marks() -> None:
    console, out = plain_console()
    clock = FakeClock()
    bar = ProgressReporter(
        "eval", 1000, console=console, schedule=LineSchedule(every_n=500, every_s=30.0), clock=clock
    ).start()
    for done in range(1, 11):
        clock.now += 10.0  # slow items: 10 s each
        bar.update(done)
    bar.stop()
    lines = out.getvalue().splitlines()
    assert [line.split(" ")[1] for line in lines] == ["3/1000", "6/1000", "9/1000", "10/1000"]


def test_a_fast_job_writes_only_its_last_line() -> None:
    console, out = plain_console()
    clock = FakeClock()
    with ProgressReporter("eval", 100, console=console, clock=clock) as bar:
        for done in range(1, 101):
            clock.now += 0.01
            bar.update(done, info="acc 0.500")
    assert out.getvalue() == "eval: 100/100 (100%) 0:00:01 elapsed | acc 0.500\n"


def test_default_schedule_is_a_twentieth_of_the_total() -> None:
    assert LineSchedule().items(3000) == 150
    assert LineSchedule().items(7) == 1
    assert LineSchedule(every_n=3).items(3000) == 3


def test_disabled_reporter_writes_nothing_but_counts() -> None:
    console, out = plain_console()
    with ProgressReporter("x", 5, console=console, enabled=False) as bar:
        bar.update(advance=5)
    assert out.getvalue() == "" and bar.completed == 5


def test_terminal_draws_a_rich_bar_and_no_plain_lines() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with ProgressReporter("train", 4, console=console) as bar:
        for _ in range(4):
            bar.update(advance=1, info="acc 0.500")
    text = out.getvalue()
    assert "\x1b[" in text and "4/4" in text and "acc 0.500" in text
    assert "elapsed" not in text  # the plain-line format is for non-terminals only


def test_no_estimate_of_the_time_left_from_the_first_items_alone() -> None:
    """One episode of 65,536 done after 77 s (the start-up and a whole first batch of calls) is no rate:
    the line says it is estimating; from a fiftieth of the items on it extrapolates."""
    console, _ = plain_console()
    clock = FakeClock()
    bar = ProgressReporter("train", 65536, console=console, clock=clock).start()
    clock.now += 77.0
    bar.update(1)
    assert bar.line() == "train: 1/65536 (0%) 0:01:17 elapsed, estimating time left"
    clock.now += 23.0
    bar.update(65536 // 50)  # 1,310 episodes in 100 s
    # 100 s / 1,310 episodes x 64,226 to go = 4,903 s
    assert bar.line() == "train: 1310/65536 (2%) 0:01:40 elapsed, ~1:21:43 left"
    bar.stop()
