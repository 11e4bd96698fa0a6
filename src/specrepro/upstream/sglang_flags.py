"""The server flags a pinned sglang accepts, read from its source.

sglang 0.5.20 declares its server flags as annotated fields in
``sglang/srt/arg_groups/fields/*.py`` (``tp_size`` -> ``--tp-size``, plus
``Arg(aliases=..., cli_name=..., no_cli=...)``) and registers a few by hand in
``ServerArgs.add_cli_args`` (``server_args.py``: deprecated spellings, dynamic
choices).  Reading both with ``ast`` gives the table without importing sglang
(which needs torch).  Tables for shipped versions live in ``flag_tables/`` so
``specrepro plan`` validates offline; ``specrepro flags-table`` regenerates one
from a source tree and a test checks it against the real release.
"""

from __future__ import annotations

import ast
import difflib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

# the tables are package data at the package root (src/specrepro/flag_tables)
TABLE_DIR = Path(__file__).resolve().parents[1] / "flag_tables"


@dataclass(frozen=True)
class Flag:
    """One command-line flag of ``sglang.launch_server``."""

    name: str  # canonical, e.g. --tp-size
    dest: str  # ServerArgs field it sets, e.g. tp_size
    kind: str  # bool | value | list
    aliases: tuple = ()
    deprecated: Optional[str] = None  # replacement named by a Deprecated*Action


@dataclass
class FlagTable:
    version: str
    flags: Dict[str, Flag] = field(default_factory=dict)  # canonical name -> Flag

    # --- lookups -----------------------------------------------------------
    def by_spelling(self) -> Dict[str, Flag]:
        table = {}
        for flag in self.flags.values():
            table[flag.name] = flag
            for alias in flag.aliases:
                table[alias] = flag
        return table

    def resolve_key(self, key: str) -> Optional[Flag]:
        """A config key (`tp_size`, `tp-size`, `--tensor-parallel-size`) -> Flag."""
        spelling = key if key.startswith("--") else "--" + key.replace("_", "-")
        flag = self.by_spelling().get(spelling)
        if flag is not None:
            return flag
        for candidate in self.flags.values():
            if candidate.dest == key:
                return candidate
        return None

    def suggest(self, key: str) -> List[str]:
        spelling = key if key.startswith("--") else "--" + key.replace("_", "-")
        names = list(self.by_spelling())
        prefixed = sorted({self.by_spelling()[n].name for n in names if n.startswith(spelling)})
        if prefixed:
            return prefixed[:5]
        return difflib.get_close_matches(spelling, names, n=3, cutoff=0.75)

    # --- persistence -------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(
            {"version": self.version, "flags": [asdict(f) for f in sorted(self.flags.values(), key=lambda f: f.name)]},
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> "FlagTable":
        data = json.loads(text)
        flags = {}
        for raw in data["flags"]:
            raw["aliases"] = tuple(raw.get("aliases") or ())
            flags[raw["name"]] = Flag(**raw)
        return cls(version=data["version"], flags=flags)


def _annotation_meta(annotation: ast.expr) -> Optional[ast.expr]:
    """For ``A[T, meta]`` return ``meta``; None for plain annotations."""
    if not isinstance(annotation, ast.Subscript):
        return None
    if not (isinstance(annotation.value, ast.Name) and annotation.value.id in {"A", "Annotated"}):
        return None
    elements = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    return elements[1] if len(elements) > 1 else None


def _is_bool(annotation: ast.expr) -> bool:
    first = annotation.slice.elts[0] if isinstance(annotation.slice, ast.Tuple) else annotation.slice
    return isinstance(first, ast.Name) and first.id == "bool"


def _is_list(annotation: ast.expr) -> bool:
    first = annotation.slice.elts[0] if isinstance(annotation.slice, ast.Tuple) else annotation.slice
    text = ast.unparse(first)
    return text.startswith(("List[", "list[", "Optional[List[", "Optional[list["))


def _keywords(call: ast.Call) -> Dict[str, Any]:
    out = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:
            out[kw.arg] = ast.unparse(kw.value)
    return out


def flags_from_fields(source: str) -> Iterable[Flag]:
    """Flags declared by the annotated fields of one ``fields/*.py`` module."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            name = stmt.target.id
            meta = _annotation_meta(stmt.annotation)
            if name.startswith("_") or meta is None:
                continue
            options: Dict[str, Any] = {}
            if isinstance(meta, ast.Call) and ast.unparse(meta.func).endswith("Arg"):
                options = _keywords(meta)
            elif not (isinstance(meta, ast.Constant) and isinstance(meta.value, str)):
                continue
            if options.get("no_cli"):
                continue
            is_list = _is_list(stmt.annotation) and "type_parser" not in options
            kind = "bool" if _is_bool(stmt.annotation) and "action" not in options else ("list" if is_list else "value")
            cli_name = options.get("cli_name") or "--" + name.replace("_", "-")
            yield Flag(name=cli_name, dest=name, kind=kind, aliases=tuple(options.get("aliases") or ()))


def flags_from_manual_registrations(source: str) -> Iterable[Flag]:
    """Flags registered with ``parser.add_argument`` in ``server_args.py``."""
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "add_argument":
            continue
        spellings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        spellings = [s for s in spellings if s.startswith("--")]
        if not spellings:
            continue
        options = _keywords(node)
        action = str(options.get("action", ""))
        kind = "bool" if ("store_true" in action or "StoreTrue" in action) else "value"
        dest = options.get("dest") or spellings[0][2:].replace("-", "_")
        deprecated = options.get("new_flag") if "Deprecated" in action else None
        yield Flag(name=spellings[0], dest=dest, kind=kind, aliases=tuple(spellings[1:]), deprecated=deprecated)


def table_from_source(sglang_pkg: Path, version: str) -> FlagTable:
    """Build the table from an sglang package directory (the one holding ``srt/``)."""
    fields_dir = sglang_pkg / "srt" / "arg_groups" / "fields"
    server_args = sglang_pkg / "srt" / "server_args.py"
    if not fields_dir.is_dir() or not server_args.is_file():
        raise FileNotFoundError(
            f"{sglang_pkg} does not look like sglang {version}: expected {fields_dir} and {server_args}"
        )
    table = FlagTable(version=version)
    for module in sorted(fields_dir.glob("*.py")):
        for flag in flags_from_fields(module.read_text()):
            table.flags[flag.name] = flag
    for flag in flags_from_manual_registrations(server_args.read_text()):
        table.flags[flag.name] = flag
    return table


def load_table(version: str, cache_dir: Optional[Path] = None) -> FlagTable:
    """The shipped table for `version`, else one built from a cached source tree."""
    shipped = TABLE_DIR / f"{version}.json"
    if shipped.is_file():
        return FlagTable.from_json(shipped.read_text())
    if cache_dir is not None:
        pkg = Path(cache_dir) / "sglang" / version / "tree" / "sglang"
        if pkg.is_dir():
            return table_from_source(pkg, version)
    raise FileNotFoundError(
        f"no flag table for sglang {version}: run `specrepro flags-table --version {version}` "
        f"(it reads the sglang source) or add {shipped}"
    )


def render_flags(server_args: Dict[str, Any], table: FlagTable) -> List[str]:
    """Config `server_args` -> argv, canonical spellings, in config order.

    Raises KeyError naming the first unknown key; the validator reports all.
    """
    argv: List[str] = []
    for key, value in server_args.items():
        flag = table.resolve_key(key)
        if flag is None:
            raise KeyError(key)
        if value is None:
            continue
        if flag.kind == "bool":
            if value:
                argv.append(flag.name)
            continue
        if isinstance(value, (list, tuple)):
            argv.append(flag.name)
            argv.extend(str(v) for v in value)
            continue
        argv.extend([flag.name, str(value)])
    return argv


def requested_fields(server_args: Dict[str, Any], table: FlagTable, serve: Dict[str, Any]) -> Dict[str, Any]:
    """What the launch asked for, keyed by ServerArgs field (the flag table's dest)."""
    fields: Dict[str, Any] = {}
    for key, value in server_args.items():
        flag = table.resolve_key(key)
        if flag is not None and value is not None:
            fields[flag.dest] = value
    # specrepro adds these to a launch when configured (arm_plan.owned_flags).
    if serve.get("decode_log_interval") is not None:
        fields["decode_log_interval"] = serve["decode_log_interval"]
    if serve["enable_metrics"]:
        fields["enable_metrics"] = True
    return fields
