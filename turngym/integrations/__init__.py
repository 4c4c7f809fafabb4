"""turngym inside the engines people already run: verl and TRL.

Each integration is an optional module, imported only when used (neither engine is a
dependency of turngym):

* :mod:`turngym.integrations.verl` — a verl agent loop that plays any turngym env (local or
  ``turngym serve``), and every turngym advantage estimator in verl's registry as
  ``turngym_<name>`` (``pip install 'turngym[verl]'``, in an environment of its own).
* :mod:`turngym.integrations.trl` — a rollout function and reward functions for TRL's
  ``GRPOTrainer``, and a subclass that swaps TRL's per-completion advantage for turngym's
  per-turn credit (``pip install 'turngym[trl]'``).
* :mod:`turngym.integrations.episodes` — the engine-neutral seam both use: play an episode with
  an engine's sampler, render it token-faithfully, spread per-turn advantages over its tokens.
"""

__all__: list[str] = []
