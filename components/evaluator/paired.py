"""Comparing two models on the same images, image by image: exact McNemar tests.

Both models score every image of a set, so the comparison is paired: the images both
get right or both get wrong say nothing about which is better, and only the discordant
ones count, b (the candidate alone is right) against c (the champion alone is right).
Under "equally good", each discordant image is a fair coin, so the evidence that the
candidate is worse is the exact one-sided binomial tail P(X >= c), X ~ Binomial(b+c, 1/2):
McNemar's exact test. It is far more sensitive than comparing two accuracies on 50
images, where one image is 2%, because it ignores the images that cannot differ.

Two rules refuse, each set and each class judged alone (blessing.py):
  significantly worse: c > b with p <= significance (any drop, however small, that the
    images show beyond doubt);
  worse beyond the practical margin: the one-sided (1 - margin_significance) confidence
    bound of the drop (c - b) / n lies beyond the margin (a large drop with some
    evidence: the Wald bound of a paired difference, its standard error
    sqrt(b + c - (c - b)^2 / n) / n), on at least fewest_discordant(margin_significance)
    discordant images.
A set with fewer discordant images than that cannot refuse anything, and is said to be
too small to decide. No TensorFlow here: pure arithmetic, checked on hand-made counts.
"""

from __future__ import annotations

import dataclasses
import math

TEST_NAME = "McNemar exact, one-sided"
# The power at which a decision states the smallest drop it could have seen.
POWER = 0.8


def _normal_quantile(p: float) -> float:
    """The standard normal's p-quantile, by bisection on erfc (no SciPy here)."""
    low, high = -10.0, 10.0
    for _ in range(100):
        middle = (low + high) / 2
        if 0.5 * math.erfc(-middle / math.sqrt(2.0)) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


@dataclasses.dataclass(frozen=True)
class Paired:
    """Two models on the same images.

    Attributes:
      images: how many images both scored.
      candidate_only: images the candidate alone got right (b).
      champion_only: images the champion alone got right (c).
    """

    images: int
    candidate_only: int
    champion_only: int

    @property
    def discordant(self) -> int:
        return self.candidate_only + self.champion_only

    @property
    def drop(self) -> float:
        """The champion's accuracy minus the candidate's (positive: the candidate is worse)."""
        return (self.champion_only - self.candidate_only) / self.images if self.images else 0.0

    @property
    def p_worse(self) -> float:
        """The exact one-sided McNemar p-value of "the candidate is worse"."""
        return binomial_tail(self.discordant, self.champion_only)

    def p_beyond(self, margin: float) -> float:
        """The one-sided p-value of "the drop is beyond `margin`" (Wald, paired)."""
        if not self.images or self.drop <= margin:
            return 1.0
        b, c, n = self.candidate_only, self.champion_only, self.images
        error = math.sqrt(max(b + c - (c - b) ** 2 / n, 1.0)) / n
        return 0.5 * math.erfc((self.drop - margin) / error / math.sqrt(2.0))

    def smallest_visible_drop(self, significance: float, power: float = POWER) -> float | None:
        """The smallest drop in accuracy the McNemar test at `significance` finds with
        probability `power` on these images: the evidence a decision rests on.

        A paired test sees only discordant images, so the drop it can see is
        (z_{1-significance} + z_power) * sqrt(d / n) for a discordant share d; a drop of
        delta also makes at least delta of the images discordant, so it is never below
        (z_{1-significance} + z_power)^2 / n (on 30 images, 21 points; on 3,000, 0.2).
        None when no image was scored.
        """
        if not self.images:
            return None
        z = _normal_quantile(1.0 - significance) + _normal_quantile(power)
        share = self.discordant / self.images
        return max(z * math.sqrt(share / self.images), z * z / self.images)

    def __add__(self, other: Paired) -> Paired:
        return Paired(
            self.images + other.images,
            self.candidate_only + other.candidate_only,
            self.champion_only + other.champion_only,
        )


@dataclasses.dataclass(frozen=True)
class ClassPaired:
    """Both models on the images of one class."""

    label: str
    paired: Paired


def binomial_pmf(n: int, k: int, p: float) -> float:
    """P(X = k) for X ~ Binomial(n, p), 0 < p < 1, computed in log space (no overflow)."""
    return math.exp(
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )


def binomial_tail(n: int, k: int, p: float = 0.5) -> float:
    """P(X >= k) for X ~ Binomial(n, p), exactly."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    return min(sum(binomial_pmf(n, i, p) for i in range(k, n + 1)), 1.0)


def fewest_discordant(significance: float) -> int:
    """The fewest discordant images that can show anything at this level: all of them
    against the candidate gives p = 2^-d."""
    if significance <= 0.0:
        return 0
    return max(1, math.ceil(math.log2(1.0 / significance)))


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One paired comparison judged.

    Attributes:
      worse: the candidate is refused on it.
      too_small: no outcome on so few discordant images could have refused it.
      detail: one line with the counts, the test, its p-value and the margin.
    """

    worse: bool
    too_small: bool
    detail: str


def judge(
    paired: Paired, margin: float, significance: float, margin_significance: float
) -> Verdict:
    """Whether the candidate is worse on these images (the two rules of the module)."""
    p = paired.p_worse
    needed = fewest_discordant(max(margin_significance, significance))
    too_small = paired.discordant < needed
    significantly = paired.champion_only > paired.candidate_only and p <= significance
    p_margin = paired.p_beyond(margin)
    beyond_margin = margin_significance > 0 and not too_small and p_margin <= margin_significance
    detail = (
        f"{paired.candidate_only} right by the candidate alone, "
        f"{paired.champion_only} by the champion alone: {TEST_NAME} p={p:.3g} "
        f"(refuses at {significance:g}); drop {paired.drop:+.4f}, "
        + (
            f"beyond the margin {margin:g} at p={p_margin:.3g} (refuses at {margin_significance:g})"
            if margin_significance > 0
            else "no margin (a class was added: the old classes must not be significantly worse)"
        )
    )
    if too_small:
        detail += (
            f"; too small to decide: {paired.discordant} discordant images, at least "
            f"{needed} needed"
        )
    return Verdict(significantly or beyond_margin, too_small, detail)
