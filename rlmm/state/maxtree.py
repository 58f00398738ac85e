"""Trees of maxima kept in an ordered KV: the first position, in order, whose two values reach two bounds.

A tree lives under one key prefix of one column family and holds distinct positions (u64), each with two
signed values (for the view: an offset-index entry's start in the epoch, with its segment's max timestamp
and end offset). It is a compressed 16-ary trie of the positions: a page of level L covers the positions
that agree but for their lowest 4·L bits and has 16 slots, one per sixteenth of its range, each pointing
at the one position of that sixteenth (with its values) or at the page where its positions branch (with
the greatest of each value below). A page exists where positions branch (two slots used or more) and at
the top, the lowest page covering every position; so the pages depend on the positions only, there are
fewer pages than positions, and a path from the top is as long as the branchings on the way (about log16
of the number of positions). Each page is one KV entry (its used slots, at most 16 of 25 bytes), so that
the positions a batch adds side by side, which share their pages, write a few rows:

* ``insert`` and ``remove`` walk down from the top to the position and change a slot (making or dropping
  at most one page);
* ``first`` reads the top page, goes into the first slot whose maxima reach both bounds, and so on down
  to a position: one point read per page. When one bound is trivially met, or the second values grow with the
  positions (segments whose offsets do not overlap), the slot it enters always holds an answer; a slot
  whose two maxima come from different positions may send it into a subtree without one, and it then goes
  on with the next slot, slower but never wrong.

Pages are changed in memory (``TreePages``, over a ``TreeCache`` that the view keeps across batches, linked to
their parents), and ``flush`` brings the maxima of the changed pages and their ancestors up to date, once per
batch however many positions came, and writes the changed pages.

This module is the reference. With the compiled core the fold uses ``rlmm/state/maxtree_native.pyx``, the same
steps over C structures (``rlmm/state/trees.py`` chooses); ``first``, the query, is this module's in both.
"""

from __future__ import annotations

import struct
from typing import Final

from rlmm.state.kv import ReadKV, WriteKV

BITS: Final = 4  # of the position per level
SLOTS: Final = 1 << BITS
_MASK: Final = SLOTS - 1
_NODE: Final = struct.Struct(">BQ")  # level, node: a page's key after the tree's prefix; the top's value
_USED: Final = struct.Struct(">H")  # a page's value: the bit set of its used slots, then each of them
_SLOT: Final = struct.Struct(">qqBQ")  # first, second, child level (0: a position), child (position or node)
_TOP_KEY: Final = b"\xff"


class Slot:
    """Where a slot points (``child_level`` 0: the position ``child``; else the page of that level and node)
    and the greatest values there."""

    def __init__(self, first: int, second: int, child_level: int, child: int) -> None:
        self.first = first
        self.second = second
        self.child_level = child_level
        self.child = child
        self.below: Page | None = None  # the page it points at, once loaded


class Page:
    """A page's slots. ``stored``: whether the KV holds the page; ``dirty``: the bit set of the slots changed since
    the last flush."""

    def __init__(self, key: bytes, level: int, node: int) -> None:
        self.key = key  # the tree's prefix, level and node: each slot's key is this and the slot
        self.level = level
        self.node = node  # the positions it covers, shifted right by 4·level
        self.slots: list[Slot | None] = [None] * SLOTS
        self.count = 0
        self.parent: Page | None = None  # the page whose slot ``parent_slot`` points here, once known
        self.parent_slot = 0
        self.max_first = 0
        self.max_second = 0
        self.stored = False
        self.dirty = 0

    def slot_of(self, position: int) -> int:
        return (position >> (BITS * (self.level - 1))) & _MASK

    def set(self, slot: int, first: int, second: int, child_level: int, child: int) -> None:
        if self.slots[slot] is None:
            self.count += 1
        self.slots[slot] = Slot(first, second, child_level, child)
        self.dirty |= 1 << slot

    def clear(self, slot: int) -> None:
        if self.slots[slot] is not None:
            self.slots[slot] = None
            self.count -= 1
            self.dirty |= 1 << slot

    def link(self, slot: int, page: Page | None) -> None:
        held = self.slots[slot]
        assert held is not None
        held.below = page
        if page is not None:
            page.parent, page.parent_slot = self, slot

    def only(self) -> tuple[int, Slot]:
        for slot in range(SLOTS):
            held = self.slots[slot]
            if held is not None:
                return slot, held
        raise AssertionError(f"tree page {self.key.hex()} is empty")

    def recompute_max(self) -> bool:
        """Returns whether the maxima changed."""
        before_first, before_second = self.max_first, self.max_second
        found = False
        for held in self.slots:
            if held is not None:
                if not found or held.first > self.max_first:
                    self.max_first = held.first
                if not found or held.second > self.max_second:
                    self.max_second = held.second
                found = True
        return self.max_first != before_first or self.max_second != before_second


def _load(kv: ReadKV, cf: str, tree: bytes, level: int, node: int) -> Page:
    page = Page(tree + _NODE.pack(level, node), level, node)
    raw = kv.get(cf, page.key)
    if raw is not None:
        used = _USED.unpack_from(raw)[0]
        at = _USED.size
        for slot in range(SLOTS):
            if used >> slot & 1:
                first, second, child_level, child = _SLOT.unpack_from(raw, at)
                page.set(slot, first, second, child_level, child)
                at += _SLOT.size
        page.stored = True
    page.dirty = 0
    page.recompute_max()
    return page


def _pack(page: Page) -> bytes:
    used = 0
    parts = [b""]
    for slot in range(SLOTS):
        held = page.slots[slot]
        if held is not None:
            used |= 1 << slot
            parts.append(_SLOT.pack(held.first, held.second, held.child_level, held.child))
    parts[0] = _USED.pack(used)
    return b"".join(parts)


class TreeCache:
    """The pages and tops of the trees, which the KV's only writer may keep across batches. (The fold's own, with
    the compiled core, is the native one: rlmm/state/trees.py.)"""

    def __init__(self) -> None:
        self.pages: dict[bytes, Page] = {}
        self.tops: dict[bytes, tuple[int, int] | None] = {}

    def __len__(self) -> int:
        return len(self.pages) + len(self.tops)

    def clear(self) -> None:
        """Empty the cache, unlinking the pages first: a page and the pages below it refer to each other."""
        for page in self.pages.values():
            _unlink(page)
        self.pages.clear()
        self.tops.clear()

    def pages_over(self, kv: WriteKV, cf: str) -> TreePages:
        return TreePages(kv, cf, self)


class TreePages:
    """The pages and tops of the trees of one column family, read through from ``kv`` and kept in ``cache``,
    written back by ``flush``."""

    def __init__(self, kv: WriteKV, cf: str, cache: TreeCache | None = None) -> None:
        self.kv = kv
        self.cf = cf
        kept = TreeCache() if cache is None else cache
        self.cache: dict[bytes, Page] = kept.pages
        self.tops: dict[bytes, tuple[int, int] | None] = kept.tops
        self._touched: set[Page] = set()  # pages whose slots changed since the last flush
        self._dirty_tops: set[bytes] = set()

    def insert(self, tree: bytes, position: int, first: int, second: int) -> None:
        insert(self, tree, position, first, second)

    def remove(self, tree: bytes, position: int) -> None:
        remove(self, tree, position)

    def page(self, tree: bytes, level: int, node: int) -> Page:
        """A page that the tree's structure says exists."""
        key = tree + _NODE.pack(level, node)
        page = self.cache.get(key)
        if page is None:
            page = self.cache[key] = _load(self.kv, self.cf, tree, level, node)
        assert page.count, f"tree page {key.hex()} is missing"
        return page

    def new_page(self, tree: bytes, level: int, node: int) -> Page:
        """A page that the tree's structure says does not exist (the KV holds it only if a cached copy, dropped
        since the last flush, still has to be deleted)."""
        key = tree + _NODE.pack(level, node)
        page = self.cache.get(key)
        if page is None:
            page = self.cache[key] = Page(key, level, node)
        assert not page.count, f"tree page {key.hex()} exists already"
        self._touched.add(page)
        return page

    def below(self, tree: bytes, page: Page, slot: int) -> Page:
        """The page a slot points at."""
        held = page.slots[slot]
        assert held is not None
        found = held.below
        if found is None:
            found = self.page(tree, held.child_level, held.child)
            page.link(slot, found)
        return found

    def changed(self, page: Page) -> None:
        self._touched.add(page)

    def drop(self, page: Page) -> None:
        for slot in range(SLOTS):
            page.clear(slot)
        page.parent = None
        self._touched.add(page)

    def top(self, tree: bytes) -> tuple[int, int] | None:
        if tree in self.tops:
            return self.tops[tree]
        raw = self.kv.get(self.cf, tree + _TOP_KEY)
        top = self.tops[tree] = None if raw is None else _NODE.unpack(raw)
        return top

    def set_top(self, tree: bytes, top: tuple[int, int] | None) -> None:
        self.tops[tree] = top
        self._dirty_tops.add(tree)

    def flush(self) -> None:
        """Bring the maxima of the changed pages and of their ancestors up to date, lowest level first, and
        write the changed pages."""
        by_level: list[list[Page]] = [[] for _ in range(64 // BITS + 1)]
        for page in self._touched:
            by_level[page.level].append(page)
        for pages_of_level in by_level:
            for page in pages_of_level:
                parent = page.parent
                if not page.count or not page.recompute_max() or parent is None or not parent.count:
                    continue
                held = parent.slots[page.parent_slot]
                if held is None or held.below is not page:
                    continue
                if held.first != page.max_first or held.second != page.max_second:
                    held.first, held.second = page.max_first, page.max_second
                    parent.dirty |= 1 << page.parent_slot
                if parent not in self._touched:
                    self._touched.add(parent)
                    by_level[parent.level].append(parent)
        kv, cf = self.kv, self.cf
        for page in self._touched:
            if not page.dirty:
                continue
            if page.count:
                if page.stored:
                    kv.put(cf, page.key, _pack(page))
                else:
                    kv.put_new(cf, page.key, _pack(page))
                    page.stored = True
            elif page.stored:
                kv.delete(cf, page.key)
                page.stored = False
            page.dirty = 0
        for tree in self._dirty_tops:
            top = self.tops[tree]
            if top is None:
                kv.delete(cf, tree + _TOP_KEY)
            else:
                kv.put(cf, tree + _TOP_KEY, _NODE.pack(top[0], top[1]))
        self._touched.clear()
        self._dirty_tops.clear()

    def forget(self, prefix: bytes) -> None:
        """Drop what is cached of the trees under ``prefix`` (their keys were deleted from the KV)."""
        for key in [k for k in self.cache if k.startswith(prefix)]:
            _unlink(self.cache.pop(key))
        for tree in [k for k in self.tops if k.startswith(prefix)]:
            del self.tops[tree]
        self._touched = {p for p in self._touched if not p.key.startswith(prefix)}
        self._dirty_tops = {k for k in self._dirty_tops if not k.startswith(prefix)}


def _unlink(page: Page) -> None:
    page.parent = None
    for held in page.slots:
        if held is not None:
            held.below = None


def _branch_level(a: int, b: int, above: int) -> int:
    """The lowest level above ``above`` whose pages hold both positions."""
    level = above + 1
    while a >> (BITS * level) != b >> (BITS * level):
        level += 1
    return level


def insert(pages: TreePages, tree: bytes, position: int, first: int, second: int) -> None:
    """Add a position the tree does not hold. The maxima above are brought up to date by ``flush``."""
    top = pages.top(tree)
    if top is None:
        page = pages.new_page(tree, 1, position >> BITS)
        page.set(page.slot_of(position), first, second, 0, position)
        _new_top(pages, tree, page)
        return
    page = pages.page(tree, top[0], top[1])
    if position >> (BITS * page.level) != page.node:  # outside the top: a new top above both
        level = _branch_level(position, page.node << (BITS * page.level), page.level)
        above = pages.new_page(tree, level, position >> (BITS * level))
        _point_at(pages, above, page)
        above.set(above.slot_of(position), first, second, 0, position)
        _new_top(pages, tree, above)
        return
    while True:
        slot = page.slot_of(position)
        held = page.slots[slot]
        if held is None:
            page.set(slot, first, second, 0, position)
            break
        assert held.child_level or held.child != position, f"position {position} is in the tree already"
        if held.child_level and position >> (BITS * held.child_level) == held.child:
            page = pages.below(tree, page, slot)
            continue
        # the position leaves what the slot points at: a page where the two branch takes its place
        spot = held.child if held.child_level == 0 else held.child << (BITS * held.child_level)
        level = _branch_level(position, spot, held.child_level)
        branch = pages.new_page(tree, level, position >> (BITS * level))
        branch.set(branch.slot_of(spot), held.first, held.second, held.child_level, held.child)
        if held.below is not None:
            branch.link(branch.slot_of(spot), held.below)
        branch.set(branch.slot_of(position), first, second, 0, position)
        branch.recompute_max()
        page.set(slot, branch.max_first, branch.max_second, level, branch.node)
        page.link(slot, branch)
        break
    pages.changed(page)


def _new_top(pages: TreePages, tree: bytes, page: Page) -> None:
    page.recompute_max()
    pages.changed(page)
    pages.set_top(tree, (page.level, page.node))


def _point_at(pages: TreePages, above: Page, page: Page) -> None:
    """Make a slot of ``above`` point at ``page`` (the old top), or at its one position if it has only that."""
    if page.count > 1:
        slot = above.slot_of(page.node << (BITS * page.level))
        above.set(slot, page.max_first, page.max_second, page.level, page.node)
        above.link(slot, page)
        return
    _, held = page.only()
    above.set(above.slot_of(held.child), held.first, held.second, 0, held.child)
    pages.drop(page)


def remove(pages: TreePages, tree: bytes, position: int) -> None:
    """Remove a position the tree holds. The maxima above are brought up to date by ``flush``."""
    top = pages.top(tree)
    assert top is not None, f"tree {tree.hex()} holds no position"
    page = pages.page(tree, top[0], top[1])
    parent: Page | None = None
    parent_slot = 0
    while True:
        slot = page.slot_of(position)
        held = page.slots[slot]
        assert held is not None, f"tree {tree.hex()} does not hold position {position}"
        if held.child_level == 0:
            break
        parent, parent_slot = page, slot
        page = pages.below(tree, page, slot)
    assert held.child == position, f"tree {tree.hex()} does not hold position {position}"
    page.clear(slot)
    pages.changed(page)
    if parent is None:
        _settle_top(pages, tree, page)
    elif page.count == 1:  # it no longer branches: its parent's slot points where its last slot pointed
        _, last = page.only()
        parent.set(parent_slot, last.first, last.second, last.child_level, last.child)
        if last.below is not None:
            parent.link(parent_slot, last.below)
        pages.drop(page)
        pages.changed(parent)


def _settle_top(pages: TreePages, tree: bytes, page: Page) -> None:
    """The top lost a slot: it goes when nothing or one page is left under it; one position left is topped by
    its level-1 page."""
    if page.count == 0:
        pages.set_top(tree, None)
        return
    if page.count == 1:
        _, last = page.only()
        if last.child_level:
            if last.below is not None:
                last.below.parent = None
            pages.drop(page)
            pages.set_top(tree, (last.child_level, last.child))
        elif page.level > 1:
            pages.drop(page)
            low = pages.new_page(tree, 1, last.child >> BITS)
            low.set(low.slot_of(last.child), last.first, last.second, 0, last.child)
            _new_top(pages, tree, low)


def first(kv: ReadKV, cf: str, tree: bytes, min_first: int, min_second: int) -> int | None:
    """The first position with first value >= ``min_first`` and second value >= ``min_second``."""
    raw = kv.get(cf, tree + _TOP_KEY)
    if raw is None:
        return None
    level, node = _NODE.unpack(raw)
    return _first_below(kv, cf, tree, level, node, min_first, min_second)


def _first_below(
    kv: ReadKV, cf: str, tree: bytes, level: int, node: int, min_first: int, min_second: int
) -> int | None:
    page = _load(kv, cf, tree, level, node)
    assert page.count, f"tree page {page.key.hex()} is missing"
    for held in page.slots:
        if held is None or held.first < min_first or held.second < min_second:
            continue
        if held.child_level == 0:
            return held.child
        found = _first_below(kv, cf, tree, held.child_level, held.child, min_first, min_second)
        if found is not None:
            return found
    return None
