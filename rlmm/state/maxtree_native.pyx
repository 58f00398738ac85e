# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# distutils: language = c++
"""The fold's timestamp-tree pages in plain C structures: the trees of ``rlmm/state/maxtree.py`` (the reference, whose
docstring says what a tree is), changed by the same steps and written as the same rows.

Pages live in a ``TreeCache`` (C++ hash maps of C structs, kept across batches by the view) instead of Python
objects; a batch's ``TreePages`` changes them and writes the changed ones to its KV at ``flush``. Only the KV's
calls, the tree prefixes and the positions cross into Python. ``tests/test_native_trees.py`` drives both
implementations through the same random changes and compares every write.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.unordered_set cimport unordered_set
from libcpp.vector cimport vector
from cython.operator cimport dereference as deref, preincrement as inc

from rlmm.records.big_endian cimport get_i64, get_u64, put_u64

cdef enum:
    BITS = 4  # of the position per level
    SLOTS = 16
    MASK = 15
    LEVELS = 17  # 64 // BITS + 1
    TREE_MAX = 32  # bytes of a tree's prefix
    KEY_MAX = 41  # a page's key: the prefix, its level, its node
    SLOT_BYTES = 25  # a slot in a page's row: first, second (i64), child level (u8), child (u64), big-endian

cdef bytes TOP_KEY = b"\xff"  # after a tree's prefix: the key of its top's row

cdef struct Page

cdef struct Slot:
    int64_t first
    int64_t second
    uint64_t child
    Page* below  # the page it points at, once loaded
    uint8_t child_level  # 0: the position ``child``; else the page of that level and node

cdef struct Page:
    Page* parent  # the page whose slot ``parent_slot`` points here, once known
    uint64_t node  # the positions it covers, shifted right by 4·level
    int64_t max_first
    int64_t max_second
    int count
    int parent_slot
    uint16_t used  # bit set of the slots in use
    uint16_t dirty  # bit set of the slots changed since the last flush
    uint8_t level
    uint8_t key_len
    bint stored  # whether the KV holds the page
    bint touched  # whether the batch's ``TreePages`` lists it as changed
    char key[KEY_MAX]
    Slot slots[SLOTS]

cdef struct Top:
    bint present
    uint8_t level
    uint64_t node
    Page* page  # its page once found (NULL before): the pages of a tree are freed only with its top


cdef inline uint64_t shr(uint64_t x, int n) noexcept nogil:
    return 0 if n >= 64 else x >> n


cdef inline uint64_t shl(uint64_t x, int n) noexcept nogil:
    return 0 if n >= 64 else x << n


cdef inline int slot_of(Page* page, uint64_t position) noexcept nogil:
    return <int>((position >> (BITS * (page.level - 1))) & MASK)


cdef inline bint used(Page* page, int slot) noexcept nogil:
    return (page.used >> slot) & 1


cdef void set_slot(Page* page, int slot, int64_t first, int64_t second, uint8_t child_level, uint64_t child) noexcept nogil:
    if not used(page, slot):
        page.count += 1
        page.used |= <uint16_t>(1 << slot)
    cdef Slot* held = &page.slots[slot]
    held.first = first
    held.second = second
    held.child_level = child_level
    held.child = child
    held.below = NULL
    page.dirty |= <uint16_t>(1 << slot)


cdef void clear_slot(Page* page, int slot) noexcept nogil:
    if used(page, slot):
        page.used &= <uint16_t>~(1 << slot)
        page.slots[slot].below = NULL
        page.count -= 1
        page.dirty |= <uint16_t>(1 << slot)


cdef void link(Page* page, int slot, Page* below) noexcept nogil:
    page.slots[slot].below = below
    if below != NULL:
        below.parent = page
        below.parent_slot = slot


cdef Slot only(Page* page) except *:
    """A copy of the one slot in use (the page is about to change)."""
    cdef int slot
    for slot in range(SLOTS):
        if used(page, slot):
            return page.slots[slot]
    raise AssertionError(f"tree page {page.key[:page.key_len].hex()} is empty")


cdef bint recompute_max(Page* page) noexcept nogil:
    """Returns whether the maxima changed."""
    cdef int64_t before_first = page.max_first, before_second = page.max_second
    cdef bint found = False
    cdef int slot
    for slot in range(SLOTS):
        if used(page, slot):
            if not found or page.slots[slot].first > page.max_first:
                page.max_first = page.slots[slot].first
            if not found or page.slots[slot].second > page.max_second:
                page.max_second = page.slots[slot].second
            found = True
    return page.max_first != before_first or page.max_second != before_second


cdef int branch_level(uint64_t a, uint64_t b, int above) noexcept nogil:
    """The lowest level above ``above`` whose pages hold both positions."""
    cdef int level = above + 1
    while shr(a, BITS * level) != shr(b, BITS * level):
        level += 1
    return level


cdef bytes pack_page(Page* page):
    cdef int n = page.count
    cdef bytes value = PyBytes_FromStringAndSize(NULL, 2 + SLOT_BYTES * n)
    cdef char* out = PyBytes_AS_STRING(value)
    cdef int slot
    cdef Slot* held
    out[0] = <char>(page.used >> 8)
    out[1] = <char>(page.used & 0xFF)
    out += 2
    for slot in range(SLOTS):
        if used(page, slot):
            held = &page.slots[slot]
            put_u64(<uint8_t*>out, <uint64_t>held.first)
            put_u64(<uint8_t*>out + 8, <uint64_t>held.second)
            out[16] = <char>held.child_level
            put_u64(<uint8_t*>out + 17, held.child)
            out += SLOT_BYTES
    return value


cdef void free_pages(unordered_map[string, Page*]& pages) noexcept:
    cdef unordered_map[string, Page*].iterator it = pages.begin()
    while it != pages.end():
        free(deref(it).second)
        inc(it)
    pages.clear()


cdef class TreeCache:
    """The pages and tops of the trees, kept across batches by the KV's only writer."""

    cdef unordered_map[string, Page*] pages
    cdef unordered_map[string, Top] tops
    cdef unsigned long generation  # changes when pages are freed: a ``TreePages`` of an earlier one refuses to run

    def __len__(self) -> int:
        return self.pages.size() + self.tops.size()

    def clear(self) -> None:
        free_pages(self.pages)
        self.tops.clear()
        self.generation += 1

    def pages_over(self, kv, str cf) -> TreePages:
        return TreePages(self, kv, cf)

    def __dealloc__(self):
        free_pages(self.pages)


cdef class TreePages:
    """The trees of one column family of ``kv``, read through from it into ``cache``; changed pages are written
    back by ``flush``."""

    cdef TreeCache cache
    cdef object cf, _kv, _get, _put, _put_new
    cdef unsigned long generation
    cdef vector[Page*] touched  # pages whose slots changed since the last flush
    cdef unordered_set[string] dirty_tops

    def __init__(self, TreeCache cache, kv, str cf) -> None:
        self.cache = cache
        self.cf = cf
        self._kv = kv  # its delete is looked up when a page or top goes (a restore's write-only KV has none)
        self._get, self._put, self._put_new = kv.get, kv.put, kv.put_new
        self.generation = cache.generation

    cdef int _check(self) except -1:
        if self.generation != self.cache.generation:
            raise RuntimeError("the tree cache was cleared under a batch's tree pages")
        return 0

    cdef inline void _touch(self, Page* page) noexcept:
        if not page.touched:
            page.touched = True
            self.touched.push_back(page)

    cdef Page* _cached(self, const string& name) noexcept:
        cdef unordered_map[string, Page*].iterator it = self.cache.pages.find(name)
        if it == self.cache.pages.end():
            return NULL
        return deref(it).second

    cdef Page* _created(self, const string& name, int level, uint64_t node) except NULL:
        cdef Page* page = <Page*>calloc(1, sizeof(Page))
        if page == NULL:
            raise MemoryError()
        memcpy(page.key, name.data(), name.size())
        page.key_len = <uint8_t>name.size()
        page.level = level
        page.node = node
        self.cache.pages[name] = page
        return page

    cdef Page* _page(self, const char* tree, int tree_len, int level, uint64_t node) except NULL:
        """A page that the tree's structure says exists (read from the KV and cached once it is read whole)."""
        cdef string name = _page_name(tree, tree_len, level, node)
        cdef Page* page = self._cached(name)
        cdef bytes raw
        cdef const unsigned char* at
        cdef int slot, used_slots = 0, slots_used = 0
        if page == NULL:
            raw = self._get(self.cf, PyBytes_FromStringAndSize(name.data(), name.size()))
            if raw is not None:
                at = <const unsigned char*>PyBytes_AS_STRING(raw)
                if PyBytes_GET_SIZE(raw) >= 2:
                    used_slots = (at[0] << 8) | at[1]
                for slot in range(SLOTS):
                    slots_used += (used_slots >> slot) & 1
                if PyBytes_GET_SIZE(raw) < 2 + SLOT_BYTES * slots_used:
                    raise AssertionError(f"tree page {bytes(name).hex()} is truncated")
            page = self._created(name, level, node)
            if raw is not None:
                at += 2
                for slot in range(SLOTS):
                    if (used_slots >> slot) & 1:
                        set_slot(page, slot, get_i64(at), get_i64(at + 8), at[16], get_u64(at + 17))
                        at += SLOT_BYTES
                page.stored = True
            page.dirty = 0
            recompute_max(page)
        if not page.count:
            raise AssertionError(f"tree page {bytes(name).hex()} is missing")
        return page

    cdef Page* _new_page(self, const char* tree, int tree_len, int level, uint64_t node) except NULL:
        """A page that the tree's structure says does not exist (the KV holds it only if a cached copy, dropped
        since the last flush, still has to be deleted)."""
        cdef string name = _page_name(tree, tree_len, level, node)
        cdef Page* page = self._cached(name)
        if page == NULL:
            page = self._created(name, level, node)
        elif page.count:
            raise AssertionError(f"tree page {bytes(name).hex()} exists already")
        self._touch(page)
        return page

    cdef Page* _below(self, const char* tree, int tree_len, Page* page, int slot) except NULL:
        """The page a slot points at."""
        cdef Slot* held = &page.slots[slot]
        cdef Page* found = held.below
        if found == NULL:
            found = self._page(tree, tree_len, held.child_level, held.child)
            link(page, slot, found)
        return found

    cdef void _drop(self, Page* page) noexcept:
        cdef int slot
        for slot in range(SLOTS):
            clear_slot(page, slot)
        page.parent = NULL
        self._touch(page)

    cdef Top* _top(self, const char* tree, int tree_len) except NULL:
        """The tree's top, in the cache (which moves none of its entries while it holds them)."""
        cdef string name = string(tree, <size_t>tree_len)
        cdef unordered_map[string, Top].iterator it = self.cache.tops.find(name)
        if it != self.cache.tops.end():
            return &deref(it).second
        cdef Top top
        top.present, top.level, top.node = False, 0, 0
        top.page = NULL
        cdef bytes raw = self._get(self.cf, PyBytes_FromStringAndSize(tree, tree_len) + TOP_KEY)
        if raw is not None:
            if PyBytes_GET_SIZE(raw) != 9:
                raise AssertionError(f"tree top {tree[:tree_len].hex()} is not 9 bytes")
            top.present = True
            top.level = <uint8_t>PyBytes_AS_STRING(raw)[0]
            top.node = get_u64(<const unsigned char*>PyBytes_AS_STRING(raw) + 1)
        self.cache.tops[name] = top
        return &self.cache.tops[name]

    cdef Page* _top_page(self, const char* tree, int tree_len, Top* top) except NULL:
        """The page of a tree's top (which holds it)."""
        if top.page == NULL:
            top.page = self._page(tree, tree_len, top.level, top.node)
        elif not top.page.count:
            raise AssertionError(f"tree page {top.page.key[:top.page.key_len].hex()} is missing")
        return top.page

    cdef void _set_top(
        self, const char* tree, int tree_len, bint present, int level, uint64_t node, Page* page
    ) noexcept:
        """``page``: the top's page if known (NULL: found when asked for)."""
        cdef string name = string(tree, <size_t>tree_len)
        cdef Top top
        top.present, top.level, top.node, top.page = present, level, node, page
        self.cache.tops[name] = top
        self.dirty_tops.insert(name)

    cdef void _new_top(self, const char* tree, int tree_len, Page* page) noexcept:
        recompute_max(page)
        self._touch(page)
        self._set_top(tree, tree_len, True, page.level, page.node, page)

    cdef int _point_at(self, Page* above, Page* page) except -1:
        """Make a slot of ``above`` point at ``page`` (the old top), or at its one position if it has only that."""
        cdef int slot
        cdef Slot held
        if page.count > 1:
            slot = slot_of(above, shl(page.node, BITS * page.level))
            set_slot(above, slot, page.max_first, page.max_second, page.level, page.node)
            link(above, slot, page)
            return 0
        held = only(page)
        set_slot(above, slot_of(above, held.child), held.first, held.second, 0, held.child)
        self._drop(page)
        return 0

    def insert(self, bytes tree not None, uint64_t position, int64_t first, int64_t second) -> None:
        """Add a position the tree does not hold. The maxima above are brought up to date by ``flush``."""
        self._check()
        cdef const char* t = PyBytes_AS_STRING(tree)
        cdef int n = _tree_length(tree)
        cdef Top* top = self._top(t, n)
        cdef Page* page
        cdef Page* above
        cdef Page* branch
        cdef Slot* held
        cdef int slot, level, branch_slot
        cdef uint64_t spot
        if not top.present:
            page = self._new_page(t, n, 1, position >> BITS)
            set_slot(page, slot_of(page, position), first, second, 0, position)
            self._new_top(t, n, page)
            return
        page = self._top_page(t, n, top)
        if shr(position, BITS * page.level) != page.node:  # outside the top: a new top above both
            level = branch_level(position, shl(page.node, BITS * page.level), page.level)
            above = self._new_page(t, n, level, shr(position, BITS * level))
            self._point_at(above, page)
            set_slot(above, slot_of(above, position), first, second, 0, position)
            self._new_top(t, n, above)
            return
        while True:
            slot = slot_of(page, position)
            if not used(page, slot):
                set_slot(page, slot, first, second, 0, position)
                break
            held = &page.slots[slot]
            if held.child_level == 0 and held.child == position:
                raise AssertionError(f"position {position} is in the tree already")
            if held.child_level and shr(position, BITS * held.child_level) == held.child:
                page = self._below(t, n, page, slot)
                continue
            # the position leaves what the slot points at: a page where the two branch takes its place
            spot = held.child if held.child_level == 0 else shl(held.child, BITS * held.child_level)
            level = branch_level(position, spot, held.child_level)
            branch = self._new_page(t, n, level, shr(position, BITS * level))
            branch_slot = slot_of(branch, spot)
            set_slot(branch, branch_slot, held.first, held.second, held.child_level, held.child)
            if held.below != NULL:
                link(branch, branch_slot, held.below)
            set_slot(branch, slot_of(branch, position), first, second, 0, position)
            recompute_max(branch)
            set_slot(page, slot, branch.max_first, branch.max_second, level, branch.node)
            link(page, slot, branch)
            break
        self._touch(page)

    def remove(self, bytes tree not None, uint64_t position) -> None:
        """Remove a position the tree holds. The maxima above are brought up to date by ``flush``."""
        self._check()
        cdef const char* t = PyBytes_AS_STRING(tree)
        cdef int n = _tree_length(tree)
        cdef Top* top = self._top(t, n)
        if not top.present:
            raise AssertionError(f"tree {tree.hex()} holds no position")
        cdef Page* page = self._top_page(t, n, top)
        cdef Page* parent = NULL
        cdef int parent_slot = 0, slot
        cdef Slot* held
        cdef Slot last
        while True:
            slot = slot_of(page, position)
            if not used(page, slot):
                raise AssertionError(f"tree {tree.hex()} does not hold position {position}")
            held = &page.slots[slot]
            if held.child_level == 0:
                break
            parent, parent_slot = page, slot
            page = self._below(t, n, page, slot)
        if held.child != position:
            raise AssertionError(f"tree {tree.hex()} does not hold position {position}")
        clear_slot(page, slot)
        self._touch(page)
        if parent == NULL:
            self._settle_top(t, n, page)
        elif page.count == 1:  # it no longer branches: its parent's slot points where its last slot pointed
            last = only(page)
            set_slot(parent, parent_slot, last.first, last.second, last.child_level, last.child)
            if last.below != NULL:
                link(parent, parent_slot, last.below)
            self._drop(page)
            self._touch(parent)

    cdef int _settle_top(self, const char* t, int n, Page* page) except -1:
        """The top lost a slot: it goes when nothing or one page is left under it; one position left is topped by
        its level-1 page."""
        cdef Slot last
        cdef Page* low
        if page.count == 0:
            self._set_top(t, n, False, 0, 0, NULL)
            return 0
        if page.count == 1:
            last = only(page)
            if last.child_level:
                if last.below != NULL:
                    last.below.parent = NULL
                self._drop(page)
                self._set_top(t, n, True, last.child_level, last.child, last.below)
            elif page.level > 1:
                self._drop(page)
                low = self._new_page(t, n, 1, last.child >> BITS)
                set_slot(low, slot_of(low, last.child), last.first, last.second, 0, last.child)
                self._new_top(t, n, low)
        return 0

    def flush(self) -> None:
        """Bring the maxima of the changed pages and of their ancestors up to date, lowest level first, and
        write the changed pages."""
        self._check()
        cdef vector[vector[Page*]] by_level
        by_level.resize(LEVELS)
        cdef Page* page
        cdef Page* parent
        cdef Slot* held
        cdef size_t i
        cdef int level
        for page in self.touched:
            by_level[page.level].push_back(page)
        for level in range(LEVELS):
            i = 0
            while i < by_level[level].size():
                page = by_level[level][i]
                i += 1
                parent = page.parent
                if not page.count or not recompute_max(page) or parent == NULL or not parent.count:
                    continue
                held = &parent.slots[page.parent_slot]
                if not used(parent, page.parent_slot) or held.below != page:
                    continue
                if held.first != page.max_first or held.second != page.max_second:
                    held.first, held.second = page.max_first, page.max_second
                    parent.dirty |= <uint16_t>(1 << page.parent_slot)
                if not parent.touched:
                    self._touch(parent)
                    by_level[parent.level].push_back(parent)
        cf = self.cf
        for page in self.touched:
            page.touched = False
            if not page.dirty:
                continue
            key = PyBytes_FromStringAndSize(page.key, page.key_len)
            if page.count:
                if page.stored:
                    self._put(cf, key, pack_page(page))
                else:
                    self._put_new(cf, key, pack_page(page))
                    page.stored = True
            elif page.stored:
                self._kv.delete(cf, key)
                page.stored = False
            page.dirty = 0
        self.touched.clear()
        cdef char top_value[9]
        cdef Top top
        cdef string name
        for name in self.dirty_tops:
            key = PyBytes_FromStringAndSize(name.data(), name.size()) + TOP_KEY
            top = self.cache.tops[name]
            if top.present:
                top_value[0] = <char>top.level
                put_u64(<uint8_t*>top_value + 1, top.node)
                self._put(cf, key, PyBytes_FromStringAndSize(top_value, 9))
            else:
                self._kv.delete(cf, key)
        self.dirty_tops.clear()

    def forget(self, bytes prefix not None) -> None:
        """Drop what is cached of the trees under ``prefix`` (their keys were deleted from the KV)."""
        self._check()
        cdef string start = string(<const char*>PyBytes_AS_STRING(prefix), <size_t>PyBytes_GET_SIZE(prefix))
        cdef vector[Page*] kept
        cdef Page* page
        for page in self.touched:
            if _starts_with(string(<const char*>page.key, <size_t>page.key_len), start):
                page.touched = False
            else:
                kept.push_back(page)
        self.touched.swap(kept)
        cdef unordered_map[string, Page*].iterator it = self.cache.pages.begin()
        while it != self.cache.pages.end():
            if _starts_with(deref(it).first, start):
                free(deref(it).second)
                it = self.cache.pages.erase(it)
            else:
                inc(it)
        cdef unordered_map[string, Top].iterator top = self.cache.tops.begin()
        while top != self.cache.tops.end():
            if _starts_with(deref(top).first, start):
                top = self.cache.tops.erase(top)
            else:
                inc(top)
        cdef unordered_set[string].iterator name = self.dirty_tops.begin()
        while name != self.dirty_tops.end():
            if _starts_with(deref(name), start):
                name = self.dirty_tops.erase(name)
            else:
                inc(name)


cdef inline string _page_name(const char* tree, int tree_len, int level, uint64_t node) noexcept:
    """A page's key: the tree's prefix, the page's level and node (big-endian)."""
    cdef char key[KEY_MAX]
    memcpy(key, tree, tree_len)
    key[tree_len] = <char>level
    put_u64(<uint8_t*>key + tree_len + 1, node)
    return string(<const char*>key, <size_t>(tree_len + 9))


cdef inline bint _starts_with(const string& key, const string& prefix) noexcept:
    return key.size() >= prefix.size() and key.compare(0, prefix.size(), prefix) == 0


cdef int _tree_length(bytes tree) except -1:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(tree)
    if n > TREE_MAX:
        raise ValueError(f"a tree's prefix is at most {TREE_MAX} bytes, not {n}")
    return <int>n
