"""Entry points remembered between runs: the same answer as importlib.metadata, and never a stale one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import entry_points as installed

from kit.packaging import distribution

from hacfg.plugin.entrypoints import entry_points

PROBE = """
import json, sys
from hacfg.plugin.entrypoints import entry_points
found = [[e.name, e.value, e.distribution, e.version] for e in entry_points("hacfg")]
print(json.dumps({"found": found, "metadata_imported": "importlib.metadata" in sys.modules}))
"""


def probe(tmp_path, site):
    """Run in tmp_path: ``-c`` puts the working folder on the path, and the repository's egg-info
    there changes whenever another test builds the wheel, which rightly misses the cache."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(site)}
    result = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True, cwd=tmp_path)
    return json.loads(result.stdout)


def names(found):
    return sorted(name for name, *_ in found)


def test_the_same_entry_points_as_importlib_metadata_in_the_same_order(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    expected = [(e.name, e.value, e.dist.name if e.dist else None) for e in installed(group="hacfg")]
    for _ in range(2):  # the scan, then the cache
        assert [(e.name, e.value, e.distribution) for e in entry_points("hacfg")] == expected
    assert list((tmp_path / "cache" / "hacfg").iterdir())


def test_a_second_run_reads_the_cache_without_importing_importlib_metadata(tmp_path):
    site = tmp_path / "site"
    distribution(site, "extra-rules", {"extra": "extra_rules"})
    first, second = probe(tmp_path, site), probe(tmp_path, site)
    assert first["metadata_imported"] and not second["metadata_imported"]
    assert first["found"] == second["found"]
    assert ["extra", "extra_rules", "extra-rules", "1.0"] in second["found"]


def test_installing_editing_and_removing_a_distribution_is_seen_at_once(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    before = names(probe(tmp_path, site)["found"])
    dist = distribution(site, "extra-rules", {"extra": "extra_rules"})
    assert names(probe(tmp_path, site)["found"]) == sorted([*before, "extra"])
    (dist / "entry_points.txt").write_text("[hacfg]\nextra = extra_rules\nmore = more_rules\n")  # edited in place
    assert names(probe(tmp_path, site)["found"]) == sorted([*before, "extra", "more"])
    shutil.rmtree(dist)
    assert names(probe(tmp_path, site)["found"]) == before


def test_an_unwritable_or_corrupt_cache_costs_a_scan_not_an_error(tmp_path):
    site = tmp_path / "site"
    distribution(site, "extra-rules", {"extra": "extra_rules"})
    (tmp_path / "cache").write_text("a file where the cache directory would be")
    assert "extra" in names(probe(tmp_path, site)["found"])
    (tmp_path / "cache").unlink()
    probe(tmp_path, site)
    for cache in (tmp_path / "cache" / "hacfg").iterdir():
        cache.write_text("{not json")
    again = probe(tmp_path, site)
    assert again["metadata_imported"] and "extra" in names(again["found"])


def test_a_scripts_own_folder_on_the_path_makes_no_cache_file_of_its_own(tmp_path):
    """Every job's script runs from a folder of its own, first on the path: one cache serves them all."""
    site = tmp_path / "site"
    distribution(site, "extra-rules", {"extra": "extra_rules"})
    for job in ("job-a", "job-b", "job-c"):
        (tmp_path / job).mkdir()
        env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": f"{tmp_path / job}:{site}"}
        subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, check=True, cwd=tmp_path / job)
    assert len(list((tmp_path / "cache" / "hacfg").iterdir())) == 1
