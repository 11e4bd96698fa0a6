"""Tests on a lent GPU only: import-only placeholders for compiled packages.

sglang 0.5.20's import chain names compiled CUDA packages (sgl_kernel,
flashinfer) that the lent machine cannot install.  Each name in
SPECREPRO_PLACEHOLDER_MODULES (and every submodule of it) imports as an empty
module whose attributes raise when called, so the probe proves it never calls
them.  One exception, listed in PURE_PYTHON: sgl_kernel's `fast_topk` is a
pure-torch Python function in sgl_kernel itself (torch.max for k=1, else
torch.topk), the same code as sglang's own non-CUDA fallback
`sglang.srt.utils.common.fast_topk`, which it resolves to.

With SPECREPRO_SERVER_STANDINS=1 (the toy arms' real servers on the lent GPU, platform
tests/gpu/conf/platform/gpu_local_lent.yaml) the few further functions their path
calls resolve too, each to sglang's own code for the same step or to what it
is on a machine without the feature, all safe inside CUDA-graph capture:
  sgl_kernel.build_tree_kernel_efficient  -> sglang's Triton tree builder
                                             (eagle_utils.sgl_build_tree_kernel_triton, the XPU path)
  sgl_kernel.verify_tree_greedy           -> sglang's Triton greedy verify (verify_tree_greedy_triton)
  sgl_kernel.utils.is_arch_support_pdl    -> False (no programmatic dependent launch)
  sgl_kernel.weak_ref_tensor              -> the tensor itself
  deep_gemm.set_pdl                       -> no-op
Never on sys.path outside tests/gpu.
"""

import importlib.abc
import importlib.machinery
import os
import sys
import types

NAMES = [n for n in os.environ.get("SPECREPRO_PLACEHOLDER_MODULES", "").split(",") if n]
CALLED = []


def _sglang_fast_topk():
    from sglang.srt.utils.common import fast_topk

    return fast_topk


def _tree_builder():
    def build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                                    retrive_index, retrive_next_token, retrive_next_sibling, topk, depth,
                                    draft_token_num, tree_mask_mode):
        # imported at call time: eagle_utils imports this name while it is itself being imported
        from sglang.srt.speculative.eagle_utils import TreeMaskMode, sgl_build_tree_kernel_triton

        sgl_build_tree_kernel_triton(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                                     retrive_index, retrive_next_token, retrive_next_sibling, topk, depth,
                                     draft_token_num, TreeMaskMode(int(tree_mask_mode)))

    return build_tree_kernel_efficient


def _greedy_verify():
    def verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index,
                           retrive_next_token, retrive_next_sibling, target_predict):
        from sglang.srt.speculative.eagle_utils import verify_tree_greedy_triton

        verify_tree_greedy_triton(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                  retrive_next_token, retrive_next_sibling, target_predict)

    return verify_tree_greedy


PURE_PYTHON = {"sgl_kernel.fast_topk": _sglang_fast_topk}
if os.environ.get("SPECREPRO_SERVER_STANDINS") == "1":
    PURE_PYTHON.update({
        "sgl_kernel.build_tree_kernel_efficient": _tree_builder,
        "sgl_kernel.verify_tree_greedy": _greedy_verify,
        "sgl_kernel.utils.is_arch_support_pdl": lambda: (lambda *a, **k: False),
        "sgl_kernel.weak_ref_tensor": lambda: (lambda tensor: tensor),
        "deep_gemm.set_pdl": lambda: (lambda *a, **k: None),
    })


class _StubMeta(type):
    """Names inside a placeholder are classes of this kind: attributes, items and subclasses
    (sglang subclasses some at import) work; calling one, or a subclass, raises."""

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _stub(f"{cls._qualified}.{attr}")

    def __getitem__(cls, key):
        return _stub(f"{cls._qualified}[{key!r}]")

    def __call__(cls, *args, **kwargs):
        CALLED.append(cls._qualified)
        raise RuntimeError(f"{cls._qualified} is an import-only placeholder (tests/gpu): it must not be called")


def _stub(qualified):
    return _StubMeta(qualified.rsplit(".", 1)[-1], (), {"_qualified": qualified})


class _Placeholder(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        qualified = f"{self.__name__}.{attr}"
        return PURE_PYTHON[qualified]() if qualified in PURE_PYTHON else _stub(qualified)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if any(name == n or name.startswith(n + ".") for n in NAMES):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Placeholder(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


if NAMES:
    sys.meta_path.insert(0, _Finder())
