"""Sequences (paragraphs, tables, slides) matched in order: the common start and end, then
difflib between anchors, within a time budget, else by position."""

import bisect
import collections
import difflib
import time

from .core import STARTED


# Paragraphs, tables, slides (see match()): seconds after the start for difflib, and the longest
# stretch it is given. Beyond AUTOJUNK_FROM items, anchors are looked for and difflib's autojunk
# bounds the time repeated items (empty paragraphs) cost.
MATCH_SECONDS = 30
MATCH_LIMIT = 20_000
AUTOJUNK_FROM = 2000


class BudgetMatcher(difflib.SequenceMatcher):
    """difflib's matcher, giving up (TimeoutError) once the deadline has passed."""

    def __init__(self, a, b, deadline):
        self.deadline = deadline
        super().__init__(None, a, b, autojunk=len(a) + len(b) > AUTOJUNK_FROM)

    def find_longest_match(self, alo=0, ahi=None, blo=0, bhi=None):
        if time.monotonic() > self.deadline:
            raise TimeoutError
        return super().find_longest_match(alo, ahi, blo, bhi)


def match(keys_a, keys_b):
    """Opcodes as difflib's (walk() pairs the items of any block by position) matching two
    sequences, and whether a stretch had to be paired by position. The common start and end are
    matched first; in a long middle, items found once on each side anchor the match (as
    "patience diff" does), and difflib only sees the stretches between anchors."""
    n_a, n_b = len(keys_a), len(keys_b)
    start = end = 0
    while start < min(n_a, n_b) and keys_a[start] == keys_b[start]:
        start += 1
    while end < min(n_a, n_b) - start and keys_a[n_a - 1 - end] == keys_b[n_b - 1 - end]:
        end += 1
    anchors = []
    if n_a + n_b - 2 * (start + end) > AUTOJUNK_FROM:
        anchors = unique_anchors(keys_a, start, n_a - end, keys_b, start, n_b - end)
    ops, by_position, i, j = [("equal", 0, start, 0, start)], False, start, start
    for anchor_i, anchor_j in anchors + [(n_a - end, n_b - end)]:
        if i < anchor_i and j < anchor_j and (anchor_i - i) + (anchor_j - j) <= MATCH_LIMIT:
            try:
                matcher = BudgetMatcher(keys_a[i:anchor_i], keys_b[j:anchor_j],
                                        STARTED + MATCH_SECONDS)
                ops += [(tag, x1 + i, x2 + i, y1 + j, y2 + j)
                        for tag, x1, x2, y1, y2 in matcher.get_opcodes()]
                i, j = anchor_i, anchor_j
            except TimeoutError:
                pass
        if i < anchor_i or j < anchor_j:
            ops.append(("replace", i, anchor_i, j, anchor_j))
            by_position = by_position or (i < anchor_i and j < anchor_j)
        ops.append(("equal", anchor_i, anchor_i + 1, anchor_j, anchor_j + 1))
        i, j = anchor_i + 1, anchor_j + 1
    ops[-1] = ("equal", n_a - end, n_a, n_b - end, n_b)
    return [op for op in ops if op[1] < op[2] or op[3] < op[4]], by_position


def unique_anchors(a, a1, a2, b, b1, b2):
    """(i, j) of the keys found once in a[a1:a2] and once in b[b1:b2]: the longest chain of
    them in the same order on both sides (patience sorting)."""
    count_a, count_b = collections.Counter(a[a1:a2]), collections.Counter(b[b1:b2])
    where_b = {b[j]: j for j in range(b1, b2) if count_b[b[j]] == 1}
    pairs = [(i, where_b[a[i]]) for i in range(a1, a2) if count_a[a[i]] == 1 and a[i] in where_b]
    tails, tail_js, back = [], [], []
    for k, (_, j) in enumerate(pairs):
        x = bisect.bisect_left(tail_js, j)
        back.append(tails[x - 1] if x else None)
        if x == len(tails):
            tails.append(k)
            tail_js.append(j)
        else:
            tails[x], tail_js[x] = k, j
    chain, k = [], tails[-1] if tails else None
    while k is not None:
        chain.append(pairs[k])
        k = back[k]
    return chain[::-1]


def walk(ops):
    """("pair", i, j), ("removed", i, None), ("added", None, j) in order: a block pairs its
    items one to one, and the surplus is removed or added."""
    for _tag, i1, i2, j1, j2 in ops:
        k = min(i2 - i1, j2 - j1)
        for x in range(k):
            yield "pair", i1 + x, j1 + x
        for i in range(i1 + k, i2):
            yield "removed", i, None
        for j in range(j1 + k, j2):
            yield "added", None, j
