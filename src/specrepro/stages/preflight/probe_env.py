"""What an existing Python environment holds for sglang's server (run with that environment's interpreter, the arm's
sglang tree first on PYTHONPATH; no specrepro import).

    python probe_env.py REQUEST_JSON      {"imports": ["sglang.launch_server", ...]}

Prints one JSON object: the interpreter, torch (version, its CUDA and HIP builds, whether it sees a GPU), Triton,
and every top-level module the requested imports lack.  A missing module is recorded and stood in for by an empty
module, then the imports are tried again from the start, so one probe names everything the environment lacks
rather than the first name only; any other import error is recorded as it was raised and ends the search.
"""

import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import traceback
import types

# enough for sglang's whole import chain: a bare interpreter lacks a few dozen names at most
MAX_MISSING = 60


def _module_version(name):
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # an environment's broken package is a finding, not a crash
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"version": str(getattr(module, "__version__", "?")), "file": getattr(module, "__file__", None)}


def torch_facts():
    found = _module_version("torch")
    if "error" in found:
        return found
    import torch

    found.update(cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None))
    try:
        found.update(gpu_available=bool(torch.cuda.is_available()), gpu_count=int(torch.cuda.device_count()))
    except Exception as exc:
        found.update(gpu_available=False, gpu_error=f"{type(exc).__name__}: {exc}"[:300])
    return found


class _Absent(types.ModuleType):
    """Stands in for a module the environment lacks, so the search goes on past it: every attribute is a class
    (sglang subclasses and indexes some at import)."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (), {})


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self):
        self.names = set()

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Absent(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def missing_modules(imports):
    """Top-level modules the imports lack, in the order met, with the module that asked for each; and the first
    import error of another kind."""
    stand_in = _StandIn()
    sys.meta_path.insert(0, stand_in)
    missing, error = [], None
    while len(missing) < MAX_MISSING:
        try:
            for name in imports:
                importlib.import_module(name)
            break
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if not top or top in stand_in.names:
                error = f"ModuleNotFoundError: {exc}"
                break
            asked_by = next((f.filename for f in reversed(traceback.extract_tb(exc.__traceback__))
                             if "importlib" not in f.filename), "?")
            missing.append({"module": top, "asked_by": asked_by})
            stand_in.names.add(top)
            # import the chain afresh: the modules that failed half-way are gone, their parents stay
            for loaded in [m for m in sys.modules if m.split(".")[0] in {i.split(".")[0] for i in imports}]:
                del sys.modules[loaded]
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:1500]
            break
    return missing, error


def main():
    request = json.loads(sys.argv[1])
    out = {"python": sys.executable, "python_version": sys.version.split()[0], "torch": torch_facts(),
           "triton": _module_version("triton")}
    out["missing"], out["import_error"] = missing_modules(request.get("imports") or [])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
