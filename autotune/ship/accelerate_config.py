"""``--format accelerate-yaml``: a whole Accelerate config file, which ``accelerate launch
--config_file FILE script.py`` takes as it is.

Its ``dynamo_config`` section is the strategy (for one with Inductor options, the closest
expressible one: the file has no key for them). The rest is the user's own config where there
is one (``--merge FILE``, by default Accelerate's own default config file when it exists), its
``dynamo_config`` replaced; else a single machine's: one process, on the study's device.
``mixed_precision`` stays what it was (``no`` by default): Accelerate's ``bf16`` or ``fp16`` is
autocast over float32 weights, which is not what a study of a bfloat16 or float16 model
measured, so a comment says to cast the model instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.ship.formats import dynamo_section
from autotune.strategy import Strategy
from autotune.workload import Workload

SINGLE_MACHINE = {"compute_environment": "LOCAL_MACHINE", "debug": False,
                  "distributed_type": "NO", "mixed_precision": "no", "num_machines": 1,
                  "num_processes": 1, "machine_rank": 0}  # fmt: skip


def default_path() -> Path:
    """Accelerate's own default config file (``accelerate config`` writes it)."""
    from accelerate.commands.config.config_args import default_config_file

    return Path(default_config_file)


def base_config(merge: str | bool) -> tuple[dict[str, Any] | None, str]:
    """The config to merge into and where it came from: the file ``merge``, or (True)
    Accelerate's default config file where there is one, or (False) none. A file that is not
    a YAML mapping is refused in one line."""
    import yaml

    if merge is False:
        return None, ""
    path = Path(merge) if isinstance(merge, str) else default_path()
    if not isinstance(merge, str) and not path.is_file():
        return None, ""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read --merge {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--merge {path} is not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--merge {path} is not an Accelerate config (a YAML mapping)")
    return data, str(path)


def config_file(strategy: Strategy, notes: list[str], study: str, workload: Workload,
                merge: str | bool = True) -> str:  # fmt: skip
    """The whole config file (see the module's text), ``notes`` and what the merge changed as
    comments at its top."""
    import yaml

    where, dtype = workload.device, workload.dtype
    base, source = base_config(merge)
    config = dict(base) if base is not None else {**SINGLE_MACHINE, "use_cpu": where == "cpu"}
    config["dynamo_config"] = dynamo_section(strategy)
    said = [f"autotune: study {study}, strategy {strategy.key}"]
    said += [f"NOTE: {n}" for n in notes]
    if source:
        said.append(f"merged into {source}: its dynamo_config replaced, the rest as it was")
    if dtype != "float32":
        said.append(f"the study measured the model cast to {dtype} (model.to(torch.{dtype})): "
                    "cast it in your script; mixed_precision is autocast over float32 weights, "
                    "which was not measured")  # fmt: skip
    elif str(config.get("mixed_precision", "no")) != "no":
        said.append(f"mixed_precision {config['mixed_precision']} autocasts: the study measured "
                    "float32, without it")  # fmt: skip
    if base is not None and bool(config.get("use_cpu")) != (where == "cpu"):
        said.append(f"the study measured on {where}; this config runs "
                    f"{'on the CPU' if config.get('use_cpu') else 'on accelerators'}")  # fmt: skip
    head = "\n".join(f"# {line}" for line in said)
    return head + "\n" + yaml.safe_dump(config, sort_keys=False).rstrip("\n")
