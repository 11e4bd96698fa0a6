"""tests/run_layers.py (what `make test` runs): the layers' junit XML read back, the time per layer, per group and
the slowest tests, the budget's warnings and the closing line CI reads.

The junit XML is pytest's own, written by a real pytest run of a small test file (so the reader follows pytest's
format, not a guess of it), with a conftest that records each test's group as tests/conftest.py does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests"))
import run_layers  # noqa: E402

SAMPLE = '''
import time, pytest

@pytest.fixture(scope="module")
def slow_setup():
    time.sleep(0.3)

def test_passes(slow_setup):
    pass

def test_fails():
    assert 1 == 2

@pytest.mark.skip(reason="shown as skipped")
def test_skipped():
    pass
'''
CONFTEST = '''
def pytest_collection_modifyitems(items):
    for item in items:
        item.user_properties.append(("group", item.module.__name__))
'''


@pytest.fixture(scope="module")
def junit(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("junit")
    (d / "test_sample.py").write_text(SAMPLE)
    (d / "conftest.py").write_text(CONFTEST)
    out = d / "layer.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                    f"--junitxml={out}", str(d / "test_sample.py")], cwd=d, capture_output=True, text=True)
    return out


def test_pytests_junit_is_read_with_outcomes_times_and_groups(junit):
    cases = {c["name"].rsplit("::", 1)[-1]: c for c in run_layers.read_junit(junit)}
    assert {k: c["outcome"] for k, c in cases.items()} == {"test_passes": "passed", "test_fails": "failed",
                                                           "test_skipped": "skipped"}
    # the module fixture's setup is charged to the first test that uses it
    assert cases["test_passes"]["time"] >= 0.3 and cases["test_fails"]["time"] < 0.3
    assert {c["group"] for c in cases.values()} == {"test_sample"}


def test_the_summary_warns_over_budget_and_ends_with_the_counts(junit):
    cases = run_layers.read_junit(junit)
    fast = {"name": "fast", "markers": "not e2e", "workers": 2, "target_s": 120}
    e2e = {"name": "e2e", "markers": "e2e", "workers": 2, "target_s": 100}
    lines = run_layers.summary([(fast, 80.0, cases, 1), (e2e, 130.0, cases[:1], 0)],
                               {"target_s": 2100, "limit_s": 2400}, 2200.0)
    text = "\n".join(lines)
    assert "WARNING: layer e2e took 130 s, over its target of 100 s" in text
    assert "WARNING: layer fast" not in text
    assert "WARNING: .ci/run took 2200 s, over its target of 2100 s" in text
    assert '"test_sample" = ' in text  # the group table budget.toml's group_cost_s takes
    slowest = text.split("slowest tests", 1)[1].splitlines()[1]
    assert slowest.endswith("test_passes")
    assert lines[-1] == "total: 2 passed, 1 failed, 1 skipped"


def test_the_committed_budget_names_every_layer_field():
    budget = run_layers.load_budget()
    assert [layer["name"] for layer in budget["layer"]] == ["fast", "e2e"]
    assert budget["layer"][0]["target_s"] <= 120 and budget["ci"]["limit_s"] <= 2400


def test_a_layer_without_a_target_is_named(tmp_path):
    bad = tmp_path / "budget.toml"
    bad.write_text('[[layer]]\nname = "fast"\nmarkers = "x"\nworkers = 2\n')
    with pytest.raises(SystemExit, match=r"budget.toml: \[\[layer\]\] number 1 has no 'target_s'"):
        run_layers.load_budget(bad)


def test_groups_follow_modules_and_split_the_container_tests_by_runtime():
    """The node IDs pytest itself collects for the container tests (parametrized by runtime, plus two that are not):
    one group per runtime and the rest in the module's own; every other module is its own group."""
    from conftest import group_of

    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "tests/test_containers.py", "tests/test_run_layers.py"], cwd=ROOT, capture_output=True,
                         text=True).stdout
    ids = [line for line in out.splitlines() if "::" in line]
    groups = {}
    for nodeid in ids:
        groups.setdefault(group_of(nodeid), []).append(nodeid.split("::", 1)[1])
    assert set(groups) == {"test_containers[podman]", "test_containers[docker]", "test_containers", "test_run_layers"}
    strip = lambda names, rt: sorted(n.replace(f"[{rt}]", "") for n in names)  # noqa: E731
    assert strip(groups["test_containers[podman]"], "podman") == strip(groups["test_containers[docker]"], "docker")
    assert all("podman" not in n and "docker" not in n for n in groups["test_containers"])


def test_launches_are_counted_once_by_id_and_only_those_of_this_run(tmp_path):
    """A campaign's launches.jsonl, its copy (MLflow's artifact) and the H100 run's records a fast test copies
    (tests/data/gpu, started 2026-12-07 on the lent GPU): the run's own launches once each, the records not at all."""
    import json
    import shutil
    import time

    recorded = ROOT / "tests" / "data" / "gpu" / "results" / "arms" / "main_rs_on" / "launches.jsonl"
    old = [json.loads(line) for line in recorded.read_text().splitlines()]
    assert any(e["event"] == "start" for e in old)
    (tmp_path / "copied" / "arms" / "main_rs_on").mkdir(parents=True)
    shutil.copy(recorded, tmp_path / "copied" / "arms" / "main_rs_on" / "launches.jsonl")
    now = time.time()
    ours = [{"event": "start", "launch_id": f"id{i}", "started": now + i, "argv": argv}
            for i, argv in enumerate(["python -m specrepro_cpu_launch --model-path m",
                                      "python tests/standin/sglang_standin.py --model-path m"])]
    for folder in ("campaign/arms/a", "campaign/mlartifacts/x/artifacts/server"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "launches.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ours))
    assert run_layers.count_launches(tmp_path, since=now - 1) == {"sglang": 1, "stand-in": 1}
    assert run_layers.count_launches(tmp_path)["sglang"] == 1 + sum(e["event"] == "start" for e in old)

