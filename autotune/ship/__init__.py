"""Stage 6, what leaves: the export formats (:mod:`.export`), an exported file read on the
machine that uses it (:mod:`.exported`), applied to a model (:mod:`.apply`), and a preflight of
its artefacts (:mod:`.preflight`)."""
