"""What a preflight reads inside the arm's image (standard library only; no sglang import).

    python3 probe_image.py SGLANG_ROOT PATHS_JSON [DEVICES_JSON]

Prints one JSON object: the sglang version the image's tree declares, the
patch record the image stage left (/specrepro/applied.json, or none), the
source files that declare sglang's server flags (specrepro builds the image's
own flag table from them), whether each given path is readable here, and
whether this user can open each given device file for reading and writing
(what HIP does with /dev/kfd and the render nodes).
"""

import json
import os
import re
import sys


def package_dir(root):
    for candidate in (os.path.join(root, "python", "sglang"), os.path.join(root, "sglang"), root):
        if os.path.isfile(os.path.join(candidate, "srt", "server_args.py")):
            return candidate
    return None


def version_of(pkg):
    for name in ("version.py", "_version.py"):
        path = os.path.join(pkg, name)
        if os.path.isfile(path):
            m = re.search(r"^(?:__version__|version)\s*(?::\s*str)?\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]",
                          open(path).read(), re.M)
            if m:
                return m.group(1)
    return None


def readable(path):
    if os.path.isdir(path):
        try:
            os.listdir(path)
            return True
        except OSError:
            return False
    return os.access(path, os.R_OK) and os.path.isfile(path)


def openable(path):
    try:
        os.close(os.open(path, os.O_RDWR))
        return True
    except OSError as exc:
        return exc.strerror


def main():
    root, paths = sys.argv[1], json.loads(sys.argv[2])
    devices = json.loads(sys.argv[3]) if len(sys.argv) > 3 else []
    pkg = package_dir(root)
    out = {"sglang_root": root, "package_dir": pkg, "version": version_of(pkg) if pkg else None, "applied": None,
           "flag_sources": {}, "readable": {p: readable(p) for p in paths}, "uid": os.getuid(),
           "groups": os.getgroups(), "devices": {d: openable(d) for d in devices}}
    if os.path.isfile("/specrepro/applied.json"):
        out["applied"] = json.load(open("/specrepro/applied.json"))
    if pkg:
        fields = os.path.join(pkg, "srt", "arg_groups", "fields")
        names = ["srt/server_args.py"] + ["srt/arg_groups/fields/" + f for f in sorted(os.listdir(fields))
                                          if f.endswith(".py")] if os.path.isdir(fields) else ["srt/server_args.py"]
        for name in names:
            out["flag_sources"][name] = open(os.path.join(pkg, name)).read()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
