"""``hidden_from_kernel_scan``: modules that would kill a starting vLLM engine are out of ``sys.modules`` meanwhile.

No vLLM needed: the context manager is plain Python (``tests/agents/test_vllm_backend.py`` starts a real
engine beside numba where vLLM is installed).
"""

from __future__ import annotations

import sys
import types

from turngym.agents.vllm_backend import hidden_from_kernel_scan


class _MakesUpEveryAttribute:  # test double: llvmlite's ffi.lib, whose __getattr__ answers any name
    __slots__ = ()  # no real __dict__: asking for one reaches __getattr__

    def __getattr__(self, name: str) -> object:
        return object()


def test_only_a_module_holding_an_object_that_makes_up_its_dict_is_hidden_and_put_back() -> None:
    bad, good = types.ModuleType("turngym_test_bad_lib"), types.ModuleType("turngym_test_good_lib")
    bad.lib = _MakesUpEveryAttribute()
    good.obj, good.cls = types.SimpleNamespace(kernel=None), dict
    sys.modules[bad.__name__], sys.modules[good.__name__] = bad, good
    try:
        with hidden_from_kernel_scan() as names:
            assert bad.__name__ in names and good.__name__ not in names
            assert bad.__name__ not in sys.modules and sys.modules[good.__name__] is good
            # what vLLM's scan does with every value of every loaded module: it must not raise now
            for module in list(sys.modules.values()):
                for value in list(getattr(module, "__dict__", {}).values()):
                    if hasattr(value, "__dict__"):
                        vars(value).get("kernel")
        assert sys.modules[bad.__name__] is bad  # back, the same object
    finally:
        sys.modules.pop(bad.__name__, None)
        sys.modules.pop(good.__name__, None)
