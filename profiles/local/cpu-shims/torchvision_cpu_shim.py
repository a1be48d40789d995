"""Import shim for torchvision on a CPU-only torch (loaded by a .pth file in the engine venv).

PyPI's torchvision is a CUDA build that cannot load beside torch 2.13.0+cpu, and transformers 5
imports it at module level for Qwen2-VL image processing, which Dynamo's vLLM component imports
and a text model never calls. Every ``torchvision.*`` module resolves to a placeholder whose
attributes are placeholders too; calling one raises, so an image path fails loudly.
"""

import importlib.abc
import importlib.machinery
import sys
import types


class _Missing:
    def __init__(self, name):
        self._name = name

    def __call__(self, *a, **k):
        raise RuntimeError(f"{self._name}: torchvision is not installed (servesweep CPU shim)")

    def __getattr__(self, attr):
        return _Missing(f"{self._name}.{attr}")

    def __mro_entries__(self, bases):
        return (object,)


class _Module(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Module(spec.name)
        m.__path__ = []
        m.__version__ = "0.0+servesweep.cpu.shim"
        return m

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())
