"""Stage 6, what leaves: the export formats (:mod:`.export`) and an exported file read on the
machine that uses it (:mod:`.exported`)."""
