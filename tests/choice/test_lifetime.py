"""A lifetime that means the same on a CPU and a GPU: the default is an hour of serving at eager's
measured latency (``amortized:1h``), resolved to calls when the pick is made; ``amortized:CALLS``
works as before. And the eager baseline's own "speedup" (eager timed against itself) reads as
the noise floor it is, wherever a study shows it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.choice.objectives import lifetime, parse_policy
from autotune.choice.selection import candidates, pick
from autotune.choice.verdict import excluded_summary, exclusions, verdict
from autotune.cli import main
from autotune.cli.report import summary
from autotune.errors import ConfigError
from autotune.search import Search, open_search, run
from autotune.trial.measurement import Measurement
from tests.helpers import S, fast_spec, point, stored

FAST, SLOW = 5.0, 500.0  # eager's latency (ms): a GPU's call, and a CPU's


def _rows(eager_ms: float, compiled_ms: float, compile_s: float) -> list:
    """Eager, and one compiled strategy (A) that is faster but compiles for ``compile_s``."""
    return [stored("none", 0, point(S["none"], 0.0, eager_ms, eager_ms)),
            stored(S["A"].key, 1, point(S["A"], compile_s, compiled_ms, eager_ms))]  # fmt: skip


def test_the_default_lifetime_is_an_hour_of_serving_at_eager_s_latency() -> None:
    from autotune.choice.selection import lifetime_calls

    assert lifetime(None) == "amortized:1h" and lifetime(500) == "amortized:500"
    assert fast_spec().policy == "amortized:1h" and fast_spec(calls=500).policy == "amortized:500"
    assert parse_policy("amortized:1h") == ("serving", (3600.0,))
    assert parse_policy("amortized:30min") == ("serving", (1800.0,))
    assert parse_policy("amortized:10000") == ("amortized", (10000.0,))  # calls, as before
    fast, slow = candidates(_rows(FAST, 4.0, 60.0)), candidates(_rows(SLOW, 400.0, 60.0))
    assert lifetime_calls("amortized:1h", fast) == pytest.approx(720_000)
    assert lifetime_calls("amortized:1h", slow) == pytest.approx(7_200)
    assert lifetime_calls("amortized:10000", fast) == 10_000
    assert lifetime_calls("knee", fast) is None


def test_a_compile_that_pays_within_an_hour_of_fast_serving_is_chosen() -> None:
    rows = _rows(FAST, 4.0, 60.0)  # 1 ms saved a call pays a 60 s compile after 60,000 calls
    points = candidates(rows)
    left = excluded_summary(exclusions(rows))
    assert pick(points, "amortized:10000").key == "none"  # 50 s of serving: never pays
    said = verdict(pick(points, "amortized:10000"), points, left, "amortized:10000")
    assert "over 10,000 calls the pick costs 50.0 s" in said and "of serving" not in said
    chosen = pick(points, "amortized:1h")  # 720,000 calls: 60 s + 2,880 s against 3,600 s
    assert chosen.key == S["A"].key
    said = verdict(chosen, points, left, "amortized:1h")
    assert said.startswith(f"compile with {S['A'].key}: 1.25x eager")
    assert "over 1 h of serving (720,000 calls at 5 ms) the pick costs 2940.0 s" in said
    assert "660.0 s less than eager" in said
    assert f"compiling {S['A'].key} pays after 60,000 calls (5 min of serving)" in said
    slow = candidates(_rows(SLOW, 400.0, 60.0))  # 7,200 calls of 100 ms saved: it pays too
    assert pick(slow, "amortized:1h").key == S["A"].key
    slower = candidates(_rows(SLOW, 490.0, 180.0))  # 10 ms saved: 72 s in an hour < 180 s
    assert pick(slower, "amortized:1h").key == "none"


POSITIVE = "the numbers must be finite and positive"
NOT_A_TIME = "is not a number of calls or a time (1h, 30min, 3600s)"


@pytest.mark.parametrize(("bad", "why"), [
    ("amortized:0h", POSITIVE), ("amortized:-1h", POSITIVE), ("amortized:infh", POSITIVE),
    ("amortized:xh", NOT_A_TIME), ("amortized:h", NOT_A_TIME), ("amortized:1ms", NOT_A_TIME),
    ("amortized:1h:2", "amortized:CALLS (or TIME) and latency-budget:MS take a number"),
])  # fmt: skip
def test_a_bad_lifetime_is_refused_in_one_line(
    bad: str, why: str, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_policy(bad)
    assert "\n" not in str(refused.value) and f"bad policy {bad!r}: " in str(refused.value)
    assert why in str(refused.value)
    assert main(["export", "--study", "any", "--policy", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err


@pytest.fixture(scope="module")
def small_study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Search, str]]:
    """A real toy-64 study: eager and two compiled strategies, the default policy."""
    folder = tmp_path_factory.mktemp("lifetime")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AUTOTUNE_STUDIES", str(folder / "studies"))  # its caches go there
        url = f"sqlite:///{folder}/t.db"
        search = open_search(fast_spec(trials=3, granularity="none,full"), url)
        run(search)
    yield search, url


def test_a_real_study_s_verdict_states_its_lifetime_in_serving_time(
    small_study: tuple[Search, str], capsys: pytest.CaptureFixture[str]
) -> None:
    search, url = small_study
    assert main(["show", "--study", search.name, "--storage", url]) == 0
    out = capsys.readouterr().out
    eager = next(Measurement.from_dict(r.payload) for r in search.store.measurements(search.name)
                 if r.key == "none")  # fmt: skip
    assert eager.latency is not None
    calls = 3600e3 / eager.latency.median_ms
    assert f"; over 1 h of serving ({calls:,.0f} calls at " in out


def test_the_eager_baseline_shows_its_self_comparison_as_the_noise_floor(
    small_study: tuple[Search, str], capsys: pytest.CaptureFixture[str]
) -> None:
    search, url = small_study
    rows = search.store.measurements(search.name)
    eager = Measurement.from_dict(next(r.payload for r in rows if r.key == "none"))
    assert eager.ok and eager.speedup
    noise = f"±{abs(eager.speedup - 1):.1%}"
    assert main(["show", "--study", search.name, "--storage", url]) == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("none ")]
    _, state, _, speedup, why = re.split(r"\s{2,}", row)
    assert state == "eager baseline" and speedup == f"noise {noise}"  # not "1.08x"
    assert why.startswith(f"noise floor {noise} (eager against itself: {eager.speedup:.2f}x)")
    shown = summary(eager)
    assert f"-> noise floor {noise} (eager against itself: {eager.speedup:.2f}x)" in shown
    assert "speedup" not in shown
    from autotune.dashboard.data import load
    from autotune.dashboard.figures import hover

    data = load(search.store, search.name)
    assert f"noise floor {noise}" in hover(data.trial("none"))
    compiled = next(t for t in data.trials if t.key != "none" and t.measurement.speedup)
    assert "vs eager in the same process" in hover(compiled)  # a compiled one: a speedup
