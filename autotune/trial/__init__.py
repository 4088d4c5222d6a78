"""Stage 3, one strategy measured: the parent (:mod:`.parent`) spawns a fresh child process
(:mod:`.process`, :mod:`.child`) that runs a scenario (:mod:`.scenarios`) and times it
(:mod:`.timing`), checks it against the study's reference (:mod:`.reference`,
:mod:`.accuracy`), reads Dynamo's records (:mod:`.metrics`, :mod:`.recompiles`) and answers
with a :class:`~autotune.trial.measurement.Measurement`. Two procedures run in a child beside
the scenarios: the confirmation's interleaved rounds (:mod:`.rounds`) and the study's
higher-precision reference (:mod:`.precise`)."""
