"""Every env family lives in a sub-package here and registers its ids on import.

Registration uses string entry points, so importing this package imports no env code: each
family's ``__init__`` is a few ``register(...)`` calls. New families are discovered
automatically; nothing here needs editing when one is added.
"""

import importlib
import pkgutil

for _mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _mod.ispkg:
        importlib.import_module(f"{__name__}.{_mod.name}")
