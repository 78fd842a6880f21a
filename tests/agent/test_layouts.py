"""Checkpoint layouts as the frameworks write them: which checkpoint a restart resumes from.

Each tree is laid out as the framework's own source writes it (the source is named beside each);
the ones whose files' contents matter are written by torch itself (``torch.save``, torch DCP).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kit.agents import agent, agent_argv, read_events
from kit.cli import run_hacfg

from hacfg.agent.checkpoints import choose, newest_complete


def files(folder: Path, *names: str) -> Path:
    """``folder`` with the files ``names`` (paths relative to it) in it."""
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"\0")
    return folder


# megatron.core.dist_checkpointing writes DCP's files, its common state and its config.
TORCH_DIST = (".metadata", "__0_0.distcp", "__1_0.distcp", "common.pt", "metadata.json")


def test_nemo_checkpoints_are_ordered_by_their_step_field(tmp_path):
    # NeMo's megatron_gpt configs name saves '{val_loss:.2f}-{step}-{consumed_samples}'; Lightning
    # inserts the field names; a distributed checkpoint is a folder (NeMo 1), and save_last keeps a -last copy.
    for name in (
        "megatron_gpt--val_loss=2.45-step=1000-consumed_samples=64000.0",
        "megatron_gpt--val_loss=2.31-step=2000-consumed_samples=128000.0",
        "megatron_gpt--val_loss=2.31-step=2000-consumed_samples=128000.0-last",
    ):
        files(tmp_path / name, *TORCH_DIST)
    found = newest_complete(tmp_path)
    assert (found.step, found.path.name) == (2000, "megatron_gpt--val_loss=2.31-step=2000-consumed_samples=128000.0")


def test_nemo_2_weights_count_and_an_unfinished_marker_is_honoured(tmp_path):
    # NeMo 2 (nemo/lightning/ckpt_utils.py): weights/ holds the DCP checkpoint, context/ the config;
    # ModelCheckpoint touches '<name>-unfinished' before a save and removes it once every rank is done.
    done = "llama3_8b--val_loss=2.31-step=2000-consumed_samples=128000.0"
    saving = "llama3_8b--val_loss=2.20-step=3000-consumed_samples=192000.0"
    for name in (done, saving):
        files(tmp_path / name, *(f"weights/{f}" for f in TORCH_DIST), "context/io.json", "context/model.yaml")
    files(tmp_path, f"{saving}-unfinished")
    assert newest_complete(tmp_path).path == tmp_path / done
    (tmp_path / f"{saving}-unfinished").unlink()
    assert newest_complete(tmp_path).path == tmp_path / saving


def test_megatron_resumes_what_its_tracker_names_not_a_newer_torch_dist_folder(tmp_path):
    # megatron/training/checkpointing.py: iter_{:07d}/; the tracker is rewritten once the save is done.
    files(tmp_path / "iter_0000100", *TORCH_DIST)
    files(tmp_path / "iter_0000200", *TORCH_DIST)  # DCP's .metadata is there; the tracker has not moved
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")
    assert newest_complete(tmp_path).path == tmp_path / "iter_0000100"
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("200")
    assert newest_complete(tmp_path).path == tmp_path / "iter_0000200"
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("300")  # its folder removed: Megatron would stop
    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    assert choose(tmp_path) == (None, (f"{tracker} names '300', whose folder iter_0000300 is not there: no checkpoint is resumed",))


def test_megatron_legacy_and_release_folders(tmp_path):
    files(tmp_path / "iter_0000100", "mp_rank_00/model_optim_rng.pt", "mp_rank_01/model_optim_rng.pt")
    files(tmp_path / "iter_0000200", "mp_rank_00/model_optim_rng.pt")  # rank 1 still saving
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100\n")
    assert newest_complete(tmp_path).path == tmp_path / "iter_0000100"
    files(tmp_path / "release", "mp_rank_00/model_optim_rng.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("release")
    assert newest_complete(tmp_path).path == tmp_path / "release"


# deepspeed/runtime/engine.py: a ZeRO save's model and optimizer states per rank, under the tag.
DEEPSPEED = ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt")


def test_deepspeed_latest_that_dangles_falls_back_to_the_newest_saved_before_it_with_a_doubt(tmp_path):
    files(tmp_path / "global_step100", *DEEPSPEED)
    files(tmp_path / "global_step200", *DEEPSPEED)
    files(tmp_path / "global_step400", "zero_pp_rank_0_mp_rank_00_optim_states.pt")  # being saved after latest's
    (tmp_path / "latest").write_text("global_step300")  # its folder removed by a clean-up script
    found, doubts = choose(tmp_path)
    assert found.path == tmp_path / "global_step200"
    assert doubts == (f"{tmp_path / 'latest'} names 'global_step300', which is not there: {found.path} is resumed",)
    (tmp_path / "latest").write_text("global_step100")
    assert choose(tmp_path) == (newest_complete(tmp_path), ())
    assert newest_complete(tmp_path).path == tmp_path / "global_step100"
    (tmp_path / "latest").write_text("global_step50")  # nothing saved before it: said, not silent
    assert choose(tmp_path) == (None, (f"{tmp_path / 'latest'} names 'global_step50', which is not there: no checkpoint is resumed",))


@pytest.mark.slow
def test_the_agent_says_so_when_deepspeeds_latest_dangles(tmp_path):
    ckpt = tmp_path / "ckpt"
    files(ckpt / "global_step200", *DEEPSPEED)
    (ckpt / "latest").write_text("global_step300")
    argv = [*agent_argv(tmp_path / "state", "--checkpoint-path", str(ckpt)), sys.executable, "-c",
            "import os; print(os.environ['HACFG_RESUME_FROM'])"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.stdout == f"{ckpt}/global_step200\n"
    assert f"[hacfg] {ckpt}/latest names 'global_step300', which is not there" in result.stderr
    (doubt,) = [e for e in read_events(tmp_path / "state") if e["event"] == "checkpoint_doubt"]
    assert (doubt["resume_from"], doubt["detail"].split(",")[0]) == (f"{ckpt}/global_step200", f"{ckpt}/latest names 'global_step300'")
    shown = run_hacfg("events", tmp_path / "state" / "events.jsonl").out
    assert f"checkpoint_doubt  {ckpt}/latest names 'global_step300', which is not there" in shown


def test_lightning_checkpoint_files_are_read_by_their_step_field(tmp_path):
    # Lightning's ModelCheckpoint: filename '{epoch}-{step}' by default, '-v1' when a name is taken.
    files(tmp_path, "epoch=1-step=2000.ckpt", "epoch=2-step=3000-v1.ckpt", "epoch=3.ckpt")  # no step field: no step
    found = newest_complete(tmp_path)
    assert (found.step, found.path) == (3000, tmp_path / "epoch=2-step=3000-v1.ckpt")


def test_lightning_deepspeed_strategy_folders_are_complete_once_latest_is_written(tmp_path):
    # Lightning's DeepSpeedStrategy.save_checkpoint: deepspeed_engine.save_checkpoint(filepath, tag="checkpoint").
    files(tmp_path / "epoch=2-step=3000.ckpt", "latest", *(f"checkpoint/{f}" for f in DEEPSPEED))
    (tmp_path / "epoch=2-step=3000.ckpt" / "latest").write_text("checkpoint")
    files(tmp_path / "epoch=3-step=4000.ckpt", *(f"checkpoint/{f}" for f in DEEPSPEED))  # latest not written yet
    assert newest_complete(tmp_path).path == tmp_path / "epoch=2-step=3000.ckpt"


def test_two_layouts_saving_the_same_step_is_a_doubt(tmp_path):
    files(tmp_path / "checkpoint-300", "model.safetensors", "trainer_state.json")
    files(tmp_path / "step_300", "state.pt", ".complete")
    found, doubts = choose(tmp_path)
    assert found.step == 300
    other = ({tmp_path / "checkpoint-300", tmp_path / "step_300"} - {found.path}).pop()
    assert doubts == (f"step 300 is saved by more than one layout: {found.path} is resumed ({found.layout}), not {other}",)


# A folder whose name two layouts can claim is judged by each rule that can apply to it: torch DCP's
# (any numbered folder) beside the layout that names it. One test per such pair.
DCP = (".metadata", "__0_0.distcp", "__1_0.distcp")  # FileSystemWriter: each rank's data, then .metadata


def test_step_n_holding_a_dcp_save_is_complete_as_dcp_defines_it(tmp_path):
    files(tmp_path / "step_200", *DCP)  # dcp.save(state, checkpoint_id="ckpt/step_200"): no .complete
    files(tmp_path / "step_300", *DCP[1:])  # killed before .metadata
    found, doubts = choose(tmp_path)
    assert (found.path, found.layout, doubts) == (tmp_path / "step_200", "torch-dcp", ())
    files(tmp_path / "step_300", ".complete")  # save_step's marker: complete by its rule
    assert newest_complete(tmp_path).path == tmp_path / "step_300"


def test_a_folder_complete_by_two_rules_is_one_checkpoint_not_a_doubt(tmp_path):
    files(tmp_path / "step_300", *DCP, ".complete")  # save_step around dcp.save
    found, doubts = choose(tmp_path)
    assert (found.path, doubts) == (tmp_path / "step_300", ())


def test_checkpoint_n_holding_a_dcp_save_is_complete_and_trainers_index_is_not_enough(tmp_path):
    files(tmp_path / "checkpoint-900", "model.safetensors", "trainer_state.json")
    files(tmp_path / "step_1200", *DCP)
    assert newest_complete(tmp_path).path == tmp_path / "step_1200"
    files(tmp_path / "checkpoint-1500", *DCP)  # a DCP save named as Trainer names its own
    assert newest_complete(tmp_path).path == tmp_path / "checkpoint-1500"
    # Trainer._save: the sharded model and its index first, trainer_state.json last
    files(tmp_path / "checkpoint-1800", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
          "model.safetensors.index.json")
    assert newest_complete(tmp_path).path == tmp_path / "checkpoint-1500"


def test_megatrons_iter_folders_are_its_trackers_even_with_dcps_metadata(tmp_path):
    files(tmp_path / "iter_0000100", *TORCH_DIST)  # the first save, its tracker not yet written
    found, doubts = choose(tmp_path)
    assert found is None and doubts == (
        f"checkpoint folders under {tmp_path} exist but none is complete: iter_0000100 (megatron: no "
        "latest_checkpointed_iteration.txt names it, which Megatron writes once the iteration is saved): "
        "the attempt starts from scratch",
    )


def test_deepspeeds_global_step_folders_are_its_latests_even_with_dcps_metadata(tmp_path):
    files(tmp_path / "global_step100", *DEEPSPEED, ".metadata")
    assert newest_complete(tmp_path) is None  # no latest: DeepSpeed would start from nothing
    (tmp_path / "latest").write_text("global_step100")
    assert newest_complete(tmp_path).path == tmp_path / "global_step100"


def test_a_nemo_folder_being_saved_is_not_complete_for_its_dcp_metadata(tmp_path):
    saving = "megatron_gpt--val_loss=2.20-step=3000-consumed_samples=192000.0"
    files(tmp_path / saving, *TORCH_DIST)  # NeMo 1: DCP's files at the top, .metadata among them
    files(tmp_path, f"{saving}-unfinished")
    found, doubts = choose(tmp_path)
    assert found is None and f"{saving} (model-checkpoint: {saving}-unfinished lies beside it" in doubts[0]


def test_when_no_folder_is_complete_each_is_named_with_what_it_lacks_newest_first(tmp_path):
    files(tmp_path / "step_300", "__0_0.distcp")  # judged by save_step's rule and DCP's
    files(tmp_path / "checkpoint-200", "model.safetensors")
    found, doubts = choose(tmp_path)
    assert found is None and doubts == (
        f"checkpoint folders under {tmp_path} exist but none is complete: step_300 (step_N: no .complete "
        "marker, which save_step writes last; torch-dcp: no .metadata, which DCP writes once every rank's data "
        "is saved), checkpoint-200 (checkpoint-N: no trainer_state.json, which Trainer writes last; torch-dcp: "
        "no .metadata, which DCP writes once every rank's data is saved): the attempt starts from scratch",
    )
    for step in range(1, 8):
        (tmp_path / f"step_{step}").mkdir()
    (doubt,) = choose(tmp_path)[1]
    assert doubt.count("(step_N: ") == 4 and doubt.endswith(" and 4 more: the attempt starts from scratch")


@pytest.mark.slow
def test_the_agent_says_which_folders_are_not_complete_before_it_starts_from_scratch(tmp_path):
    ckpt = tmp_path / "ckpt"
    files(ckpt / "step_300", "__0_0.distcp")
    argv = [*agent_argv(tmp_path / "state", "--checkpoint-path", str(ckpt)), sys.executable, "-c",
            "import os; print(os.environ.get('HACFG_RESUME_FROM') or 'nothing')"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.stdout == "nothing\n"
    said = f"[hacfg] checkpoint folders under {ckpt} exist but none is complete: step_300 (step_N: no .complete"
    assert said in result.stderr
    events = read_events(tmp_path / "state")
    (doubt,) = [e for e in events if e["event"] == "checkpoint_doubt"]
    assert doubt["resume_from"] is None and doubt["detail"] in result.stderr
    assert events.index(doubt) < next(i for i, e in enumerate(events) if e["event"] == "attempt_start")


def test_hugging_face_trainer_is_complete_once_trainer_state_is_written(tmp_path):
    # transformers' Trainer._save_checkpoint: model, optimizer, scheduler, RNG state, then trainer_state.json.
    files(tmp_path / "checkpoint-500", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json")
    files(tmp_path / "checkpoint-1000", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth")
    assert newest_complete(tmp_path).path == tmp_path / "checkpoint-500"


def lightning_checkpoint(path: Path, epoch: int, step: int, sharded: bool = False) -> None:
    """What Lightning's ``dump_checkpoint`` saves (trainer/connectors/checkpoint_connector.py), through
    torch.save; ``sharded``: its unsharded part, as megatron.core.dist_checkpointing keeps it in common.pt."""
    torch = pytest.importorskip("torch")
    checkpoint = {
        "epoch": epoch,
        "global_step": step,
        "pytorch-lightning_version": "2.5.0",
        "state_dict": {"layer.weight": torch.zeros(2, 2)},
        "loops": {"fit_loop": {"epoch_loop.state_dict": {"_batches_that_stepped": step}}},
        "callbacks": {},
        "optimizer_states": [{"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]}],
        "lr_schedulers": [],
    }
    if sharded:
        del checkpoint["state_dict"], checkpoint["optimizer_states"]
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, path)


@pytest.mark.slow
@pytest.mark.torch
def test_lightning_last_ckpt_carries_its_step_inside(tmp_path):
    lightning_checkpoint(tmp_path / "epoch=1-step=2000.ckpt", 1, 2000)
    lightning_checkpoint(tmp_path / "epoch=2-step=3000.ckpt", 2, 3000)
    lightning_checkpoint(tmp_path / "last.ckpt", 2, 3500)  # save_last=True: a copy at every save
    found = newest_complete(tmp_path)
    assert (found.step, found.path) == (3500, tmp_path / "last.ckpt")
    (tmp_path / "last.ckpt").unlink()
    (tmp_path / "last.ckpt").symlink_to("epoch=2-step=3000.ckpt")  # save_last="link"
    assert newest_complete(tmp_path).step == 3000


@pytest.mark.slow
@pytest.mark.torch
def test_torch_dcp_and_torchtitan_step_folders(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    state = {"model": {"weight": torch.arange(4.0)}, "step": 10}
    dcp.save(state, checkpoint_id=tmp_path / "step-10")  # torchtitan: checkpoints/step-N
    dcp.save(state, checkpoint_id=tmp_path / "step-20")
    (tmp_path / "step-20" / ".metadata").unlink()  # as a save killed before FileSystemWriter.finish leaves it
    assert newest_complete(tmp_path).path == tmp_path / "step-10"
    dcp.save(state, checkpoint_id=tmp_path / "iter_0000030")  # Megatron's, and no tracker names it
    assert newest_complete(tmp_path).path == tmp_path / "step-10"
    dcp.save(state, checkpoint_id=tmp_path / "step_40")  # named as save_step names its own, without its marker
    assert newest_complete(tmp_path).path == tmp_path / "step_40"


@pytest.mark.slow
@pytest.mark.torch
def test_nemo_2_default_names_without_a_step_are_ordered_by_the_step_they_hold(tmp_path):
    # nemo/lightning/nemo_logger.py under MegatronStrategy: '{name}--{monitor:.4f}-{epoch}-{consumed_samples}'.
    for samples, step in ((64000, 1000), (128000, 2000)):
        folder = files(tmp_path / f"default--reduced_train_loss=2.3100-epoch=0-consumed_samples={samples}.0", *(f"weights/{f}" for f in TORCH_DIST))
        lightning_checkpoint(folder / "weights" / "common.pt", 0, step, sharded=True)
    found = newest_complete(tmp_path)
    assert (found.step, found.path.name) == (2000, "default--reduced_train_loss=2.3100-epoch=0-consumed_samples=128000.0")


# MindSpore (mindspore/train/callback/_checkpoint.py, ModelCheckpoint._save_ckpt): '<prefix>-<epoch>_<step in
# epoch>.ckpt', '<prefix>-graph.meta' beside them, one folder per rank; serialization.py's _exec_save writes
# '<name>.tmp' and renames it once written.


def test_mindspore_checkpoints_are_ordered_by_epoch_then_step_and_complete_on_every_rank(tmp_path):
    for rank in range(4):
        files(tmp_path / f"rank_{rank}", "net-graph.meta", "net-1_500.ckpt", "net-1_1000.ckpt", "net-2_500.ckpt")
    for rank in range(3):
        files(tmp_path / f"rank_{rank}", "net-2_1000.ckpt")
    files(tmp_path / "rank_3", "net-2_1000.tmp")  # rank 3 is still writing epoch 2's last step
    found, doubts = choose(tmp_path)
    assert (found.path, found.step, found.layout, doubts) == (tmp_path / "rank_0" / "net-2_500.ckpt", 500, "mindspore", ())
    (tmp_path / "rank_3" / "net-2_1000.tmp").rename(tmp_path / "rank_3" / "net-2_1000.ckpt")
    assert newest_complete(tmp_path).path == tmp_path / "rank_0" / "net-2_1000.ckpt"
    (tmp_path / "rank_2" / "net-2_1000.ckpt").unlink()  # keep_checkpoint_max removed it on one rank only
    assert newest_complete(tmp_path).path == tmp_path / "rank_0" / "net-2_500.ckpt"


def test_a_mindspore_tmp_is_never_resumed_and_says_what_it_waits_for(tmp_path):
    files(tmp_path / "rank_0", "net-1_32.ckpt", "net-1_64.tmp")
    files(tmp_path / "rank_1", "net-1_32.tmp")
    found, doubts = choose(tmp_path)
    assert found is None and doubts == (
        f"checkpoint folders under {tmp_path} exist but none is complete: net-1_64.tmp (mindspore: rank_0 has "
        "only net-1_64.tmp, a save not finished; rank_1 has none of it), net-1_32.ckpt (mindspore: rank_1 has only "
        "net-1_32.tmp, a save not finished): the attempt starts from scratch",
    )


def test_mindspore_safetensors_and_single_folder_saves(tmp_path):
    # CheckpointConfig(format="safetensors") goes through the same _exec_save: '.safetensors' for '.tmp'.
    files(tmp_path / "rank_0", "llama-1_100.safetensors", "llama-1_200.safetensors")
    files(tmp_path / "rank_1", "llama-1_100.safetensors", "llama-1_200.tmp")
    assert newest_complete(tmp_path).path == tmp_path / "rank_0" / "llama-1_100.safetensors"
    single = files(tmp_path / "single", "CKP-3_10.ckpt", "CKP-3_20.tmp", "CKP-graph.meta")
    assert newest_complete(single).path == single / "CKP-3_10.ckpt"


def test_mindspore_prefix_numbered_by_a_later_run_and_the_breakpoint_file(tmp_path):
    # _chg_ckpt_file_name_if_same_exist: a prefix already used in the folder becomes 'net_1', 'net_2'...
    files(tmp_path / "rank_0", "net-2_32.ckpt", "net_1-2_32.ckpt", "net_1-2_16.ckpt")
    assert newest_complete(tmp_path).path == tmp_path / "rank_0" / "net_1-2_32.ckpt"
    assert choose(tmp_path)[1] == ()  # the same epoch and step of an earlier run is no rival
    # exception_save (mindspore/train/model.py): '<prefix>-<epoch>_<step in epoch>_breakpoint.ckpt' as training raised
    files(tmp_path / "rank_0", "net-2_40_breakpoint.ckpt")
    assert newest_complete(tmp_path).path == tmp_path / "rank_0" / "net-2_40_breakpoint.ckpt"


def test_mindspore_rank_folders_are_no_dcp_checkpoints(tmp_path):
    # a rank folder's number is a rank: torch DCP's rule (a numbered folder of .safetensors) does not judge it
    files(tmp_path / "rank_0", "net-1_1.tmp", "model.safetensors")
    (doubt,) = choose(tmp_path)[1]
    assert "torch-dcp" not in doubt and "(mindspore: rank_0 has only net-1_1.tmp" in doubt


@pytest.mark.slow
def test_every_mindspore_rank_resumes_its_own_file_and_a_new_epoch_is_progress(tmp_path):
    ckpt = tmp_path / "ckpt"
    result = agent(tmp_path, "--max-restarts", "10", "--unconditional", "--checkpoint-path", str(ckpt),
                   child="mindspore_ranks.py", args=(ckpt, 6))
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stdout.splitlines() if line.startswith("attempt")]
    assert said[:4] == [
        "attempt 1 resumed - saved net-1_1",
        f"attempt 2 resumed {ckpt}/rank_0/net-1_1.ckpt saved net-1_2",
        f"attempt 3 resumed {ckpt}/rank_0/net-1_2.ckpt saved net-1_3",
        f"attempt 4 resumed {ckpt}/rank_0/net-1_3.ckpt saved net-2_1",
    ]
    # five unconditional restarts, more than 3 in a row: epoch 2's step 1 is progress after epoch 1's step 3
    assert len(said) == 6
