"""Stage 2, what a later start costs and what is shipped for it: warm and portable starts
(:mod:`.later`), the compile-cache artefact (:mod:`.artifact`), and the starts that skip the
compiler, precompiled and AOTInductor (:mod:`.precompiled`, whose loaded artefact is an
:class:`Precompiled`). Which starts there are is the basics' table, :mod:`autotune.start_kinds`."""

from __future__ import annotations

from autotune.starts.precompiled import Precompiled

__all__ = ["Precompiled"]
