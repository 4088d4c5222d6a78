"""Each export format taken by its own tool as it is, with the lines docs/shipping.md shows, run
as written: Accelerate's plugin, ``accelerate launch`` with the YAML, ``torch.compile`` with the
torch file's keywords, ``model.generate`` with the transformers file, ``generate_batch`` and
``init_continuous_batching`` with the continuous-batching file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from autotune.ship import formats
from autotune.ship.export import export
from autotune.storage import Store
from autotune.strategy import Strategy
from tests.helpers import point

ROOT = Path(__file__).resolve().parents[2]
PICK = Strategy.create("full", "aot_eager", dynamic=False)
PRELUDE = """
import torch, transformers
torch.manual_seed(0)
config = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2)
model = transformers.LlamaForCausalLM(config).eval()
input_ids = torch.randint(0, 512, (1, 8))
"""
TRAIN = """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(torch.nn.Linear(4, 4))
print("prepared", type(model).__name__, accelerator.state.dynamo_plugin.backend.value)
"""


def blocks(kind: str) -> list[str]:
    """The ``kind`` code blocks of shipping.md's section on the export formats, as written."""
    page = (ROOT / "docs" / "shipping.md").read_text()
    section = page.split("## The export formats, as each tool takes them")[1].split("\n## ")[0]
    return re.findall(rf"```{kind}\n(.*?)```", section, re.S)


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A study whose pick is full/aot_eager, exported in each JSON format under the names
    the docs use."""
    store = Store(f"sqlite:///{tmp_path}/s.db")
    spec = {"model": {"name": "toy-64"}, "policy": "fastest"}
    store.add_study("s", spec, {"torch": torch.__version__})
    store.add_measurement("s", "none", 0, point(Strategy.create("none"), 0.0, 10.0))
    store.add_measurement("s", PICK.key, 1, point(PICK, 1.0, 5.0))
    for fmt, name in (("accelerate", "best.json"), ("torch", "best.torch.json"),
                      ("transformers", "best.transformers.json")):  # fmt: skip
        export(store, "s", "fastest", fmt, str(tmp_path / name))
    return tmp_path


def run(code: str, folder: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=folder, timeout=300, env={**os.environ, **(env or {})})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_each_python_example_runs_as_written(study: Path) -> None:
    accelerate, compiled, generate, plain, continuous = blocks("python")
    out = run(PRELUDE + accelerate + "\nprint(type(model).__name__, "
              "accelerator.state.dynamo_plugin.backend.value)", study)  # fmt: skip
    assert out.split() == ["OptimizedModule", "AOT_EAGER"], out
    out = run(PRELUDE + compiled + "\nprint(type(model).__name__, model(input_ids).logits.shape)",
              study)  # fmt: skip
    assert out.startswith("OptimizedModule torch.Size([1, 8, 512])"), out
    out = run(PRELUDE + generate + "\nprint(out.shape[1], generation_config.cache_implementation,"
              " generation_config.compile_config.backend)", study)  # fmt: skip
    assert out.split() == ["16", "static", "aot_eager"], out
    out = run(PRELUDE + plain + "\nprint(type(generation_config.compile_config).__name__, "
              "generation_config.compile_config.dynamic)", study)  # fmt: skip
    assert out.split() == ["CompileConfig", "False"], out
    served = study / "continuous"  # a continuous study's export, under the name the docs use
    served.mkdir()
    pick = Strategy.create(backend="eager", batching="q=32+kv=512+tokens=64")
    block = {"strategy": pick.to_dict(), "continuous": {"num_blocks": 8}}
    (served / "best.json").write_text(formats.render(pick, "continuous-batching", block, [], ""))
    given = "prompts = [[1, 2, 3], [4, 5, 6, 7]]\nprompt_ids = [8, 9, 10]\n"
    out = run(PRELUDE + given + continuous + "\nprint(len(outputs), len(result.generated_tokens),"
              " config.q_padding_interval_size)", served)  # fmt: skip
    assert out.split() == ["2", "32", "32"], out


@pytest.mark.slow
@pytest.mark.parametrize("merged", [False, True])
def test_the_yaml_launches_with_accelerate_as_written(study: Path, merged: bool) -> None:
    """The two lines, study name and storage filled in: ``accelerate launch`` takes the file
    as it is and the script sees the pick's backend. Merged into a user's default config (with
    a setting of their own and a dynamo_config of NO), their setting stays and the section is
    the pick's."""
    [lines] = blocks("bash")
    export_line, launch_line = lines.strip().splitlines()
    hf = study / "hf"
    if merged:
        (hf / "accelerate").mkdir(parents=True)
        (hf / "accelerate" / "default_config.yaml").write_text(
            "compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nmixed_precision: 'no'\n"
            "num_processes: 1\nuse_cpu: true\nmain_training_function: main\n"
            "dynamo_config:\n  dynamo_backend: 'NO'\n"
        )  # fmt: skip
    (study / "train.py").write_text(TRAIN)
    env = {"HF_HOME": str(hf), "AUTOTUNE_STORAGE": f"sqlite:///{study}/s.db",
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    env = {**os.environ, **env}
    done = subprocess.run(export_line.replace("NAME", "s"), shell=True, cwd=study,
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((study / "accelerate.yaml").read_text())
    assert config["dynamo_config"]["dynamo_backend"] == "AOT_EAGER"
    assert config["distributed_type"] == "NO" and config["use_cpu"] is True
    assert ("main_training_function" in config) == merged
    assert ("merged into" in (study / "accelerate.yaml").read_text()) == merged
    done = subprocess.run(launch_line, shell=True, cwd=study, capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "prepared OptimizedModule AOT_EAGER" in done.stdout, done.stdout
