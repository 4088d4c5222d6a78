"""Stage 4, from measurements to one answer: the objectives and policies (:mod:`.objectives`),
selection (pure: the scale, the sign test, the front; :mod:`.selection`), the confirmation of the
pick (:mod:`.confirm`) and the verdict in words (:mod:`.verdict`)."""
