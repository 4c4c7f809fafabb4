"""Shop: WebShop's pages, actions and reward over an offline catalog (``turngym/Shop-v0``)."""

from turngym.core.registry import register

__all__ = ["MAX_TURNS"]

#: The family's default turn budget: its registrations and ``ShopEnv.default_max_turns`` both read
#: this one number (it lives here, not on the class, because registering must not import the env module).
MAX_TURNS = 15

register(
    "turngym/Shop-v0",
    "turngym.envs.shop.env:ShopEnv",
    description="WebShop offline: search[...]/click[...] over a generated 1k-100k product catalog (bm25s), WebShop reward, potential and rank signals",
    max_turns=MAX_TURNS,
    family="shop",
)
