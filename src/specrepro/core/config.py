"""Compose the campaign config once, validate it, and hand out a plain dict.

Hydra composes conf/ against the structured schema (types, unknown keys,
unknown group options); `validate` then checks what a schema cannot: that names
refer to things that exist and that every sglang flag exists in the pinned
sglang.  Every failure is a ConfigError whose message names the key.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Sequence

import yaml

from specrepro.benchmarks import UnknownKind, kind_of, registered
from specrepro.util.errors import SpecreproError, hydra_message
from specrepro.core.cost import campaign_cost
from specrepro.util.redaction import SECRET_NAME
from specrepro.core.rounds import policy_of
from specrepro import runtimes
from specrepro.upstream.sglang_flags import OWNED_FLAG_NAMES, load_table
from specrepro.core import sweep
from specrepro.core.schema import DraftTheory, SpecreproConfig, register_configs
from specrepro.core.series import SeriesError, load_series, series_folder
from specrepro.core.theory import TheoryError, rule_problems

PROJECT_ROOT = Path(os.environ.get("SPECREPRO_ROOT", Path(__file__).resolve().parents[3]))
CONF_DIR = PROJECT_ROOT / "conf"
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ConfigError(SpecreproError, ValueError):
    """A campaign config problem; the message names the key."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("invalid campaign config:\n" + "\n".join(f"  - {p}" for p in self.problems))


def compose(overrides: Sequence[str] = ()) -> Dict[str, Any]:
    """Hydra-compose conf/ with `overrides`, resolve, validate; return a plain dict."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    register_configs()
    if not OmegaConf.has_resolver("env_or"):
        # oc.env, except that a variable set to "" counts as unset (the shell's ${VAR:-default}): make exports the
        # variables it leaves empty
        OmegaConf.register_new_resolver("env_or", lambda name, default=None: os.environ.get(name) or default)
    GlobalHydra.instance().clear()
    overrides = list(overrides)
    if not any(o.split("=", 1)[0].lstrip("+~") == "project_root" for o in overrides):
        overrides.append(f"project_root={PROJECT_ROOT}")
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides)
        OmegaConf.set_struct(cfg, False)
        cfg.pop("hydra", None)
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True, enum_to_str=True)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError([hydra_message(exc)]) from exc
    except yaml.YAMLError as exc:
        # a config file that is not YAML: the parser's message names the file, line and column
        raise ConfigError([f"a config file is not valid YAML: {' '.join(str(exc).split())}"]) from exc
    finally:
        GlobalHydra.instance().clear()
    claims = (resolved.get("experiment") or {}).get("claims")
    if claims and not Path(claims).is_absolute() and not (CONF_DIR / claims).is_file():
        # an experiment from another config folder (hydra.searchpath) names its claims file relative to that folder
        for folder in search_path(overrides):
            if (folder / claims).is_file():
                resolved["experiment"]["claims"] = str(folder / claims)
                break
    # The one validation path of plan, run and the Snakefile: the schema (unknown
    # keys such as +foo=1, types), then the checks a schema cannot express.
    return check_resolved(resolved, "overrides")


def search_path(overrides: Sequence[str]) -> List[Path]:
    """The config folders a `hydra.searchpath=[file://...]` override adds."""
    out = []
    for o in overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+~") == "hydra.searchpath":
            out += [Path(m) for m in re.findall(r"file://([^,\]\s]+)", value)]
    return out


def config_hash(cfg: Dict[str, Any]) -> str:
    """Stable hash of everything that defines the measurement (not where it is stored)."""
    relevant = {k: v for k, v in cfg.items() if k not in {"results_dir", "cache_dir", "project_root", "tracking"}}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_resolved(cfg: Dict[str, Any], source: str = "config") -> Dict[str, Any]:
    """A resolved config (written earlier, maybe by an older specrepro) against today's schema.

    Keys added since get their defaults; unknown keys and wrong types are errors.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(OmegaConf.structured(SpecreproConfig), cfg)
        cfg = OmegaConf.to_container(merged, resolve=True, throw_on_missing=True, enum_to_str=True)
    except OmegaConfBaseException as exc:
        raise ConfigError([f"{source}: {hydra_message(exc)}"]) from exc

    problems = sweep.sweep_problems(cfg)
    if problems:
        raise ConfigError(problems)
    # the grid becomes cells (benchmarks, arms) once; a resolved config read back is already expanded
    cfg = sweep.expand(cfg)
    validate(cfg)
    return cfg


def load_resolved(path: Path) -> Dict[str, Any]:
    cfg = yaml.safe_load(Path(path).read_text())
    if not isinstance(cfg, dict) or "experiment" not in cfg:
        raise ConfigError([f"{path}: not a resolved specrepro config (no `experiment` key)"])
    return check_resolved(cfg, str(path))


def dump_resolved(cfg: Dict[str, Any]) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)


def validate(cfg: Dict[str, Any]) -> None:
    """What the schema cannot say: names that must refer to something, values that must fit each other, and every
    sglang flag the pinned sglang must declare.  One ConfigError lists every problem, each naming its key."""
    problems: List[str] = []
    for part in (_folder_problems, _experiment_problems, _series_problems, _data_problems, _benchmark_problems,
                 _arm_problems, _platform_problems, _serve_problems, _theory_problems, _analysis_problems,
                 _budget_problems, _flag_problems):
        problems.extend(part(cfg))
    if problems:
        raise ConfigError(problems)


def _folder_problems(cfg: Dict[str, Any]) -> List[str]:
    problems = []
    for key in ("results_dir", "cache_dir"):
        value = str(cfg.get(key) or "").strip()
        if not value or Path(value).resolve() in (Path("/"), Path(cfg["project_root"]).resolve(), Path.home()):
            problems.append(f"{key}: {value!r} is empty or a root folder (the filesystem's, the project's or the "
                            f"home folder); give a folder of its own")
    return problems


def _experiment_problems(cfg: Dict[str, Any]) -> List[str]:
    exp = cfg["experiment"]
    arms = exp.get("arms") or {}
    problems = []
    if not SAFE_NAME.match(str(exp["name"])):
        problems.append(f"experiment.name: {exp['name']!r} must be a plain name (letters, digits, _ . -)")
    if exp["repeats"] < 1:
        problems.append(f"experiment.repeats: must be >= 1, got {exp['repeats']}")
    problems += _launches_problems(exp)
    if not arms:
        problems.append("experiment.arms: a campaign needs at least one arm")
    if exp["baseline_arm"] not in arms and exp["baseline_arm"] not in {(a.get("cell") or {}).get("base")
                                                                       for a in arms.values()}:
        problems.append(f"experiment.baseline_arm: {exp['baseline_arm']!r} is not an arm (arms: {', '.join(arms)})")
    if exp.get("claims") and not (CONF_DIR / exp["claims"]).is_file() and not Path(exp["claims"]).is_file():
        problems.append(f"experiment.claims: file {exp['claims']!r} not found under {CONF_DIR}")
    return problems


def _series_problems(cfg: Dict[str, Any]) -> List[str]:
    problems = []
    for name in cfg["experiment"].get("patch_series") or {}:
        if not SAFE_NAME.match(name):
            problems.append(f"experiment.patch_series.{name}: series names must be plain names")
            continue
        try:
            load_series(series_folder(cfg, name))
        except SeriesError as exc:
            problems.append(f"experiment.patch_series.{name}: {exc}")
    return problems


def _benchmark_problems(cfg: Dict[str, Any]) -> List[str]:
    problems = []
    for bname, bench in (cfg.get("benchmarks") or {}).items():
        key = f"benchmarks.{bname}"
        if not SAFE_NAME.match(bname):
            problems.append(f"{key}: benchmark names must be plain names")
        try:
            kind = kind_of(bench, bname)
        except UnknownKind as exc:
            problems.append(str(exc))
            continue
        if not bench.get(kind.block):
            problems.append(f"{key}.{kind.block}: a {kind.name} benchmark needs its `{kind.block}` settings")
            continue
        if bench.get("repeats") is not None and bench["repeats"] < 1:
            problems.append(f"{key}.repeats: must be >= 1, got {bench['repeats']}")
        problems += kind.problems(key, bench[kind.block])
    return problems


def _arm_problems(cfg: Dict[str, Any]) -> List[str]:
    exp = cfg["experiment"]
    benchmarks = cfg.get("benchmarks") or {}
    problems = []
    for aname, arm in (exp.get("arms") or {}).items():
        key = f"experiment.arms.{aname}"
        if not SAFE_NAME.match(aname):
            problems.append(f"{key}: arm names must be plain names (letters, digits, _ . -)")
        if arm.get("patch_series") and arm["patch_series"] not in (exp.get("patch_series") or {}):
            problems.append(f"{key}.patch_series: {arm['patch_series']!r} is not defined in experiment.patch_series")
        if not arm.get("benchmarks"):
            problems.append(f"{key}.benchmarks: an arm must run at least one benchmark")
        problems += [f"{key}.benchmarks: {b!r} is not a defined benchmark (defined: {', '.join(benchmarks)})"
                     for b in arm.get("benchmarks") or [] if b not in benchmarks]
    return problems


def _platform_problems(cfg: Dict[str, Any]) -> List[str]:
    plat, model = cfg["platform"], cfg["model"]
    try:
        runtime = runtimes.runtime_for(plat)
    except runtimes.UnknownRuntime as exc:
        # every other platform check below asks the runtime
        return [str(exc)]
    problems = runtime.config_problems()
    if not runtime.is_bare and not plat.get("base_image"):
        problems.append("platform.base_image: a container platform needs a base image")
    if plat["accelerator"] != "none" and model["gpus"] > plat["gpus_per_node"] > 0:
        problems.append(f"model.gpus: {model['gpus']} GPUs do not fit platform {plat['name']} "
                        f"({plat['gpus_per_node']} per node)")
    if model["gpus"] < 0:
        problems.append("model.gpus: must be >= 0")
    if plat["accelerator"] != "none" and plat["accelerator"] not in (model.get("accelerators") or []):
        problems.append(
            f"model.accelerators: model {model['name']} (conf/model/{model['name']}.yaml) runs on "
            f"{model['accelerators']}, platform {plat['name']} (conf/platform/{plat['name']}.yaml) is "
            f"{plat['accelerator']}: choose a model for that platform (e.g. model=glm52_fp8 on NVIDIA)")
    problems += [f"platform.server_env.{key}: secrets do not belong in the config (it is written next to the results "
                 f"and logged); export {key} and list it in platform.passthrough_env"
                 for key in plat.get("server_env") or {} if SECRET_NAME.search(key)]
    if plat.get("python_env") and not (Path(cfg["project_root"]) / "requirements" / plat["python_env"]).is_file():
        problems.append(f"platform.python_env: requirements/{plat['python_env']} not found under {cfg['project_root']}")
    if plat.get("python_env") and not runtime.is_bare:
        problems.append("platform.python_env: a pipeline-built venv serves bare processes only (container_runtime: none)")
    if plat.get("environment_imports") and not runtime.is_bare:
        problems.append("platform.environment_imports: checks the caller's own environment, which serves bare processes "
                        "only (container_runtime: none)")
    return problems


def _serve_problems(cfg: Dict[str, Any]) -> List[str]:
    serve = cfg["serve"]
    problems = []
    if not (serve["port"] == 0 or 1024 <= serve["port"] <= 65535):
        problems.append(f"serve.port: {serve['port']} is not 0 (pick a free one) or a port in 1024-65535")
    problems += [f"serve.{k}: must be > 0" for k in ("ready_timeout_s", "request_timeout_s", "shutdown_grace_s")
                 if serve[k] <= 0]
    problems += [f"serve.{k}: must be >= 0" for k in ("idle_shutdown_grace_s", "crash_settle_s") if serve[k] < 0]
    if serve["decode_log_interval"] is not None and serve["decode_log_interval"] < 1:
        problems.append("serve.decode_log_interval: must be >= 1")
    return problems


def _analysis_problems(cfg: Dict[str, Any]) -> List[str]:
    an = cfg["analysis"]
    problems = []
    if not 0 < an["alpha"] < 1:
        problems.append(f"analysis.alpha: must be in (0, 1), got {an['alpha']}")
    for name in ("launch_noise_prior", "within_fallback"):
        problems += [f"analysis.{name}.{metric}: a relative SD in [0, 1), got {cv!r}"
                     for metric, cv in (an.get(name) or {}).items()
                     if not (isinstance(cv, (int, float)) and 0 <= cv < 1)]
    return problems


def _launches_problems(exp: Dict[str, Any]) -> List[str]:
    value = exp.get("launches", 1)
    if isinstance(value, bool) or not isinstance(value, (int, dict)):
        return [f"experiment.launches: an int (launches per arm) or {{min: N, max: M}} (a sequential design), "
                f"got {value!r}"]
    if isinstance(value, int):
        return [] if value >= 1 else [f"experiment.launches: must be >= 1, got {value}"]
    try:
        policy_of(value)
    except (ValueError, KeyError, TypeError) as exc:
        missing = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
        return [missing if missing.startswith("experiment.launches") else f"experiment.launches: {missing}"]
    return []


def _budget_problems(cfg: Dict[str, Any]) -> List[str]:
    exp = cfg["experiment"]
    if exp.get("max_gpu_hours") is None:
        return []
    policy = policy_of(exp.get("launches"))
    # a sequential design stops its rounds at the budget: only a first round over it is refused
    cost = campaign_cost(cfg, launches=policy.min if policy else None)
    if cost["gpu_hours"] <= exp["max_gpu_hours"]:
        return []
    what = "this campaign's first round" if policy else "this campaign"
    return [f"experiment.max_gpu_hours: {what} needs about {cost['gpu_hours']:.1f} GPU-hours "
            f"({cost['launches']} launches, {cost['requests']} requests, {cost['gpus']} GPUs each; "
            f"serve.expected_load_s and serve.expected_tpot_ms), over the budget of {exp['max_gpu_hours']:g}: drop "
            f"levels, list experiment.sweep.treatments, or raise the budget"]


def _benchmarks_with_settings(cfg: Dict[str, Any]) -> List[tuple]:
    """(name, config) of the benchmarks of a registered kind that give their settings block (validate reports
    the others)."""
    return [(b, v) for b, v in (cfg.get("benchmarks") or {}).items()
            if registered(v) and v.get(kind_of(v, b).block)]


def data_sources(cfg: Dict[str, Any]) -> Dict[str, tuple]:
    """Every data file the campaign reads: dataset name -> (source, the config key a user sets).  A benchmark's file
    is named after the benchmark; the toy model's tokenizer corpus `toy_corpus`."""
    data = cfg.get("data") or {}
    out: Dict[str, tuple] = {}
    for b, bench in _benchmarks_with_settings(cfg):
        for source, key in kind_of(bench, b).data_sources(b, bench[kind_of(bench, b).block], data)[:1]:
            out[b] = (source, key)
    toy = cfg["model"].get("toy")
    if toy and toy["corpus"] in data:
        out["toy_corpus"] = (data[toy["corpus"]], f"data.{toy['corpus']}")
    return out


def _data_problems(cfg: Dict[str, Any]) -> List[str]:
    data = cfg.get("data") or {}
    named = [(f"benchmarks.{b}.{setting}", name) for b, v in _benchmarks_with_settings(cfg)
             for setting, name in kind_of(v, b).data_entries(v[kind_of(v, b).block])]
    if cfg["model"].get("toy"):
        named.append(("model.toy.corpus", cfg["model"]["toy"]["corpus"]))
    problems = [f"{key}: {name!r} is not a data entry (data: {', '.join(data) or 'none'})" for key, name in named
                if name not in data]
    seen = set()
    for name, (source, key) in data_sources(cfg).items():
        if key in seen:
            continue
        seen.add(key)
        if source.get("sha256") is not None and not re.fullmatch(r"[0-9a-f]{64}", str(source["sha256"])):
            problems.append(f"{key}.sha256: must be 64 hex digits (or null: recorded at the first fetch)")
        if not Path(source["path"]).is_file() and (cfg.get("offline") or not source.get("url")):
            why = "offline=true" if cfg.get("offline") else f"{key}.url is not set"
            problems.append(f"{key}.path: {source['path']} is not there and it cannot be fetched ({why}): put the file "
                            f"there" + (f" (sha256 {source['sha256']})" if source.get("sha256") else "")
                            + f", or set {key}.path=FILE")
    return problems


def typed_rule(entry: Dict[str, Any]) -> Dict[str, Any]:
    """One draft rule typed by its schema (schema.DraftTheory), as a plain dict (enums by name)."""
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(OmegaConf.structured(DraftTheory), entry)
    return OmegaConf.to_container(merged, throw_on_missing=True, enum_to_str=True)


def theory_entries(cfg: Dict[str, Any]) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """experiment.theory typed: arm -> benchmark -> its draft rule; a rule for a benchmark the arm does not run (an
    override narrowed its benchmarks) is left out, unused."""
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    arms = cfg["experiment"].get("arms") or {}
    for arm, per_bench in (cfg["experiment"].get("theory") or {}).items():
        for bench, entry in (per_bench or {}).items():
            if bench in ((arms.get(arm) or {}).get("benchmarks") or []):
                out.setdefault(arm, {})[bench] = typed_rule(entry)
    return out


def _theory_problems(cfg: Dict[str, Any]) -> List[str]:
    from omegaconf.errors import OmegaConfBaseException

    exp = cfg["experiment"]
    arms = exp.get("arms") or {}
    problems = []
    for arm, per_bench in (exp.get("theory") or {}).items():
        if arm not in arms:
            problems.append(f"experiment.theory.{arm}: not an arm of this experiment (arms: {', '.join(arms)})")
            continue
        for bench, entry in (per_bench or {}).items():
            key = f"experiment.theory.{arm}.{bench}"
            if bench not in (cfg.get("benchmarks") or {}):
                problems.append(f"{key}: {bench!r} is not a benchmark of this experiment "
                                f"(benchmarks: {', '.join(cfg.get('benchmarks') or {})})")
                continue
            if not isinstance(entry, dict):
                problems.append(f"{key}: a draft rule ({{draft_temperature: ..., first_draft_temperature: ..., "
                                f"steps: ..., acceptance: ...}}), got {entry!r}")
                continue
            try:
                typed = typed_rule(entry)
            except OmegaConfBaseException as exc:
                problems.append(f"{key}: {hydra_message(exc)}")
                continue

            try:
                problems += [f"{key}.{p}" for p in rule_problems(typed, cfg["model"])]
            except TheoryError as exc:
                problems.append(f"{key}: {exc}")
    return problems


def _flag_problems(cfg: Dict[str, Any]) -> List[str]:
    try:
        table = load_table(cfg["sglang"]["version"], Path(cfg["cache_dir"]))
    except FileNotFoundError as exc:
        return [f"sglang.version: {exc}"]
    problems = []
    sources = [("model.server_args", cfg["model"]["server_args"]),
               ("platform.server_args", cfg["platform"].get("server_args") or {})]
    sources += [
        (f"experiment.arms.{a}.extra_server_args", arm.get("extra_server_args") or {})
        for a, arm in cfg["experiment"]["arms"].items()
    ]
    for where, args in sources:
        for key, value in args.items():
            flag = table.resolve_key(key)
            if flag is None:
                hint = table.suggest(key)
                hint_text = f"; did you mean {', '.join(hint)}?" if hint else ""
                problems.append(
                    f"{where}.{key}: sglang {table.version} has no server flag "
                    f"--{key.lstrip('-').replace('_', '-')}{hint_text}"
                )
            elif flag.name in OWNED_FLAG_NAMES:
                problems.append(f"{where}.{key}: {flag.name} is set by specrepro per launch (see serve.*)")
            elif flag.kind == "bool" and not isinstance(value, bool):
                problems.append(f"{where}.{key}: {flag.name} is a switch; give true or false, got {value!r}")
    if "model_path" not in cfg["model"]["server_args"] and "model" not in cfg["model"]["server_args"]:
        problems.append("model.server_args.model_path: required (the weights to serve)")
    return problems
