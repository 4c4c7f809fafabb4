"""``turngym view``: episodes, per-turn signals and credit, and learning curves in the browser.

>>> from turngym.viewer import create_app, write_static  # doctest: +SKIP
>>> create_app("runs/default")  # a Starlette app; `turngym view runs/default` serves it  # doctest: +SKIP
"""

from turngym.viewer.app import create_app, write_static
from turngym.viewer.data import ViewerData
from turngym.viewer.index import EpisodeIndex

__all__ = ["EpisodeIndex", "ViewerData", "create_app", "write_static"]
