"""Stage 6, what leaves: each format's fields for a strategy (:mod:`.formats`: Accelerate,
torch.compile, transformers), a study's choice written in one (:mod:`.export`), and an exported
file read on the machine that uses it (:mod:`.exported`)."""
