"""ModelArts flavor ids read for their accelerator, card count and chip: one place, hacfg.scenario.modelarts.

Each id is one ModelArts uses, with where it was read:
- SDK: huaweicloudsdkmodelarts SpecResource.flavor_id examples (schemas/modelarts-training-job.schema.json);
- ascend.md: /work/shared/reference/ascend.md §4 (the dedicated Ascend pool's id);
- mindspore/xihe: the Xihe platform's training form (a MindSpore community site on ModelArts), which shows each
  id beside its display name ("GPU:1*NVIDIA-V100(32GB)", "Ascend: 8*Ascend 910(32GB)");
- notebook API: ModelArts' "query switchable notebook flavors" response example (id, npu count, billing code);
- public code: ids in repositories driving ModelArts (Lite Server notes naming 8snt9b2 and 4snt9b1 nodes with
  their ASCEND_VISIBLE_DEVICES, terraform's resource-pool docs, the ModelArts SDK's PoolResource docstring).
"""

from __future__ import annotations

import pytest

from hacfg.scenario.modelarts import Flavor, accelerator_of, read_flavor

FLAVORS = {
    # dedicated pools: the pool decides GPU or Ascend; 16xlarge only on Ascend supernodes (SDK)
    "modelarts.pool.visual.xlarge": Flavor(None, 1, None, None),
    "modelarts.pool.visual.2xlarge": Flavor(None, 2, None, None),
    "modelarts.pool.visual.4xlarge": Flavor(None, 4, None, None),
    "modelarts.pool.visual.8xlarge": Flavor(None, 8, None, None),
    "modelarts.pool.visual.16xlarge": Flavor("npu", 16, None, "910"),
    # Ascend pools and Lite bare metal: the count right before the chip (ascend.md; public code)
    "modelarts.pool.visual.npu.8snt9b3.d": Flavor("npu", 8, "snt9b3", "910"),
    "modelarts.bm.npu.arm.8snt9b2.d": Flavor("npu", 8, "snt9b2", "910"),
    "modelarts.bm.npu.arm.4snt9b1": Flavor("npu", 4, "snt9b1", "910"),
    "modelarts.bm.npu.arm.8snt9b3.i6l.d.c004": Flavor("npu", 8, "snt9b3", "910"),  # terraform: a pool's flavor
    "modelarts.bm.arm.24u.192g.npu.1d910b": Flavor("npu", 1, "d910b", "910"),  # 24 vCPUs, 192 GB, 1 x 910B
    # Ascend 910 by family, N cards (mindspore/xihe: "Ascend: 8*Ascend 910(32GB)" is kat1.8xlarge.public)
    "modelarts.kat1.xlarge": Flavor("npu", 1, None, "910"),
    "modelarts.kat1.8xlarge": Flavor("npu", 8, None, "910"),
    "modelarts.kat1.8xlarge.public": Flavor("npu", 8, None, "910"),
    "modelarts.bm.snt9.xlarge.8": Flavor("npu", 8, None, "910"),  # notebook API: npu 8
    "modelarts.bm.snt9.xlarge.2": Flavor("npu", 2, None, "910"),  # notebook API: npu 2
    # GPUs (mindspore/xihe: "GPU:1*NVIDIA-V100(32GB)" is p3.large.public, 8 of them p3.8xlarge.public)
    "modelarts.p3.large.public": Flavor("gpu", 1, None, None),
    "modelarts.p3.8xlarge.public": Flavor("gpu", 8, None, None),
    "modelarts.p3.large.public.free": Flavor("gpu", 1, None, None),
    "modelarts.bm.gpu.8v100": Flavor("gpu", 8, "v100", None),
    # public GPU flavors name no count: the scenario says it (job.cards)
    "modelarts.vm.gpu.v100": Flavor("gpu", None, None, None),
    "modelarts.vm.gpu.t4u8": Flavor("gpu", None, None, None),
    "modelarts.vm.gpu.tnt004": Flavor("gpu", None, None, None),
    "modelarts.vm.gpu.p4u8.container": Flavor("gpu", None, None, None),
    # CPU: no cards, whatever the vCPU count
    "modelarts.vm.cpu.2u": Flavor("cpu", None, None, None),
    "modelarts.vm.cpu.8u": Flavor("cpu", None, None, None),
}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_flavor_id_names_its_cards(flavor):
    assert read_flavor(flavor) == FLAVORS[flavor]
    assert accelerator_of(flavor) == FLAVORS[flavor].accelerator  # one reading, wherever hacfg asks


@pytest.mark.parametrize("flavor", ["", "custom", "modelarts.vm.cpu.2u.1", "modelarts.vm.gpu.free"])
def test_an_id_that_names_nothing_says_nothing(flavor):
    assert read_flavor(flavor).cards is None
