"""The filter probe of an insert batch, version 1 (512-bit blocks, `bloom.BloomV1`) against
version 2 (one 64-bit word a key, `bloom.Bloom`), in process.

An insert batch of N new random keys is checked against the filter of every run of the
tablet (20-35 runs at 50M rows, one filter of ~1.6M keys each): --filters filters of
--filter-keys keys each are built in both versions (the same keys), then each batch of N
absent keys (hashed once, not timed: both versions share the hash) is probed against all of
them. Per N, the median over --repeat batches of the total µs a batch:

  - v1: `BloomV1.may_contain_many(hashes)` a filter (the probe before version 2);
  - v2 probe: `Probe(hashes)` once a batch, then `Bloom.may_contain_many(probe)` a filter
    (what `Tablet._locate_blocks` does);
  - v2 bare: `Bloom.may_contain_many(hashes)` a filter (the masks made for each filter);

then, for a block whose range holds only part of the batch (`BlockIndex.locate_many` takes
the part: a random half here), the part's probe of one filter: v1 (a take of the hashes),
v2 with the Probe's take (hashes and masks), v2 with a take of the hashes and the masks
made again, and v2 of the whole batch without a take (what `locate_many` does when every
key is in range, as in `_locate_blocks`). Then the false-positive rate measured over every
probe of the run and the bytes a key of each version.

--table prints the false-positive rate of the word-blocked layout for 10, 12, 13 and 14 bits
a key and 4 to 8 bits a key (bit numbers from the 6-bit fields of the low 30 hash bits, and
from a splitmix64 of the hash past 5; version 2 is 12 bits, 5), measured on --table-keys
random keys and as many absent ones, next to version 1's.

    .venv/bin/python bench/bloom.py [--keys 10000 2000] [--filters 30] [--repeat 15]
    .venv/bin/python bench/bloom.py --table [--table-keys 1000000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tservers.tablet import bloom  # noqa: E402
from tservers.tablet.bloom import Bloom, BloomV1, Probe, hash_array  # noqa: E402

U64 = pa.uint64()


def u(v: int) -> pa.Scalar:
    return pa.scalar(v, U64)


def build_filters(nfilters: int, nkeys: int) -> tuple[list[BloomV1], list[Bloom], float]:
    v1: list[BloomV1] = []
    v2: list[Bloom] = []
    spent = {"v1": 0.0, "v2": 0.0}
    for f in range(nfilters):  # filter f holds keys f * 2**40 + [0, nkeys): none negative
        keys = pa.array(range(f << 40, (f << 40) + nkeys), pa.int64())
        hashes = hash_array(keys)
        t0 = time.perf_counter()
        v1.append(BloomV1.build(hashes, nkeys))
        t1 = time.perf_counter()
        v2.append(Bloom.build(hashes, nkeys))
        spent["v1"] += t1 - t0
        spent["v2"] += time.perf_counter() - t1
    return v1, v2, spent


def absent_batch(rng: random.Random, n: int) -> pa.Array:
    """The hashes of n random negative keys (no filter holds one)."""
    return hash_array(pa.array([-rng.randrange(1, 1 << 62) for _ in range(n)], pa.int64()))


def us(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e6


def count(ok: pa.Array) -> int:
    return pc.sum(ok.cast(pa.int64())).as_py() or 0


def run_batches(args, v1: list[BloomV1], v2: list[Bloom]) -> None:
    rng = random.Random(args.seed)
    print(
        f"{len(v1)} filters of {args.filter_keys:,} keys each; µs a batch (median of "
        f"{args.repeat}), all filters"
    )
    print(
        f"{'N':>7} {'v1':>10} {'v2 probe':>10} {'v2 bare':>10} {'v1/v2probe':>11} "
        f"{'v1/v2bare':>10} {'Probe()':>9}"
    )
    fp = {"v1": 0, "v2": 0, "probes": 0}
    parts = []
    for n in args.keys:
        t_v1, t_pr, t_bare, t_mk = [], [], [], []
        p_v1, p_pt, p_ht, p_full, p_fullt = [], [], [], [], []
        for r in range(args.repeat):
            hashes = absent_batch(rng, n)
            order = [0, 1, 2] if r % 2 == 0 else [2, 1, 0]
            for case in order:
                if case == 0:
                    t0 = time.perf_counter()
                    hits = [f.may_contain_many(hashes) for f in v1]
                    t_v1.append(us(t0))
                    fp["v1"] += sum(count(h) for h in hits)
                elif case == 1:
                    t0 = time.perf_counter()
                    probe = Probe(hashes)
                    t_mk.append(us(t0))
                    hits = [f.may_contain_many(probe) for f in v2]
                    t_pr.append(us(t0))
                    fp["v2"] += sum(count(h) for h in hits)
                else:
                    t0 = time.perf_counter()
                    hits = [f.may_contain_many(hashes) for f in v2]
                    t_bare.append(us(t0))
            fp["probes"] += n * len(v1)
            # A block holding part of the batch: a random half of it, one filter.
            idx = pa.array(sorted(rng.sample(range(n), n // 2)), pa.int64())
            every = pa.array(range(n), pa.int64())
            f1, f2 = v1[r % len(v1)], v2[r % len(v2)]
            t0 = time.perf_counter()
            f1.may_contain_many(pc.take(hashes, idx))
            p_v1.append(us(t0))
            t0 = time.perf_counter()
            f2.may_contain_many(probe.take(idx))
            p_pt.append(us(t0))
            t0 = time.perf_counter()
            f2.may_contain_many(pc.take(hashes, idx))
            p_ht.append(us(t0))
            t0 = time.perf_counter()
            f2.may_contain_many(probe)
            p_full.append(us(t0))
            t0 = time.perf_counter()
            f2.may_contain_many(probe.take(every))
            p_fullt.append(us(t0))
        a, b, c = (statistics.median(x) for x in (t_v1, t_pr, t_bare))
        print(
            f"{n:>7} {a:>10.0f} {b:>10.0f} {c:>10.0f} {a / b:>10.2f}x {a / c:>9.2f}x "
            f"{statistics.median(t_mk):>9.0f}"
        )
        parts.append((n, [statistics.median(x) for x in (p_v1, p_pt, p_ht, p_full, p_fullt)]))
    print()
    print("one filter, µs (median): a block holding half the batch (a take of the part), or all")
    print(
        f"{'N':>7} {'v1 take':>9} {'v2 Probe.take':>14} {'v2 take+masks':>14} "
        f"{'v2 all, no take':>16} {'v2 all, take':>13}"
    )
    for n, (a, b, c, d, e) in parts:
        print(f"{n:>7} {a:>9.1f} {b:>14.1f} {c:>14.1f} {d:>16.1f} {e:>13.1f}")
    print()
    probes = fp["probes"]
    for name, fs in (("v1", v1), ("v2", v2)):
        f = fs[0]
        print(
            f"{name}: false positives {fp[name]:,} of {probes:,} probes = "
            f"{100 * fp[name] / probes:.3f}%; {f.size_bytes / args.filter_keys:.3f} bytes a key "
            f"({f.size_bytes:,} bytes a filter)"
        )


# ---- --table: the false-positive rate of other bits a key and probes ----


def _positions(hashes: pa.Array, k: int) -> list[pa.Array]:
    """The k bit numbers of each hash: the 6-bit fields of the low 30 bits (version 2's),
    then those of a splitmix64 of the hash."""
    more = bloom._splitmix(hashes) if k > 5 else None
    out = []
    for i in range(k):
        src, shift = (hashes, 6 * i) if i < 5 else (more, 6 * (i - 5))
        out.append(pc.bit_wise_and(pc.shift_right(src, u(shift)), u(63)))
    return out


def table_fpr(present: pa.Array, absent: pa.Array, bits: int, k: int) -> float:
    n = len(present)
    nwords = max(2, -(-n * bits // 64))

    def word(h: pa.Array) -> pa.Array:
        return pc.shift_right(pc.multiply(pc.shift_right(h, u(32)), u(nwords)), u(32))

    base = pc.shift_left(word(present), u(6))
    pos = pa.concat_arrays([pc.add(base, p) for p in _positions(present, k)])
    mark = pc.scatter(
        pa.repeat(pa.scalar(True), len(pos)), pos.view(pa.int64()), max_index=nwords * 64 - 1
    )
    raw = mark.buffers()[0].to_pybytes()[: nwords * 8]
    words = pa.Array.from_buffers(U64, nwords, [None, pa.py_buffer(raw)])
    mask = None
    for p in _positions(absent, k):
        bit = pc.shift_left(u(1), p)
        mask = bit if mask is None else pc.bit_wise_or(mask, bit)
    hit = pc.equal(pc.bit_wise_and(pc.take(words, word(absent)), mask), mask)
    if bits == bloom.BITS_PER_KEY and k == bloom.PROBES:  # the real filter: same answers
        assert hit.equals(Bloom.build(present, n).may_contain_many(absent))
    return count(hit) / len(absent)


def run_table(args) -> None:
    rng = random.Random(args.seed)
    n = args.table_keys
    present = hash_array(pa.array([rng.randrange(1 << 62) for _ in range(n)], pa.int64()))
    absent = absent_batch(rng, n)
    v1 = count(BloomV1.build(present, n).may_contain_many(absent)) / n
    print(f"false positives, {n:,} keys and {n:,} absent ones")
    print(f"v1 (512-bit blocks), 10 bits a key (1.25 bytes), 6 probes: {100 * v1:.3f}%")
    print("v2 layout (one 64-bit word a key), bits a key (bytes) x probes k:")
    ks = range(4, 9)
    print(f"{'bits':>12} " + " ".join(f"{'k=' + str(k):>7}" for k in ks))
    for bits in (10, 12, 13, 14):
        cells = [f"{100 * table_fpr(present, absent, bits, k):>6.3f}%" for k in ks]
        print(f"{bits:>4} ({bits / 8:.3f}) " + " ".join(cells), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, nargs="+", default=[10_000, 2000], help="batch sizes")
    ap.add_argument("--filters", type=int, default=30, help="filters (runs) a batch probes")
    ap.add_argument("--filter-keys", type=int, default=1_600_000, help="keys a filter")
    ap.add_argument("--repeat", type=int, default=15, help="batches a size (median)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--table", action="store_true", help="the FPR table instead")
    ap.add_argument("--table-keys", type=int, default=1_000_000)
    args = ap.parse_args()
    if args.table:
        run_table(args)
        return
    t0 = time.perf_counter()
    v1, v2, spent = build_filters(args.filters, args.filter_keys)
    print(
        f"built {args.filters} + {args.filters} filters in {time.perf_counter() - t0:.1f} s "
        f"(v1 {spent['v1']:.1f} s, v2 {spent['v2']:.1f} s)"
    )
    run_batches(args, v1, v2)


if __name__ == "__main__":
    main()
