"""Shop: WebShop's pages, actions and reward over an offline catalog (``turngym/Shop-v0``)."""

from turngym.core.registry import register

register(
    "turngym/Shop-v0",
    "turngym.envs.shop.env:ShopEnv",
    description="WebShop offline: search[...]/click[...] over a generated 1k-100k product catalog (bm25s), WebShop reward, potential and rank signals",
    max_turns=15,
    family="shop",
)
