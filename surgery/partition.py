"""From per-node verdicts to the deployment view: supported regions (one engine each), fallback nodes, and the
tensors that cross between them — how TF-TRT or TVM BYOC would split the model."""

from __future__ import annotations

from dataclasses import dataclass, field

from onnx import ModelProto

from surgery.backends.base import Report, Status
from surgery.graph import GraphFacts, _all_inputs


@dataclass
class Region:
    supported: bool
    nodes: list[str]  # node keys, topological order


@dataclass
class Partition:
    regions: list[Region] = field(default_factory=list)
    crossing_tensors: list[str] = field(default_factory=list)
    crossing_bytes: int | None = 0  # None when some crossing tensor's size is unknown

    @property
    def engines(self) -> int:
        return sum(r.supported for r in self.regions)

    @property
    def fallback_nodes(self) -> int:
        return sum(len(r.nodes) for r in self.regions if not r.supported)

    def summary(self) -> str:
        total = sum(len(r.nodes) for r in self.regions)
        size = "unknown size" if self.crossing_bytes is None else f"{self.crossing_bytes:,} bytes"
        return (
            f"{self.engines} supported region(s), {self.fallback_nodes} of {total} node(s) fall back; "
            f"{len(self.crossing_tensors)} tensor(s) cross between regions ({size})"
        )


def partition(model: ModelProto, report: Report) -> Partition:
    """Walk the nodes in topological order; a new region starts whenever support changes."""
    facts = GraphFacts.of(model)
    status = {v.index: v.status for v in report.verdicts}
    regions: list[Region] = []
    region_of: dict[int, int] = {}
    for i in facts.order:
        ok = status.get(i) is Status.SUPPORTED
        if not regions or regions[-1].supported != ok:
            regions.append(Region(ok, []))
        regions[-1].nodes.append(facts.keys[i])
        region_of[i] = len(regions) - 1
    crossing, nbytes = [], 0
    for i in facts.order:
        for x in dict.fromkeys(_all_inputs(model.graph.node[i])):
            p = facts.producer.get(x)
            if (
                p is not None
                and region_of[p] != region_of[i]
                and x not in facts.constant
                and x not in crossing
            ):
                crossing.append(x)
                info = facts.info(x)
                n = info.numel()
                if n is None or nbytes is None:
                    nbytes = None
                else:
                    import numpy as np
                    from onnx import helper

                    try:
                        nbytes += n * np.dtype(helper.tensor_dtype_to_np_dtype(info.dtype)).itemsize
                    except Exception:
                        nbytes = None
    return Partition(regions, crossing, nbytes)
