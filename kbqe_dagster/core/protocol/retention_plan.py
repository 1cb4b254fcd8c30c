"""Done-file retention: which done files may be deleted, and why the others are kept
(DESIGN.md §3).

Done files are the only record of committed offsets, so deleting one is safe only when
recovery (``core/protocol/offsets.py``) computes exactly the same resume point without it and stages
nothing twice. A done file is deletable when:

- its avro file is gone (loaded), and no other avro file of its range is still present (a
  sibling without a done file needs this file's manifest to roll forward);
- it belongs to the contiguous chain of committed ranges and a *later* committed range of the
  chain exists: the done files of the range that ends the chain — the newest — are always
  kept, whatever their age, because without them the partition would restart from its low
  watermark;
- every done file before it (ordered by last offset) is deleted too. Recovery starts the
  chain at the lowest remaining first offset: deleting a range while an earlier one is kept
  (its avro is pending or quarantined) would open a hole there, and recovery would *redo*
  the deleted range — duplicates. The delete list is therefore a prefix in that order and
  must be executed in order, stopping at the first failure; every prefix of it is safe.
  A quarantined file thus holds back retention of its partition until an operator acts.
- it is not at or after the first hole: the ranges after a hole are what tells the planner
  where the hole ends. Deleting one would widen the hole and the planner would re-stage
  offsets that were already committed.

Storage Write delivery (core/protocol/delivery.py): a done file of a storage_write table
never has an avro file, so it counts as loaded. The intents of committed ranges and their
refusal notes come first in the delete list: their done files say everything.

Markers follow the same rules (they have no avro file). Ranges that end before the bootstrap
anchor are superseded and deletable once their avro files are gone; they come first in the
delete order because deleting the anchor while an older done file remains would move the
chain start back to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from kbqe_dagster.core.protocol.delivery import delivery_notes_to_delete
from kbqe_dagster.core.protocol.naming import DoneFileName, FileKey, ParsedListing, parse_listing
from kbqe_dagster.core.protocol.offsets import CommittedRange, PartitionChain, recover


class KeepReason(StrEnum):
    AVRO_PRESENT = "its avro file is not loaded yet"
    RANGE_HAS_AVRO = "another avro file of its range is still present"
    NEWEST = "newest committed range of the partition: resume point"
    BEHIND_KEPT = "an earlier done file of its partition is kept: deleting this would open a hole"
    AFTER_HOLE = "at or after the first hole in the committed chain: it bounds the hole"


@dataclass(frozen=True)
class KeptDoneFile:
    name: str
    reason: KeepReason


@dataclass(frozen=True)
class RetentionPlan:
    """``delete``: done files to delete, in this order, stopping at the first failure;
    ``keep``: every other done file with the reason it stays."""

    delete: tuple[str, ...]
    keep: tuple[KeptDoneFile, ...]


def plan_retention(names: Iterable[str] | ParsedListing) -> RetentionPlan:
    """Decide retention for every done file in one staging listing (avro and done names)."""
    listing = names if isinstance(names, ParsedListing) else parse_listing(names)
    avro_keys = {a.key for a in listing.avro}
    ranges_with_avro = {(a.key.topic, a.key.partition, a.key.first_offset) for a in listing.avro}
    delete: list[str] = list(delivery_notes_to_delete(listing))
    keep: list[KeptDoneFile] = []
    for chain in recover(listing.done).values():
        part_delete, part_keep = _plan_partition(chain, avro_keys, ranges_with_avro)
        delete.extend(part_delete)
        keep.extend(part_keep)
    return RetentionPlan(tuple(delete), tuple(keep))


def _plan_partition(
    chain: PartitionChain,
    avro_keys: set[FileKey],
    ranges_with_avro: set[tuple[str, int, int]],
) -> tuple[list[str], list[KeptDoneFile]]:
    superseded = _files(chain.superseded)
    chained = _files(chain.chain)
    end = chain.chain_last

    delete: list[str] = []
    keep: list[KeptDoneFile] = []
    blocked = False
    order = [(f, False) for f in superseded] + [(f, True) for f in chained]
    for done, in_chain in order:
        reason = None
        # A done file of the newest range is kept for that, its lasting reason, even behind
        # another kept one (a range writes one done file per table: its first one blocks the
        # rest, which are no less the resume point).
        newest = in_chain and done.last_offset == end
        if blocked and not newest:
            reason = KeepReason.BEHIND_KEPT
        elif done.key in avro_keys:
            reason = KeepReason.AVRO_PRESENT
        elif (done.key.topic, done.key.partition, done.first_offset) in ranges_with_avro:
            reason = KeepReason.RANGE_HAS_AVRO
        elif newest:
            reason = KeepReason.NEWEST
        if reason is None:
            delete.append(done.name)
        else:
            keep.append(KeptDoneFile(done.name, reason))
            blocked = True
    keep.extend(KeptDoneFile(d.name, KeepReason.AFTER_HOLE) for d in _files(chain.after_hole))
    return delete, keep


def _files(ranges: Iterable[CommittedRange]) -> list[DoneFileName]:
    # Ordered by last offset, a prefix never uncovers an offset between the remaining files:
    # any remaining file that starts before such an offset ends at or after every deleted
    # one, so it covers it. Plain first-offset order would not do for overlapping legacy
    # files: deleting 0..100 first would uncover 51..59 between 5..50 and 60..200.
    return sorted(
        (d for r in ranges for d in r.done),
        key=lambda d: (d.last_offset, d.first_offset, d.name),
    )
