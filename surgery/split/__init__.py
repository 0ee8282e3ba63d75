"""Split a model for deployment, the TF-TRT / TVM BYOC way: the regions a target supports become parts it runs,
the rest becomes parts a general runtime runs (the fallback, onnxruntime by default), and the chain of parts
still computes the original function. The package: plan.py (the plan as data and files), making.py (placing,
cutting, checking each part alone), checking.py (verification), chain.py (running the parts), draw.py (dot),
regions.py, cut.py, runners.py.

    plan = make_plan(load_model("m.onnx"), "tensorrt")       # parts, crossings, each part checked, verified
    plan.save("out/")                                         # out/part0_onnxruntime.onnx, ..., out/plan.json
    outputs = run(load("out/"), {"text": ...})                # the parts chained: a usable result

How nodes are placed (surgery.split.regions): a node the target supports goes to the target; a rejected node and
a node without a verdict (`unknown`, e.g. a TensorRT-RTX plugin gap that full TensorRT may fill: "cannot
confirm") go to the fallback — the safe choice, since nobody confirmed the target runs them. Constants are not
placed: each part gets the constants it reads (surgery.split.cut). Every target part is then checked alone by the
target; a node it refuses there goes to the fallback and the plan is made again (at most MAX_ROUNDS times).

Verification: the original (onnxruntime) and the chain (each part through its backend where this machine can run
it, else onnxruntime; see surgery.split.runners) on the same seeded inputs; max abs and mean relative error per
output (surgery.verify's definitions). The chain reproduces the original when every output is within the exact
thresholds of surgery.verify (fp32 mean relative 1e-6, integers and strings equal) when every part ran on
onnxruntime, or within RTOL_OTHER_BACKEND where another backend computed a part (its own arithmetic). When it
does not, the first crossing tensor (in execution order) that differs is named.
"""

from surgery.split.chain import run
from surgery.split.checking import seeded_feeds, verify_plan
from surgery.split.draw import PART_COLORS, to_dot
from surgery.split.making import build_target_parts, isolated_types, make_plan, verify_isolated
from surgery.split.plan import DEFAULT_MIN_NODES, Part, Plan, SplitError, Tensor, Verification, load

__all__ = [
    "DEFAULT_MIN_NODES",
    "PART_COLORS",
    "Part",
    "Plan",
    "SplitError",
    "Tensor",
    "Verification",
    "build_target_parts",
    "isolated_types",
    "load",
    "make_plan",
    "run",
    "seeded_feeds",
    "to_dot",
    "verify_isolated",
    "verify_plan",
]
