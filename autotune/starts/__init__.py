"""Stage 2, what a later start costs and what is shipped for it: warm and portable starts
(:mod:`.later`), the compile-cache artefact (:mod:`.artifact`), and the starts that skip the
compiler, precompiled and AOTInductor (:mod:`.precompiled`)."""
