"""`specrepro new-experiment NAME --patch FILE...`: the files a user fills in to reproduce their own PR.

Writes, and then composes to prove they are a valid campaign:

    patches/NAME/series.yaml        the change: title, its patches in order, where its checks would go
    patches/NAME/PR.md              the PR text (given with --pr, else a stub to paste it into)
    patches/NAME/NNNN-*.patch       the patches, numbered in the order given
    conf/arm/NAME/baseline.yaml     the pinned sglang, unpatched
    conf/arm/NAME/patched.yaml      the same with the series applied
    conf/claims/NAME.yaml           one claim to rewrite per sentence of the PR
    conf/experiment/NAME.yaml       the campaign on the default GPU platform and model
    conf/experiment/NAME_cpu.yaml   the same on sglang's real server on this CPU with the toy model

Nothing here knows what the change is: every file says what to fill in, in a comment.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Dict, List, Optional

from specrepro.util.errors import SpecreproError
from specrepro.core.config import SAFE_NAME


class NewExperimentError(SpecreproError, ValueError):
    pass


def title_of(patches: List[Path], pr: Optional[Path]) -> str:
    """The change's title: the PR text's first line, else the first patch's Subject."""
    if pr is not None:
        for line in pr.read_text().splitlines():
            if line.strip():
                return line.strip().lstrip("# ").strip()
    for line in patches[0].read_text(errors="replace").splitlines():
        m = re.match(r"Subject:\s*(?:\[PATCH[^\]]*\]\s*)?(.+)", line)
        if m:
            return m.group(1).strip()
    return f"the change in {patches[0].name}"


def patch_name(i: int, patch: Path) -> str:
    stem = re.sub(r"^\d{4}-", "", patch.name)
    return f"{i:04d}-{stem if stem.endswith(('.patch', '.diff')) else stem + '.patch'}"


def files_for(name: str, title: str, patch_names: List[str], series_dir: str) -> Dict[str, str]:
    quoted = title.replace('"', "'")
    patch_lines = "\n".join(f"  - path: {p}" for p in patch_names)
    return {
        f"patches/{name}/series.yaml": f'''# The change under test (patches/README.md has the keys and the check protocol).
title: "{quoted}"
description: >-
  What the patched code should do differently, in one paragraph (shown in the report and in MLflow).
source: PR.md
patches:
{patch_lines}
# An upstream sglang release that carries this change, if any: its CPU checks can hold the patch to it.
# reference_sglang: <version>
# The change's own checks: a probe run on each sglang tree (CPU) or inside each arm's image (GPU), and a judge
# over what the probes recorded.  Without any, only the generic checks run (it applies, compiles, imports) and the
# report says so.  Example:
# checks:
#   - name: my_function
#     where: cpu
#     probe: checks/probe.py
#     trees: [patched, unpatched]
#     judge: checks/judge.py
checks: []
''',
        f"conf/arm/{name}/baseline.yaml": '''# The pinned sglang as released: what the change is measured against.
description: sglang as pinned, unpatched
# sglang server flags this arm adds to the model's (field names: speculative_use_rejection_sampling: true)
extra_server_args: {}
benchmarks: [gsm8k]
''',
        f"conf/arm/{name}/patched.yaml": f'''# The pinned sglang with the series applied.
description: "sglang as pinned + {quoted}"
patch_series: {name}
extra_server_args: {{}}
benchmarks: [gsm8k]
''',
        f"conf/claims/{name}.yaml": f'''# The claims of "{quoted}" (patches/{name}/PR.md): one per sentence you want judged; quote the sentence
# above each.  expect: decrease | increase | equal (within `margin`) | not_below | restores (closes `fraction` of
# the gap from `from` to `against`) | zero | outputs_unchanged.  Verdicts: REPRODUCED / NOT REPRODUCED /
# INCONCLUSIVE, with Holm's correction over the claims.
claims:
  # "<the PR's sentence this claim encodes>"
  - id: patched_changes_accept_length
    text: The change raises accept length on GSM8K.
    benchmark: gsm8k
    metric: accept_length
    arm: patched
    against: baseline
    expect: increase
''',
        f"conf/experiment/{name}.yaml": f'''# @package _global_
# "{quoted}" on the default platform and model (conf/config.yaml); pick others with platform=... model=...
defaults:
  - /bench@benchmarks.gsm8k: gsm8k
  - /arm/{name}@experiment.arms.baseline: baseline
  - /arm/{name}@experiment.arms.patched: patched
  - _self_

experiment:
  name: {name}
  description: "{quoted}"
  repeats: 3
  baseline_arm: baseline
  claims: claims/{name}.yaml
  patch_series:
    {name}: {series_dir}
  # the PR's published figures, arm -> benchmark -> metric -> value, and where they were measured
  reference: {{}}

benchmarks:
  gsm8k:
    # what the PR says this table shows, in its own words
    headline: {{note: ""}}
''',
        f"conf/experiment/{name}_cpu.yaml": f'''# @package _global_
# "{quoted}" on sglang's real server on this CPU with the toy model pair (conf/testbed/cpu_toy.yaml): the change's
# mechanism, not a GPU's performance.
defaults:
  - {name}
  - /testbed: cpu_toy
  - _self_

experiment:
  name: {name}_cpu
  # what theory predicts per arm and benchmark (specrepro.core.theory): how each arm's draft proposes, e.g.
  #   baseline: {{gsm8k: {{draft_temperature: 0}}}}
  theory: {{}}

benchmarks:
  gsm8k:
    gsm8k: {{num_questions: 16, num_shots: 1, max_new_tokens: 64, parallel: 4}}
''',
    }


def new_experiment(name: str, patches: List[Path], pr: Optional[Path], root: Path, project_root: Path,
                   force: bool = False) -> List[Path]:
    """Write the skeleton of experiment `name` under `root`; the files written."""
    if not SAFE_NAME.match(name) or "." in name:
        raise NewExperimentError(f"NAME: {name!r} must be a plain name (letters, digits, _ -)")
    if not patches:
        raise NewExperimentError("--patch: give the change's patch file(s), in the order they apply")
    for p in [*patches, *([pr] if pr else [])]:
        if not p.is_file():
            raise NewExperimentError(f"{p}: no such file")
    names = [patch_name(i, p) for i, p in enumerate(patches, 1)]
    series_dir = f"patches/{name}" if root.resolve() == project_root.resolve() else str(root.resolve() / "patches" / name)
    files = files_for(name, title_of(patches, pr), names, series_dir)
    existing = [rel for rel in files if (root / rel).exists()]
    if existing and not force:
        raise NewExperimentError(f"{', '.join(existing)}: already there (--force writes over them)")
    written = []
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    for source, target in zip(patches, names):
        shutil.copyfile(source, root / "patches" / name / target)
        written.append(root / "patches" / name / target)
    pr_target = root / "patches" / name / "PR.md"
    if pr is not None:
        shutil.copyfile(pr, pr_target)
    else:
        pr_target.write_text(f"{title_of(patches, None)}\n\n"
                             "Paste the PR's text here: its problem, its fix and its results tables.  The claims file "
                             "quotes the sentences it judges.\n")
    written.append(pr_target)
    return written
