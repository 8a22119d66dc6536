"""Operator fusion as a compiler does it (``torch.compile`` / Inductor, serving-engine kernels).

Model builders mark runs of pointwise ops that a compiler fuses with a shared
``chain`` id and say, per op, what it still moves inside the fused kernel
(``fused_bytes``). Fusing a chain replaces it by one kernel whose traffic is
the sum of those bytes; GEMMs, attention and unmarked ops stay as they are.
"""

from __future__ import annotations

from perfcast.workload.types import Op, OpKind

__all__ = ["fuse_chains"]


def fuse_chains(ops: tuple[Op, ...] | list[Op]) -> list[Op]:
    """Merge each run of consecutive ops with the same ``chain`` into one fused kernel."""
    out: list[Op] = []
    run: list[Op] = []

    def flush() -> None:
        if not run:
            return
        if len(run) == 1:
            out.append(run[0].with_(chain=None))  # nothing to fuse with: unchanged
        else:
            first = run[0]
            total = sum(_fused_bytes(o) for o in run)
            # a chain around a row reduction (scale+mask+softmax, add+norm) is that reduction's kernel
            anchor = next((o for o in run if o.get("reduce", False)), None)
            shape_op = anchor or max(run, key=lambda o: o.dims[0] * o.dims[1])
            out.append(Op(
                name=first.chain or first.name, op=anchor.op if anchor else "fused_pointwise",
                kind=OpKind.VECTOR, dims=shape_op.dims,
                dtype=first.dtype, flops=sum(o.flops for o in run), bytes_read=total, bytes_written=0.0,
                count=first.count, phase=first.phase, group=first.group, tp_split=first.tp_split,
                params=sum(o.params for o in run),
                meta=(("fused_ops", len(run)), ("reduce", anchor is not None)),
            ))
        run.clear()

    for op in ops:
        if op.chain is not None and op.kind is OpKind.VECTOR:
            if run and (run[-1].chain != op.chain or run[-1].count != op.count or run[-1].phase is not op.phase):
                flush()
            run.append(op)
        else:
            flush()
            out.append(op)
    flush()
    return out


def _fused_bytes(op: Op) -> float:
    return op.bytes if op.fused_bytes is None else float(op.fused_bytes)
