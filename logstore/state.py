"""The pure state machine of a logstore replica: named logs of live entries.

Owns no threads, files or clocks. The replicated store applies committed commands to it in
log order; the snapshot codec (logstore/snapshot.py) saves and restores it. Invalidated
entries are deleted at once, so the state (and every snapshot of it) holds only live data.

Each log's entries live in pages of 2**PAGE_ID_BITS ids (`LiveEntries`). `capture()` hands a
snapshot writer the pages as they are, in time proportional to the number of pages, and the
state copies a page the first time it changes one afterwards (copy on write): a snapshot is
encoded on another thread from a consistent copy while appends go on (design/logstore.md,
"compaction off the tick thread").
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, islice, repeat
from operator import attrgetter

from logstore.api import (
    APPEND_ID_ABS_LIMIT,
    ENTRY_BYTES_MAX,
    INVALIDATES_MAX,
    LOG_NAME_BYTES_MAX,
    READ_LIMIT_MAX,
    Entry,
    LogConditionFailed,
)
from rpc.errors import BadRequest, RpcError


def check_append_args(log: str, data: bytes) -> None:
    """The checks of an append that need no state (log name, entry size): run by every
    client before sending and by the state machine itself."""
    if not isinstance(log, str) or not log or len(log.encode()) > LOG_NAME_BYTES_MAX:
        raise BadRequest(f"log name must be 1..{LOG_NAME_BYTES_MAX} bytes")
    if len(data) > ENTRY_BYTES_MAX:
        raise BadRequest(f"entry of {len(data)} bytes exceeds {ENTRY_BYTES_MAX}")


def check_append_request(
    log: str, data: bytes, expected_id: int | None, invalidates: Sequence[int]
) -> None:
    """Every stateless check of an append as it enters a replica or a client: the arguments
    (check_append_args), at most INVALIDATES_MAX invalidations, and ids whose magnitude is
    below 2**64 (the wire's uint64). Not run when applying: entries already in a log replay
    as they were."""
    check_append_args(log, data)
    if len(invalidates) > INVALIDATES_MAX:
        raise BadRequest(
            f"an append invalidates at most {INVALIDATES_MAX} ids, not {len(invalidates)}"
        )
    if expected_id is not None and not -APPEND_ID_ABS_LIMIT < expected_id < APPEND_ID_ABS_LIMIT:
        raise BadRequest(f"expected id {expected_id} is out of range")
    for i in invalidates:
        if not -APPEND_ID_ABS_LIMIT < i < APPEND_ID_ABS_LIMIT:
            raise BadRequest(f"cannot invalidate id {i}: out of range")


def validate_append(
    logs: Mapping[str, Mapping[int, Entry]],
    last_ids: dict[str, int],
    log: str,
    data: bytes,
    expected_id: int | None,
    invalidates: Sequence[int],
) -> None:
    """Every check of one append against the state, in the order the semantics give
    (arguments, then the condition, then the invalidations); raises without changing
    anything (LogConditionFailed or BadRequest)."""
    check_append_args(log, data)
    last = last_ids.get(log, 0)
    if expected_id is not None and expected_id != last + 1:
        raise LogConditionFailed(
            f"expected id {expected_id} but the next id of {log!r} is {last + 1}", last_id=last
        )
    live = logs.get(log, {})
    if len(set(invalidates)) != len(invalidates):
        raise BadRequest("an id is invalidated twice in one entry")
    for i in invalidates:
        if i not in live:
            raise BadRequest(f"cannot invalidate {log!r}#{i}: no live entry with that id")


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What applying one append produced; an error is carried, not raised, so the Raft apply
    loop (which must never throw) can hand it to the waiting caller."""

    entry_id: int = 0
    # "" on success, else "condition" or "bad_request".
    error_kind: str = ""
    message: str = ""
    last_id: int = 0

    def raise_if_error(self) -> int:
        if self.error_kind == "condition":
            raise LogConditionFailed(self.message, last_id=self.last_id)
        if self.error_kind == "bad_request":
            raise BadRequest(self.message)
        assert not self.error_kind, self.error_kind
        return self.entry_id


def outcome_id(outcome: int | AppendOutcome) -> int:
    """The new id an applied append got, or its error raised (see `LogState.apply_many`)."""
    if type(outcome) is int:
        return outcome
    if not isinstance(outcome, AppendOutcome):
        raise TypeError(f"not an append outcome: {outcome!r}")
    return outcome.raise_if_error()


_data_of = attrgetter("data")
_invalidates_of = attrgetter("invalidates")

# Ids per page of a log's live entries: a page is what the state copies on its first change
# after a capture (at most this many entries), and what a snapshot writer encodes at a time.
PAGE_ID_BITS = 12


class LoadedPage:
    """One page's entries as a snapshot stored them, not yet made into Entry objects: a
    reopen builds these (bulk operations, no Python object per entry) and the state turns
    a page into a dict of Entry the first time something reads or changes it. Immutable."""

    __slots__ = ("ids", "lens", "start", "body", "invs", "size")

    def __init__(
        self,
        ids: Sequence[int],
        lens: Sequence[int],
        start: int,
        body: bytes,
        invs: Sequence[tuple[int, ...]] | None,
        size: int | None = None,
    ) -> None:
        self.ids = ids  # ascending
        self.lens = lens  # each entry's data length
        self.start = start  # offset of the first entry's data in body
        self.body = body  # the snapshot's body (shared by every page of the snapshot)
        self.invs = invs  # each entry's invalidated ids; None: none invalidated anything
        # The datas' total size (the sum of lens: kept, a snapshot writer needs it per page).
        self.size = sum(lens) if size is None else size

    def __len__(self) -> int:
        return len(self.ids)

    def data_bytes(self) -> int:
        return self.size

    def datas(self) -> list[bytes]:
        ends = list(accumulate(self.lens, initial=self.start))
        return list(map(self.body.__getitem__, map(slice, ends, islice(ends, 1, None))))

    def entries(self, from_id: int, limit: int) -> list[Entry]:
        """At most `limit` of its entries from id `from_id` on, made from the columns: a
        read leaves the page as it is (a replay that reads a whole log keeps no dict)."""
        ids = self.ids
        a = bisect_left(ids, from_id)
        b = min(len(ids), a + limit)
        if a >= b:
            return []
        ends = list(accumulate(self.lens[a:b], initial=self.start + sum(self.lens[:a])))
        datas = map(self.body.__getitem__, map(slice, ends, islice(ends, 1, None)))
        invs = repeat(()) if self.invs is None else self.invs[a:b]
        return list(map(Entry, ids[a:b], datas, invs))

    def materialize(self) -> dict[int, Entry]:
        invs = repeat(()) if self.invs is None else self.invs
        return dict(zip(self.ids, map(Entry, self.ids, self.datas(), invs), strict=False))

    @classmethod
    def sealed(cls, page: dict[int, Entry]) -> LoadedPage:
        """A dict page in this columnar form (bulk operations only): what the state keeps
        of a page the tail has moved past, so that no snapshot has to encode its entries
        one Python object at a time again."""
        entries = list(page.values())
        datas = list(map(_data_of, entries))
        invs = list(map(_invalidates_of, entries))
        body = b"".join(datas)
        return cls(
            array("Q", page),
            array("I", map(len, datas)),
            0,
            body,
            invs if any(map(len, invs)) else None,
            len(body),
        )


Page = dict[int, Entry] | LoadedPage


class LiveEntries(Mapping[int, Entry]):
    """One log's live entries by id, iterated in id order, held in pages of
    2**PAGE_ID_BITS ids (page number = id >> PAGE_ID_BITS).

    Pages are plain dicts in ascending page order (ids only grow, so a new page is always
    the last), or LoadedPage (columns) after a reopen and once the tail has moved past them
    (`writable_page` seals the previous tail page when it starts a new one), until first
    used. A LoadedPage made into a dict for a read is kept in `sealed` until the page
    changes, so a snapshot still copies its columns instead of encoding its entries.
    `share()` marks every page as shared with a capture; the first change of a shared page
    replaces it with a copy, so a captured page never changes (a page with a `sealed`
    form is in `shared` too: its change must drop that form). Reads and changes happen
    under the state's lock."""

    __slots__ = ("pages", "shared", "sealed", "count")

    def __init__(self) -> None:
        self.pages: dict[int, Page] = {}
        self.shared: set[int] = set()
        self.sealed: dict[int, LoadedPage] = {}
        self.count = 0

    def page(self, page_no: int) -> dict[int, Entry] | None:
        """The page as a dict (a loaded page is made into one now), or None."""
        page = self.pages.get(page_no)
        if page is not None and type(page) is not dict:
            # A value replaced, not a key added: safe while the pages are being iterated.
            self.sealed[page_no] = page
            page = self.pages[page_no] = page.materialize()
            self.shared.add(page_no)  # its first change drops the sealed form
        return page

    def __getitem__(self, entry_id: int) -> Entry:
        page = self.page(entry_id >> PAGE_ID_BITS)
        if page is None:
            raise KeyError(entry_id)
        return page[entry_id]

    def __contains__(self, entry_id: object) -> bool:
        if type(entry_id) is not int:
            return False
        page = self.pages.get(entry_id >> PAGE_ID_BITS)
        if page is None:
            return False
        if type(page) is not dict:
            ids = page.ids
            at = bisect_left(ids, entry_id)
            return at < len(ids) and ids[at] == entry_id
        return entry_id in page

    def __iter__(self) -> Iterator[int]:
        return chain.from_iterable(
            p.ids if type(p) is LoadedPage else p for p in list(self.pages.values())
        )

    def __len__(self) -> int:
        return self.count

    def _dict_pages(self) -> Iterator[dict[int, Entry]]:
        for page_no in list(self.pages):
            page = self.page(page_no)
            if page is not None:
                yield page

    def values(self):  # type: ignore[override] - an iterator, in id order
        return chain.from_iterable(p.values() for p in self._dict_pages())

    def items(self):  # type: ignore[override] - an iterator, in id order
        return chain.from_iterable(p.items() for p in self._dict_pages())

    def writable_page(self, page_no: int) -> dict[int, Entry]:
        """The page to change, created, made from a loaded page or copied first if it is
        new, loaded or shared. A new page is the new tail: the previous tail is sealed."""
        page = self.pages.get(page_no)
        if page is None:
            if self.pages:
                self._seal(next(reversed(self.pages)))
            page = self.pages[page_no] = {}
        elif type(page) is not dict:
            page = self.pages[page_no] = page.materialize()
        elif page_no in self.shared:
            page = self.pages[page_no] = dict(page)
        self.shared.discard(page_no)
        self.sealed.pop(page_no, None)
        return page

    def _seal(self, page_no: int) -> None:
        """Replace a dict page that will see no more appends by its columns (the Entry
        objects go: a snapshot copies the columns in bulk, and they take less memory).
        Runs once a page, on the tick thread, as its tail moves on: one page of at most
        2**PAGE_ID_BITS entries in C-level loops (~0.5 ms for 4,096)."""
        page = self.pages[page_no]
        if type(page) is dict:
            cached = self.sealed.pop(page_no, None)  # unchanged since a read made it a dict
            self.pages[page_no] = LoadedPage.sealed(page) if cached is None else cached
            self.shared.discard(page_no)  # a LoadedPage is never changed in place

    def adopt_columns(self, page_no: int, page: dict[int, Entry], columns: LoadedPage) -> bool:
        """A snapshot writer encoded `page` (a dict page it captured) into `columns`: if
        the page is still the one captured (not changed since), the columns replace it, as
        a page is after a reopen: the next snapshot copies them instead of encoding the
        entries again, and its Entry objects go (the dict and its entries are freed by the
        writer, which still holds them: SnapshotHooks._run_write). Entries are what the
        cyclic GC walks on each full pass: 250k of them in small logs made a pass take
        100-300 ms, every thread stopped. The page's next change makes it a dict again
        (as a loaded page). Under the state's lock."""
        if self.pages.get(page_no) is not page or page_no not in self.shared:
            return False
        assert len(columns) == len(page), (page_no, len(columns), len(page))
        self.pages[page_no] = columns  # a value replaced, not a key added
        self.shared.discard(page_no)  # a LoadedPage is never changed in place
        self.sealed.pop(page_no, None)
        return True

    def put(self, entry: Entry) -> None:
        self.writable_page(entry.id >> PAGE_ID_BITS)[entry.id] = entry
        self.count += 1

    def pop(self, entry_id: int) -> Entry:  # type: ignore[override]
        page_no = entry_id >> PAGE_ID_BITS
        if entry_id not in self:
            raise KeyError(entry_id)
        page = self.writable_page(page_no)
        entry = page.pop(entry_id)
        self.count -= 1
        if not page:
            del self.pages[page_no]
        return entry

    def share(self) -> tuple[Page, ...]:
        """The pages as they are now, which this object will never change again."""
        self.shared = set(self.pages)
        sealed = self.sealed
        if not sealed:
            return tuple(self.pages.values())
        return tuple(sealed.get(no, page) for no, page in self.pages.items())

    @staticmethod
    def _page_bounds(ids: Sequence[int]) -> Iterator[tuple[int, int, int]]:
        """(page number, start, end) of each page's run in ascending `ids`."""
        n = len(ids)
        start = 0
        while start < n:
            page_no = ids[start] >> PAGE_ID_BITS
            end = bisect_left(ids, (page_no + 1) << PAGE_ID_BITS, start)
            yield page_no, start, end
            start = end

    @classmethod
    def from_sorted(cls, ids: Sequence[int], entries: Sequence[Entry]) -> LiveEntries:
        """Built from ids in ascending order and their entries (a snapshot being loaded)."""
        live = cls()
        for page_no, start, end in cls._page_bounds(ids):
            live.pages[page_no] = dict(zip(ids[start:end], entries[start:end], strict=True))
        live.count = len(ids)
        return live

    @classmethod
    def from_loaded(
        cls,
        ids: Sequence[int],
        lens: Sequence[int],
        start: int,
        body: bytes,
        invs: Sequence[tuple[int, ...]] | None,
    ) -> tuple[LiveEntries, int]:
        """Built from a snapshot's columns (ids ascending, an array or a list; the datas one
        after the other in `body` from `start`), as LoadedPages: no Entry object is made
        until a page is used. Also answers the datas' total size. A page's offset comes
        from the sum of the lengths before it, one C-level sum a page (a running sum kept
        per entry cost a list of 1M ints at a reopen)."""
        live = cls()
        at = start
        for page_no, a, b in cls._page_bounds(ids):
            page_lens = lens[a:b]
            size = sum(page_lens)
            live.pages[page_no] = LoadedPage(
                ids[a:b], page_lens, at, body, None if invs is None else invs[a:b], size
            )
            at += size
        live.count = len(ids)
        return live, at - start


@dataclass(frozen=True, slots=True)
class LogCopy:
    """One log as captured: its pages (never changed after the capture) in id order."""

    name: str
    last_id: int
    count: int
    pages: tuple[Page, ...]


@dataclass(frozen=True, slots=True)
class StateCopy:
    """A consistent copy of a LogState at one applied index, for a snapshot writer."""

    logs: tuple[LogCopy, ...]
    live_entries: int
    live_bytes: int


# A log name of at most this many characters is at most LOG_NAME_BYTES_MAX bytes in UTF-8.
_SHORT_NAME_CHARS = LOG_NAME_BYTES_MAX // 4


class LogState:
    """Named logs; each maps id -> live Entry (LiveEntries), plus the last id ever assigned."""

    def __init__(self) -> None:
        self.logs: dict[str, LiveEntries] = {}
        self.last_ids: dict[str, int] = {}
        self.live_bytes = 0
        self.live_entries = 0

    def apply_append(
        self,
        log: str,
        data: bytes,
        expected_id: int | None,
        invalidates: Sequence[int],
    ) -> AppendOutcome:
        """Apply one append; its outcome (the new id, or the error) as an AppendOutcome."""
        out = self._apply(log, data, expected_id, invalidates)
        return AppendOutcome(entry_id=out) if type(out) is int else out

    def apply_many(self, appends) -> list[int | AppendOutcome]:
        """Apply (log, data, expected_id, invalidates) tuples in order, each exactly as
        `apply_append` would. Outcomes: the new id (an int) for a success, an AppendOutcome
        for a failure (a malformed tuple fails alone, as bad_request). The replicated
        state machine applies every append through here."""
        out: list[int | AppendOutcome] = []
        put = out.append
        apply = self._apply
        for a in appends:
            try:
                put(apply(*a))
            except Exception as err:  # noqa: BLE001 - a malformed append fails alone
                put(AppendOutcome(error_kind="bad_request", message=f"bad append: {err}"))
        return out

    def _apply(
        self, log: str, data: bytes, expected_id: int | None, invalidates: Sequence[int]
    ) -> int | AppendOutcome:
        if (
            not invalidates
            and type(data) is bytes
            and type(log) is str
            and 0 < len(log) <= _SHORT_NAME_CHARS
            and len(data) <= ENTRY_BYTES_MAX
        ):
            # Fast path (most appends): valid arguments and nothing to invalidate, so the
            # condition is the only check of validate_append left.
            new_id = self.last_ids.get(log, 0) + 1
            if expected_id is None or expected_id == new_id:
                if data:
                    live = self.logs.get(log)
                    if live is None:
                        live = self.logs[log] = LiveEntries()
                    # LiveEntries.put, inlined (the hot path of the tick thread).
                    page_no = new_id >> PAGE_ID_BITS
                    page = live.pages.get(page_no)
                    if page is None or page_no in live.shared or type(page) is not dict:
                        page = live.writable_page(page_no)
                    page[new_id] = Entry(new_id, data, ())
                    live.count += 1
                    self.live_bytes += len(data)
                    self.live_entries += 1
                elif log not in self.logs:
                    self.logs[log] = LiveEntries()
                self.last_ids[log] = new_id
                return new_id
        invalidates = tuple(int(i) for i in invalidates)
        try:
            validate_append(self.logs, self.last_ids, log, data, expected_id, invalidates)
        except LogConditionFailed as err:
            return AppendOutcome(error_kind="condition", message=err.message, last_id=err.last_id)
        except RpcError as err:
            return AppendOutcome(error_kind="bad_request", message=err.message)
        new_id = self.last_ids.get(log, 0) + 1
        live = self.logs.get(log)
        if live is None:
            live = self.logs[log] = LiveEntries()
        for i in invalidates:
            gone = live.pop(i)
            self.live_bytes -= len(gone.data)
            self.live_entries -= 1
        if data:
            live.put(Entry(new_id, bytes(data), invalidates))
            self.live_bytes += len(data)
            self.live_entries += 1
        self.last_ids[log] = new_id
        return new_id

    def read(self, log: str, from_id: int = 1, limit: int = 1000) -> list[Entry]:
        if limit <= 0 or limit > READ_LIMIT_MAX:
            raise BadRequest(f"limit must be 1..{READ_LIMIT_MAX}")
        live = self.logs.get(log)
        if live is None:
            return []
        # Pages and the dicts in them keep insertion order, which is id order: ids only
        # grow and a restore inserts in id order.
        first_page = from_id >> PAGE_ID_BITS
        out: list[Entry] = []
        for page_no, page in list(live.pages.items()):
            if page_no < first_page:
                continue
            if type(page) is not dict:
                out += page.entries(from_id, limit - len(out))
                if len(out) >= limit:
                    return out
                continue
            for i, entry in page.items():
                if i >= from_id:
                    out.append(entry)
                    if len(out) >= limit:
                        return out
        return out

    def last_id(self, log: str) -> int:
        return self.last_ids.get(log, 0)

    def log_names(self) -> list[str]:
        return sorted(self.last_ids)

    def iter_logs(self) -> Iterator[tuple[str, int, Mapping[int, Entry]]]:
        for name in sorted(self.last_ids):
            yield name, self.last_ids[name], self.logs.get(name, {})

    def capture(self) -> StateCopy:
        """A consistent copy for a snapshot writer, in time proportional to the number of
        pages (not entries): the pages are shared, and copied by this state on their first
        change (call it under the lock that orders it with apply)."""
        logs = []
        for name in sorted(self.last_ids):
            live = self.logs.get(name)
            if live is None:
                logs.append(LogCopy(name, self.last_ids[name], 0, ()))
            else:
                logs.append(LogCopy(name, self.last_ids[name], live.count, live.share()))
        return StateCopy(tuple(logs), self.live_entries, self.live_bytes)

    def adopt_columns(
        self, name: str, page_no: int, page: dict[int, Entry], columns: LoadedPage
    ) -> bool:
        """LiveEntries.adopt_columns of log `name` (under the lock that orders it with
        apply); False when the page changed or went since it was captured."""
        live = self.logs.get(name)
        return live is not None and live.adopt_columns(page_no, page, columns)

    def replace_with(self, other: LogState) -> None:
        self.logs = other.logs
        self.last_ids = other.last_ids
        self.live_bytes = other.live_bytes
        self.live_entries = other.live_entries

    def restore_log(
        self,
        name: str,
        last_id: int,
        entries: Sequence[Entry],
        ids: Sequence[int] | None = None,
        live_bytes: int | None = None,
    ) -> None:
        """Used by the snapshot codec: install one log as it was saved. `ids` (the entries'
        ids) and `live_bytes` (their data's size) when the codec has them in bulk."""
        assert name not in self.last_ids, name
        if ids is None:
            ids = [e.id for e in entries]
        ids = list(ids)
        assert len(ids) == len(entries), (len(ids), len(entries))
        # Strictly ascending, positive and at most last_id (checked in C: a snapshot may
        # hold millions of entries and is loaded on the tick thread).
        assert ids == sorted(set(ids)), f"log {name!r}: ids not strictly ascending"
        assert not ids or (ids[0] > 0 and ids[-1] <= last_id), (name, last_id)
        if live_bytes is None:
            live_bytes = sum(len(e.data) for e in entries)
        self.live_bytes += live_bytes
        self.live_entries += len(ids)
        self.logs[name] = LiveEntries.from_sorted(ids, entries)
        self.last_ids[name] = last_id

    def install_log(self, name: str, last_id: int, live: LiveEntries, live_bytes: int) -> None:
        """Used by the snapshot codec: install one log it built (checked by the codec)."""
        assert name not in self.last_ids, name
        self.live_bytes += live_bytes
        self.live_entries += live.count
        self.logs[name] = live
        self.last_ids[name] = last_id
