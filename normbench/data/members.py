"""Each member's data: a plain run's one `Splits`, a pack's one per member (the same object for members
that share their split: every member with data.split=fixed, the members of one seed with per_seed).

    splits = MemberSplits.of(data.load_each(member_cfgs, device))
    splits.first            # what every member's splits have in common: sample shape, classes, sizes
    splits.shared           # the one Splits every member trains on, or None when each has its own
    splits.each[k]          # member k's

A pack's passes over this data (one stream a member, stacked) are normbench.pack.members' `joined` and
`each_member`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from normbench.data.splits import Splits


@dataclass(frozen=True)
class MemberSplits:
    each: tuple[Splits, ...]

    @classmethod
    def of(cls, splits: Splits | Sequence[Splits] | MemberSplits, size: int = 1) -> MemberSplits:
        """Member k's splits at k: one `Splits` stands for all `size` members (shared data)."""
        if isinstance(splits, MemberSplits):
            return splits
        each = (splits,) * size if isinstance(splits, Splits) else tuple(splits)
        if len({(len(s.train_x), len(s.val_x), len(s.test_x), s.shape) for s in each}) > 1:
            raise ValueError("a pack's members train in step: their splits must have the same sizes")
        return cls(each)

    @property
    def first(self) -> Splits:
        return self.each[0]

    @property
    def shared(self) -> Splits | None:
        return self.first if all(s is self.first for s in self.each) else None
