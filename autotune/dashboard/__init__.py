"""The dashboard: one self-contained HTML page that shows which strategy to pick and why.

Data first, then figures: :mod:`.data` reads a study and computes each plot's data (pure,
testable), :mod:`.figures` draws it with Plotly, :mod:`.page` lays the page out and writes it.
"""

from __future__ import annotations

from autotune.dashboard.data import StudyData, load
from autotune.dashboard.page import render, write

__all__ = ["StudyData", "load", "render", "write"]
