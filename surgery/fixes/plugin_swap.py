"""Swap a node (or the region between chosen tensors) for one TensorRT plugin node.

The TensorRT ONNX parser imports an op it has no importer for through its plugin fallback: it looks up a
plugin creator by the node's op type, the `plugin_version` attribute (default "1") and `plugin_namespace`
(default ""). The new node keeps the inputs and outputs; attributes are mapped by `attributes`: a value, or
"$name" to copy the old node's attribute `name`.

With the default domain "" the result is what TensorRT's importer matches, but onnx.checker rejects it ("No Op
registered for <plugin>"): pass `domain` (e.g. "trt.plugins") for a model that also passes the checker. Neither
form runs in onnxruntime, so verification reports it as not verifiable.
"""

from __future__ import annotations

from onnx import ModelProto, helper

from surgery.fixes import FixError, Safety, register
from surgery.fixes._util import copy_model, find_node


def _check_closed(model: ModelProto, region: list[int], outputs: list[str]) -> None:
    """Every tensor made inside the region and read outside it must be one of the region's outputs."""
    from surgery.graph import all_inputs

    inside = set(region)
    made = {o: i for i in region for o in model.graph.node[i].output if o}
    leaks = []
    for j, n in enumerate(model.graph.node):
        if j in inside:
            continue
        leaks += [x for x in all_inputs(n) if x in made and x not in outputs]
    leaks += [o.name for o in model.graph.output if o.name in made and o.name not in outputs]
    if leaks:
        raise FixError(
            f"the region between the given tensors also feeds {sorted(set(leaks))} outside it, which one plugin "
            "node would not produce. Note: add them to `outputs`, or choose a smaller region"
        )


def _check_standard(plugin: str, version: str, namespace: str) -> None:
    """A plugin named like one of TensorRT's standard plugins must ask for a version the library has shipped
    (tensorrt/data/plugins.json); other names are the user's own plugins and pass."""
    from surgery.backends.tensorrt.records import plugin_history

    known = plugin_history(plugin)
    if not known or namespace:
        return
    if not any(e["version"] == version for e in known):
        spans = "; ".join(
            f"version {e['version']}: TensorRT {e['shipped'][0]}–{e['shipped'][-1]}" for e in known
        )
        raise FixError(
            f"TensorRT's standard plugin {plugin} has no version {version}. Note: it ships {spans}"
        )


def _attr_value(attr):
    return helper.get_attribute_value(attr)


@register(
    "plugin_swap",
    safety=Safety.CHANGES_SEMANTICS,
    summary="Replace a node, or the region between tensors, by one plugin node (op type = plugin name).",
    params={
        "node": "node key (str) of the one node to replace; or give `inputs` and `outputs` instead",
        "inputs": "list of tensor names: the region's inputs, which become the plugin node's inputs in order",
        "outputs": "list of tensor names: the region's outputs, which become the plugin node's outputs in "
        "order; every tensor the region feeds outside must be listed",
        "plugin": "str, required: the plugin name, used as the new node's op type (TensorRT's importer "
        "looks the creator up by op type, plugin_version, plugin_namespace)",
        "version": "str: the plugin_version attribute (default '1'); for a standard plugin, one that TensorRT's "
        "plugin library has shipped (tensorrt/data/plugins.json)",
        "namespace": "str: the plugin_namespace attribute (default '')",
        "domain": "str: the new node's domain (default ''; a non-empty one is added to the opset imports)",
        "attributes": "dict new attribute name -> value, or '$old_name' to copy the old node's attribute "
        "`old_name` (only with `node`); old attributes not named here are dropped",
    },
)
def plugin_swap(
    model: ModelProto,
    plugin: str,
    node=None,
    inputs=None,
    outputs=None,
    version="1",
    namespace="",
    domain="",
    attributes=None,
) -> ModelProto:
    _check_standard(plugin, str(version), str(namespace))
    out = copy_model(model)
    graph = out.graph
    if node is not None:
        i = find_node(out, node)
        old = graph.node[i]
        ins, outs, region, name = list(old.input), list(old.output), [i], old.name or plugin
        old_attrs = {a.name: _attr_value(a) for a in old.attribute}
    elif inputs and outputs:
        from surgery.fixes.extract import region_between

        region = region_between(out, inputs, outputs)
        _check_closed(out, region, outputs)
        ins, outs, name = list(inputs), list(outputs), f"{plugin}_region"
        old_attrs = {}
    else:
        raise FixError("plugin_swap needs `node`, or both `inputs` and `outputs`")
    attrs = {}
    for new_name, value in (attributes or {}).items():
        if isinstance(value, str) and value.startswith("$"):
            src = value[1:]
            if src not in old_attrs:
                raise FixError(
                    f"attribute '{src}' (for plugin field '{new_name}') is not on the old node. Note: "
                    f"it has {sorted(old_attrs)}"
                )
            attrs[new_name] = old_attrs[src]
        else:
            attrs[new_name] = value
    new = helper.make_node(
        plugin,
        ins,
        outs,
        name=name,
        domain=domain,
        plugin_version=str(version),
        plugin_namespace=str(namespace),
        **attrs,
    )
    first = min(region)
    for k in sorted(region, reverse=True):
        del graph.node[k]
    graph.node.insert(first, new)
    if domain and not any(o.domain == domain for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(domain, 1))
    # the old op's domain may now be unused
    used = {n.domain for n in graph.node}
    keep = [o for o in out.opset_import if o.domain in ("", "ai.onnx") or o.domain in used]
    if len(keep) != len(out.opset_import):
        kept = [helper.make_opsetid(o.domain, o.version) for o in keep]
        del out.opset_import[:]
        out.opset_import.extend(kept)
    return out
