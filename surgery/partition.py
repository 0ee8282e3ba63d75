"""From per-node verdicts to the deployment view: supported regions (one engine each), fallback nodes, and the
tensors that cross between them — how TF-TRT or TVM BYOC would split the model.

A region is a connected group of supported nodes that can be contracted into one node without creating a
cycle. Each node gets a level: the largest number of supported/unsupported changes on any path reaching it. A
path that leaves a region through an unsupported node and comes back would need two more changes, so grouping
supported nodes by level and by direct supported-to-supported edges keeps every region closed (no path leaves
it and re-enters), which is what an engine needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import ModelProto, helper

from surgery.graph import GraphFacts, all_inputs
from surgery.verdict import Report, Status


@dataclass
class Region:
    supported: bool
    nodes: list[str]  # node keys, topological order
    inputs: list[str] = field(default_factory=list)  # non-constant tensors it reads from outside (boundary)
    outputs: list[str] = field(
        default_factory=list
    )  # tensors it produces that are read outside or are outputs


@dataclass
class Crossing:
    tensor: str
    source: int | None  # region index of the producer, None for a graph input
    targets: list[int]  # region indices that read it
    bytes: int | None  # None when the shape or dtype is not known


@dataclass
class Partition:
    regions: list[Region] = field(default_factory=list)  # supported regions and fallback nodes, topological
    crossings: list[Crossing] = field(default_factory=list)  # tensors that go from one region to another
    unknown_nodes: list[str] = field(default_factory=list)  # fallback because no verdict was had

    @property
    def supported_regions(self) -> list[Region]:
        return [r for r in self.regions if r.supported]

    @property
    def engines(self) -> int:
        return len(self.supported_regions)

    @property
    def fallback(self) -> list[str]:
        return [k for r in self.regions if not r.supported for k in r.nodes]

    @property
    def fallback_nodes(self) -> int:
        return len(self.fallback)

    @property
    def crossing_tensors(self) -> list[str]:
        return [c.tensor for c in self.crossings]

    @property
    def crossing_bytes(self) -> int | None:
        sizes = [c.bytes for c in self.crossings]
        return None if any(b is None for b in sizes) else sum(sizes)

    def summary(self) -> str:
        total = sum(len(r.nodes) for r in self.regions)
        nb = self.crossing_bytes
        size = f"{nb:,} bytes" if nb is not None else "size unknown: some shapes are dynamic"
        biggest = max(self.supported_regions, key=lambda r: len(r.nodes), default=None)
        text = (
            f"{self.engines} supported region(s), {self.fallback_nodes} of {total} node(s) fall back"
            + (f" ({len(self.unknown_nodes)} without a verdict)" if self.unknown_nodes else "")
            + f"; {len(self.crossings)} tensor(s) cross between regions ({size})"
        )
        if biggest is not None and self.engines > 1:
            text += f"; the largest region holds {len(biggest.nodes)} node(s)"
        return text

    def to_dict(self) -> dict:
        return {
            "engines": self.engines,
            "fallback_nodes": self.fallback,
            "unknown_nodes": self.unknown_nodes,
            "crossing_tensors": len(self.crossings),
            "crossing_bytes": self.crossing_bytes,
            "regions": [
                {"supported": r.supported, "nodes": r.nodes, "inputs": r.inputs, "outputs": r.outputs}
                for r in self.regions
            ],
            "summary": self.summary(),
        }


def _nbytes(facts: GraphFacts, tensor: str) -> int | None:
    info = facts.info(tensor)
    n = info.numel()
    if n is None or not info.dtype:
        return None
    try:
        return n * np.dtype(helper.tensor_dtype_to_np_dtype(info.dtype)).itemsize
    except (KeyError, TypeError, ValueError):
        return None


def partition(model: ModelProto, report: Report, facts: GraphFacts | None = None) -> Partition:
    """Supported regions, fallback nodes and crossing tensors for `report`'s verdicts on `model`. A node without a
    verdict, or with `unknown`, falls back."""
    facts = facts or GraphFacts.of(model)
    nodes = model.graph.node
    status = {v.index: v.status for v in report.verdicts}
    ok = [status.get(i) is Status.SUPPORTED for i in range(len(nodes))]
    ins = [[x for x in dict.fromkeys(all_inputs(n))] for n in nodes]

    level = [0] * len(nodes)
    for i in facts.order:
        for x in ins[i]:
            p = facts.producer.get(x)
            if p is not None and p != i:
                level[i] = max(level[i], level[p] + (ok[p] != ok[i]))

    parent = list(range(len(nodes)))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i in facts.order:
        if not ok[i]:
            continue
        for x in ins[i]:
            p = facts.producer.get(x)
            if p is not None and ok[p] and level[p] == level[i]:
                parent[find(p)] = find(i)

    groups: dict[tuple, int] = {}
    regions: list[Region] = []
    region_of = [0] * len(nodes)
    for i in facts.order:
        gkey = ("s", find(i)) if ok[i] else ("f", i)
        if gkey not in groups:
            groups[gkey] = len(regions)
            regions.append(Region(ok[i], []))
        region_of[i] = groups[gkey]
        regions[region_of[i]].nodes.append(facts.keys[i])

    outputs = set(facts.graph_outputs)
    crossings: dict[str, Crossing] = {}
    for i in facts.order:
        r = region_of[i]
        for x in ins[i]:
            if facts.is_constant(x):
                continue  # constants are embedded in whichever region reads them
            p = facts.producer.get(x)
            source = None if p is None else region_of[p]
            if source == r:
                continue
            if x not in regions[r].inputs:
                regions[r].inputs.append(x)
            if source is None:
                continue  # a graph input feeds a region: a boundary, but not a crossing between regions
            if x not in regions[source].outputs:
                regions[source].outputs.append(x)
            c = crossings.setdefault(x, Crossing(x, source, [], _nbytes(facts, x)))
            if r not in c.targets:
                c.targets.append(r)
    for i in facts.order:
        for o in nodes[i].output:
            if o in outputs and o not in regions[region_of[i]].outputs:
                regions[region_of[i]].outputs.append(o)
    unknown = [facts.keys[i] for i in facts.order if status.get(i, Status.UNKNOWN) is Status.UNKNOWN]
    return Partition(regions, list(crossings.values()), unknown)
