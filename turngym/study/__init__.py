"""Studies: reproducible experiments over turngym's envs and estimators (``turngym study``)."""

__all__: list[str] = []
