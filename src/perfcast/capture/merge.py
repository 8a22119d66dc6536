"""Repeated layers of a captured model as one set of ops run ``count`` times, as the catalog builders write them.

A captured forward lists every layer instance: a 48-layer model has 48 copies
of the same block's ops. Each captured op keeps the path of the module that
issued it (``meta`` ``module``: ``transformer.h.7.attn.c_attn``); an integer
path component is an entry of a ``ModuleList``/``Sequential``. Consecutive
entries of the same list (``h.0``, ``h.1``, ...) whose ops are identical
(same op sequence, kinds, shapes, dtypes, FLOPs and bytes, same module
paths inside the block) become the first entry's ops with ``count``
multiplied by the run's length, renamed ``transformer.h.0-47.attn.c_attn...``.
Entries that differ (ResNet's first block of a stage, with its downsampling
shortcut) stay as they are, and the search continues inside them (ResNet's
``stages.0.layers.1-2``). Nothing is merged on shapes alone: two blocks merge
only when every op of one equals the matching op of the other, so the merged
workload has exactly the unmerged one's kernels, FLOPs and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.workload.types import Op, Workload

__all__ = ["block_runs", "merge_repeated", "module_path"]


def module_path(op: Op) -> str:
    """The module path a captured op came from (``""`` when unknown)."""
    return str(op.get("module", "") or "")


@dataclass(frozen=True, slots=True)
class _Entry:
    op: Op
    comps: tuple[str, ...]


def _block(comps: tuple[str, ...], start: int) -> tuple[int, tuple[str, ...], int] | None:
    """(position, list path, index) of the first list entry in ``comps`` at or after ``start``."""
    for pos in range(start, len(comps)):
        if comps[pos].isdigit():
            return pos, comps[:pos], int(comps[pos])
    return None


def _signature(entries: list[_Entry], pos: int) -> tuple[object, ...]:
    """What must be equal for two list entries to merge: every op but its name and module root."""
    out: list[object] = []
    for e in entries:
        o = e.op
        out.append((e.comps[pos + 1:], o.op, o.kind, o.dims, o.dtype, o.flops, o.bytes_read, o.bytes_written,
                    o.count, o.phase, o.group, o.chain is None, o.fused_bytes, o.weight_bytes, o.tp_split, o.params,
                    tuple((k, v) for k, v in o.meta if k != "module")))
    return tuple(out)


def _rename(e: _Entry, pos: int, label: str, times: int) -> _Entry:
    comps = (*e.comps[:pos], label, *e.comps[pos + 1:])
    old, new = ".".join(e.comps), ".".join(comps)
    op = e.op
    name = new + op.name[len(old):] if old and op.name.startswith(old) else op.name
    meta = tuple((k, new if k == "module" else v) for k, v in op.meta)
    return _Entry(op.with_(name=name, count=op.count * times, meta=meta), comps)


def _merge(entries: list[_Entry], start: int) -> list[_Entry]:
    out: list[_Entry] = []
    i, n = 0, len(entries)
    while i < n:
        key = _block(entries[i].comps, start)
        if key is None:
            out.append(entries[i])
            i += 1
            continue
        pos, prefix = key[0], key[1]
        groups: list[tuple[int, list[_Entry]]] = []
        j = i
        while j < n:
            k = _block(entries[j].comps, start)
            if k is None or k[0] != pos or k[1] != prefix:
                break
            if groups and groups[-1][0] == k[2]:
                groups[-1][1].append(entries[j])
            else:
                groups.append((k[2], [entries[j]]))
            j += 1
        g = 0
        while g < len(groups):
            sig = _signature(groups[g][1], pos)
            h = g + 1
            while h < len(groups) and groups[h][0] == groups[h - 1][0] + 1 and _signature(groups[h][1], pos) == sig:
                h += 1
            first, last = groups[g][0], groups[h - 1][0]
            times = h - g
            label = str(first) if times == 1 else f"{first}-{last}"
            body = [_rename(e, pos, label, times) for e in groups[g][1]] if times > 1 else groups[g][1]
            out.extend(_merge(body, pos + 1))
            g = h
        i = j
    return out


def merge_repeated(w: Workload) -> Workload:
    """``w`` with runs of identical consecutive layers merged into ops with ``count`` = the run's length.

    The merged workload has the same FLOPs, bytes and kernels (counting repeats) as ``w``; ops without a
    module path (ONNX nodes named without one) are left as they are.
    """
    entries = [_Entry(o, tuple(p for p in module_path(o).split(".") if p)) for o in w.ops]
    merged = _merge(entries, 0)
    if len(merged) == len(entries):
        return w
    return Workload(model_id=w.model_id, mode=w.mode, batch_size=w.batch_size, seq_len=w.seq_len, dtype=w.dtype,
                    ops=tuple(e.op for e in merged), kv_len=w.kv_len, tp=w.tp)


def block_runs(w: Workload) -> list[tuple[str, int]]:
    """The merged layer runs of ``w`` in order: (module path of the run, layers in it), e.g.
    ``[("transformer.h.0-11", 12)]``."""
    runs: list[tuple[str, int]] = []
    for o in w.ops:
        comps = module_path(o).split(".")
        for c in comps:
            if "-" in c and all(part.isdigit() for part in c.split("-", 1)):
                a, b = (int(x) for x in c.split("-", 1))
                path = ".".join(comps[:comps.index(c) + 1])
                if not runs or runs[-1][0] != path:
                    runs.append((path, b - a + 1))
                break
    return runs
