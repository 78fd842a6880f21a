"""`hacfg lint` on a generated corpus of realistic scenario files, next to yamllint and check-jsonschema.

Run: python bench/lint_corpus.py [--files 500]. Targets: corpus lint <= 0.25x check-jsonschema;
cold one-file lint <= 0.85x yamllint; the same lint with the Ascend example plugin installed (its
rule and pre-check types come from ``hacfg.plugin``, as any plugin's do) <= 1.03x the lint without it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Timing, Verdict, compile_bytecode, ms, require, time_command, time_interleaved, verdicts_table

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = ("single-node", "multi-node", "llm-long-term")
CORPUS_TARGET = 0.25  # of check-jsonschema, which checks the same files against the committed schema
COLD_TARGET = 0.85  # of yamllint on the same file: a lint of one file is what a hook or an editor runs
# What any one-file lint on hacfg's stack pays before its own code: the interpreter, PyYAML, pluggy.
FLOOR = "import yaml, pluggy"
ASCEND = REPO / "examples" / "hacfg-plugin-ascend"
PLUGIN_TARGET = 1.03  # of the same lint with only hacfg's own plugins


def scenario_file(rng: random.Random, index: int) -> str:
    """A scenario file like teams write them: a preset plus their own job, checkpoints and budgets."""
    scenario = rng.choice(SCENARIOS)
    nodes = {"single-node": 1, "multi-node": rng.choice([2, 4, 8]), "llm-long-term": rng.choice([8, 16, 64])}[scenario]
    accelerator = rng.choice(["gpu", "gpu", "npu"])
    lines = [
        "# yaml-language-server: $schema=hacfg.schema.json",
        f"# Training job {index}: owned by team-{index % 17}",
        "version: 1",
        f"scenario: {scenario}",
        "job:",
        f"  name: job-{index:04d}-{scenario}",
        f"  nodes: {nodes}",
        f"  accelerator: {accelerator}",
        f"  network: {rng.choice(['infiniband', 'roce', 'ethernet'])}",
        f"  image: swr.example/team-{index % 17}/train:{rng.randint(1, 40)}.0",
        f"  command: bash /home/ma-user/code/run_{index}.sh --config conf/{scenario}.yaml",
        "  flavor: modelarts.pool.visual.8xlarge",
        f"  pool: pool-{rng.randint(1000, 9999)}",
        "  environment:",
        "    NCCL_DEBUG: INFO",
        f"    OMP_NUM_THREADS: {rng.choice([4, 8, 16])}",
        f"    DATA_DIR: /mnt/sfs/data/set-{index % 31}",
        "checkpoint:",
        f"  path: {rng.choice(['/mnt/sfs/ckpt', 'obs://bucket/ckpt', '/cache/ckpt'])}/job-{index}",
        f"  interval: {rng.choice(['15m', '30m', '1h', '3h'])}",
        f"  resume: {rng.choice(['true', 'true', 'false'])}",
        "restart:",
        f"  max: {rng.choice([2, 3, 5, 8, 16])}",
        f"  unconditional: {rng.choice(['true', 'false'])}",
        f"  on_hang: {rng.choice(['true', 'false'])}",
        "hang:",
        f"  timeout: {rng.choice(['5m', '20m', '30m', '45m'])}",
        f"precheck: {rng.choice(['true', 'true', 'false'])}",
    ]
    return "\n".join(lines) + "\n"


def verdicts(files: int = 500, repeat: int = 5) -> list[Verdict]:
    compile_bytecode()
    rng = random.Random(42)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        for i in range(files):
            (corpus / f"job{i:04d}.ha.yaml").write_text(scenario_file(rng, i))
        paths = sorted(str(p) for p in corpus.iterdir())
        schema = str(REPO / "schemas/hacfg.schema.json")
        yamllint, hacfg, checker = require("yamllint"), require("hacfg"), require("check-jsonschema")
        checker_timing = time_command(f"check-jsonschema ({files})", [checker, "--schemafile", schema, *paths], repeat=repeat)
        ours = time_command(f"hacfg lint ({files} files)", [hacfg, "lint", str(corpus)], repeat=repeat)
        # interleaved: a few percent either way is the verdict, and this machine's speed drifts more
        one_peer, one = time_interleaved({
            "yamllint FILE": ([yamllint, paths[0]], dict(os.environ)),
            "hacfg lint FILE": ([hacfg, "lint", paths[0]], dict(os.environ)),
        })
        floor = time_command("python: import yaml, pluggy", [sys.executable, "-c", FLOOR])
        with_plugin, without = plugin_cost(hacfg, paths[0], Path(tmp))
    corpus_ratio = ours.median / checker_timing.median
    cold_ratio = one.median / one_peer.median
    plugin_ratio = with_plugin.median / without.median
    return [
        Verdict(f"lint corpus, {files} files", ms(ours), f"check-jsonschema {ms(checker_timing)}", corpus_ratio, f"<= {CORPUS_TARGET}x", corpus_ratio <= CORPUS_TARGET),
        Verdict("cold lint, one file", ms(one), f"yamllint {ms(one_peer)}", cold_ratio, f"<= {COLD_TARGET}x yamllint", cold_ratio <= COLD_TARGET),
        Verdict("  floor: python, yaml, pluggy", ms(floor), f"yamllint {ms(one_peer)}", floor.median / one_peer.median, "(reference)", None),
        Verdict("cold lint, Ascend plugin", ms(with_plugin), f"without it {ms(without)}", plugin_ratio, f"<= {PLUGIN_TARGET}x without", plugin_ratio <= PLUGIN_TARGET),
    ]


def plugin_cost(hacfg: str, file: str, tmp: Path) -> tuple[Timing, Timing]:
    """``hacfg lint FILE`` with the Ascend example plugin installed, and with hacfg's own plugins only.

    The plugin is pip-installed into a folder on PYTHONPATH (unless this environment has it
    already); without it, the same command skips third-party entry points."""
    site = tmp / "site"
    site.mkdir()
    try:
        importlib.metadata.version("hacfg-plugin-ascend")
    except importlib.metadata.PackageNotFoundError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(ASCEND)], check=True)
    environment = {**os.environ, "PYTHONPATH": str(site)}
    listed = subprocess.run([hacfg, "rules"], env=environment, capture_output=True, text=True).stdout
    if "ASC101" not in listed:
        sys.exit(f"the Ascend example plugin does not load from {site}: hacfg rules lists no ASC101")
    with_plugin, without = time_interleaved({
        "hacfg lint FILE, Ascend plugin": ([hacfg, "lint", file], environment),
        "hacfg lint FILE, without it": ([hacfg, "lint", file], {**environment, "HACFG_DISABLE_PLUGIN_AUTOLOAD": "1"}),
    })
    return with_plugin, without


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(verdicts_table(verdicts(args.files, args.repeat)))


if __name__ == "__main__":
    main()
