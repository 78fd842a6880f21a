"""The plugin's own tests, written with hacfg's rule test kit (a pytest plugin)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hacfg.plugin import Policy, PrecheckContext, PrecheckSettings
from hacfg.testing import check_rule_catalogue, fixtures_for
from hacfg_plugin_ascend import CannToolkit, operator_retry_needs_pytorch_full_card

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("fixture", fixtures_for(FIXTURES), ids=lambda p: p.name)
def test_fixtures(hacfg_lint_fixture, fixture):
    hacfg_lint_fixture(fixture)


def test_catalogue():
    check_rule_catalogue([operator_retry_needs_pytorch_full_card], FIXTURES, id_pattern=r"ASC\d{3}")


def test_cann_toolkit(tmp_path):
    npu = Policy(accelerator="npu")
    assert CannToolkit().run(PrecheckContext(npu, PrecheckSettings(), {}))[0].status == "failed"
    toolkit = {"ASCEND_TOOLKIT_HOME": str(tmp_path / "ascend-toolkit" / "latest")}
    assert CannToolkit().run(PrecheckContext(npu, PrecheckSettings(), toolkit))[0].status == "failed"
    (tmp_path / "ascend-toolkit" / "latest").mkdir(parents=True)
    assert CannToolkit().run(PrecheckContext(npu, PrecheckSettings(), toolkit))[0].status == "passed"
    gpu = PrecheckContext(Policy(accelerator="gpu"), PrecheckSettings(), {})
    assert CannToolkit().run(gpu)[0].status == "skipped"
