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
from string import Template
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


# The skeleton's files (templates/new_experiment/, `string.Template` placeholders) by where each is written.
SKELETON = {
    "patches/{name}/series.yaml": "series.yaml",
    "conf/arm/{name}/baseline.yaml": "arm_baseline.yaml",
    "conf/arm/{name}/patched.yaml": "arm_patched.yaml",
    "conf/claims/{name}.yaml": "claims.yaml",
    "conf/experiment/{name}.yaml": "experiment.yaml",
    "conf/experiment/{name}_cpu.yaml": "experiment_cpu.yaml",
}
TEMPLATES = Path(__file__).resolve().parent / "templates" / "new_experiment"


def files_for(name: str, title: str, patch_names: List[str], series_dir: str) -> Dict[str, str]:
    values = {"name": name, "quoted": title.replace('"', "'"), "series_dir": series_dir,
              "patch_lines": "\n".join(f"  - path: {p}" for p in patch_names)}
    return {where.format(name=name): Template((TEMPLATES / template).read_text()).substitute(values)
            for where, template in SKELETON.items()}


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
