"""Collection rules for the whole repository (tests/ and the package's doctests).

``turngym.integrations.verl`` imports verl at module level (it registers an agent loop and
estimators on import), and verl pins a transformers older than the main environment's, so it
lives in a venv of its own (``scripts/ci_verl.sh``). Where verl is absent the module is not
collected for doctests, instead of failing the whole run at collection.
"""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("verl") else ["turngym/integrations/verl.py"]
