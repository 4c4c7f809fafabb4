"""Per-turn rewards from env signals: weighted events, potential-based shaping, bounded
shaping, and the information gain of each turn about the gold answer.

``turngym.rewards.info_gain`` imports torch lazily (only when scoring), so importing this
package stays light.
"""

from turngym.rewards.info_gain import InfoGainScorer, answer_logprobs, episode_histories, information_gain
from turngym.rewards.shaping import RewardShaper, ShapedRewards, bound_cumulative, delta_rewards, potential_shaping

__all__ = [
    "InfoGainScorer",
    "RewardShaper",
    "ShapedRewards",
    "answer_logprobs",
    "bound_cumulative",
    "delta_rewards",
    "episode_histories",
    "information_gain",
    "potential_shaping",
]
