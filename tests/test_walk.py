"""tools/walk.py, the walk of the code from ``cmd_search``: its counts on a tiny package written
here, and a smoke run over this checkout."""

from __future__ import annotations

from pathlib import Path

from tools.walk import walk

ROOT = Path(__file__).resolve().parent.parent

MODULES = {
    "__init__.py": "",
    "cli/__init__.py": "",
    "cli/search.py": (
        "from autotune.job import run\n"
        "\n"
        "\n"
        "def cmd_search(args):\n"
        "    from autotune.job.run import Job  # a lazy import\n"
        "\n"
        "    job = Job.open(args)  # Job.open, then Job.__init__ through cls(...)\n"
        "    job.go()  # a local typed by Job.open's return annotation\n"
        "    args.unknown()  # skipped: of unknown type\n"
        "    helper()  # reached already, from errors.fail\n"
        "    run.finish(job)  # through the module imported at the top\n"
        "\n"
        "\n"
        "def helper():\n"
        "    return 1\n"
        "\n"
        "\n"
        "def unused():\n"
        "    return 2\n"
    ),
    "job/__init__.py": "",
    "job/run.py": (
        "from __future__ import annotations\n"
        "\n"
        "\n"
        "class Job:\n"
        "    def __init__(self, args):\n"
        "        self.args = args\n"
        "\n"
        "    @classmethod\n"
        "    def open(cls, args) -> Job:\n"
        "        return cls(args)\n"
        "\n"
        "    def go(self):\n"
        "        self.step()\n"
        "\n"
        "    def step(self):\n"
        "        from autotune import errors\n"
        "\n"
        "        errors.fail()\n"
        "\n"
        "\n"
        "def finish(job, time_budget_s=0.0):\n"
        "    return job\n"
    ),
    "errors.py": (
        "def fail():  # no time_budget here, but said\n"
        "    from autotune.cli.search import helper\n"
        "\n"
        "    return helper()  # a climb: a top-level module calls the front end\n"
    ),
}


def test_the_walk_counts_stays_rooms_climbs_and_returns(tmp_path: Path) -> None:
    for name, text in MODULES.items():
        path = tmp_path / "autotune" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    found = walk(tmp_path)
    assert found.order == [
        ("autotune.cli.search:cmd_search", 0),
        ("autotune.job.run:Job.open", 1),
        ("autotune.job.run:Job.__init__", 2),
        ("autotune.job.run:Job.go", 1),
        ("autotune.job.run:Job.step", 2),
        ("autotune.errors:fail", 3),
        ("autotune.cli.search:helper", 4),
        ("autotune.job.run:finish", 1),
    ]
    # rooms in order: cli.search, job.run, errors, cli.search (a return), job.run (a return)
    assert (found.stays, found.rooms, found.returns) == (8, 3, 2)
    assert found.climbs == [("autotune.errors:fail", "autotune.cli.search:helper")]
    assert found.budget_files == 2  # a parameter in job/run.py, a comment in errors.py
    assert found.line() == (
        "walk from cmd_search: 8 stays in 3 rooms, 1 climbs back up, 2 returns to a room "
        "already left; time_budget in 2 files"
    )


def test_the_walk_goes_through_this_checkout() -> None:
    found = walk(ROOT)
    assert found.order[0] == ("autotune.cli.search:cmd_search", 0)
    assert found.rooms >= 10
