"""The graph facts of the current model, cached per model version and computed in the background: declared
facts at once, inferred shapes later on big models (SHAPES_LATER_OVER), then what the first selected node's fixes
need (the rules, the rule context); and the start model `onnx-surgery app MODEL` names, read ahead by the server
while the browser loads the page (read_ahead), so the first session finds its facts and drawing done."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import streamlit as st
from session import version, workspace

from surgery.model import load_model

# -- the start model, read ahead ------------------------------------------------------------------------------
# `onnx-surgery app MODEL` names the model every first page shows before any browser asks for one. The server
# process (surgery.cli.serve) reads it, with its facts and first drawing, in a thread while the browser loads
# Streamlit's page (~0.9 s here): the first session then finds them done where it would compute them. Only the
# first session takes the model itself (a later one reads its own copy, so no two sessions share a Workspace's
# original); a file changed since it was read is read again.


class _ReadAhead:
    def __init__(self, path: Path):
        self.path, self.stat = path, _stat(path)
        self.model = self.facts = self.view = None


_AHEAD: dict[Path, object] = {}  # path -> Future of its _ReadAhead
_PREPARED: list[_ReadAhead] = []  # the one a session took, until its first view is asked for


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st_ = path.stat()
    except OSError:
        return None
    return st_.st_size, st_.st_mtime_ns


def read_ahead(path: str) -> None:
    """Start reading the start model at `path` (its facts, its first drawing) in a thread of this process."""
    from concurrent.futures import Future
    from threading import Thread

    p = Path(path).expanduser().resolve()
    future: Future = Future()
    _AHEAD[p] = future

    def work():
        # whatever goes wrong (a bad file), the page reads the file again and says why, as without a read ahead;
        # the Future always gets an answer, so no page waits on it for ever
        try:
            future.set_result(_read(p))
        except BaseException as exc:
            future.set_exception(exc)

    Thread(target=work, name="onnx-surgery-read-ahead", daemon=True).start()


def _read(path: Path) -> _ReadAhead:
    from surgery.graph import GraphFacts
    from surgery.view.draw import structure

    ahead = _ReadAhead(path)
    ahead.model = load_model(path, content_hash=True, weights_in_file=True)  # as opening.open_path
    proto = ahead.model.proto
    # as the first page asks for them: a big model's declared types, a smaller one's inferred shapes
    # (GraphFacts.of keeps those for this proto itself)
    if len(proto.graph.node) <= SHAPES_LATER_OVER:
        ahead.facts = _shaped(proto, str(path), ahead.model.file_bytes)
    else:
        ahead.facts = GraphFacts.of(proto, infer=False)
    ahead.view = structure(ahead.facts)
    return ahead


def _take_read_ahead(path: Path):
    """The start model read ahead from `path` (once: None for the next session, as when nothing was read ahead,
    the read failed, or the file changed since)."""
    future = _AHEAD.pop(path, None)
    if future is None:
        return None
    try:
        ahead = future.result()
    except BaseException:  # raised in the reading thread, never this page's own control flow
        return None
    if ahead.stat is None or ahead.stat != _stat(path):
        return None
    _PREPARED[:] = [ahead]
    return ahead.model


def _prepared(facts=None, model=None):
    """The read-ahead record whose facts are `facts` (or whose model is `model`), if a session took it."""
    for ahead in _PREPARED:
        if (facts is not None and ahead.facts is facts) or (model is not None and ahead.model.proto is model):
            return ahead
    return None


def first_view(facts):
    """The whole graph's drawing read ahead for these very facts, given once; None otherwise."""
    ahead = _prepared(facts=facts)
    if ahead is None:
        return None
    _PREPARED.clear()  # nothing more to hand out: the caches that asked hold what they need
    return ahead.view


@st.cache_resource(show_spinner=False, max_entries=8)
def _facts(fp: str, _model, _path: str | None = None, _size: int = 0):
    ahead = _prepared(model=_model)
    if ahead is not None and ahead.facts.inferred:  # the start model's, read ahead
        return ahead.facts
    return _shaped(_model, _path, _size)


# A graph file this big (its nodes: external weights do not count) has its shapes inferred in a worker process
# that reads the file itself, as a big model's are: in the server, inference holds a copy of the graph for
# onnx's C++ side, its answer and the light copy it was given (a 2.7 MB graph, a 1B Llama export: the server's
# peak +17 MiB, and +5 MiB held by the facts' typed graph); the worker costs ~0.5 s once (then pooled), read
# ahead while the browser loads the page. A model with subgraphs is inferred here: its bodies' facts read the
# typed graph.
INFER_IN_WORKER_OVER = 1 << 20  # bytes of the model file


def _shaped(model, path: str | None, size: int):
    """GraphFacts.of(model) (with inferred shapes), inferred in a worker process when the model is the unedited
    file at `path`, over INFER_IN_WORKER_OVER bytes, without subgraphs."""
    from onnx import AttributeProto

    from surgery.graph import GraphFacts, infer_in_worker

    bodies = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
    if (
        path is None
        or size <= INFER_IN_WORKER_OVER
        or any(a.type in bodies for n in model.graph.node for a in n.attribute)
    ):
        return GraphFacts.of(model)
    return infer_in_worker(GraphFacts.of(model, infer=False), path=path)


# Shape inference is most of the time it takes to open a big model (100k nodes: ~1.5 of ~2.5 CPU s), and the
# collapsed first drawing needs no shapes: above this size the graph is drawn with the declared types while a
# worker process infers the shapes (surgery.graph.infer_in_worker; it reads the file itself when the model is
# the unedited original), started once the page is drawn.
SHAPES_LATER_OVER = 20_000  # nodes
_SHAPES = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnx-surgery-shapes")


@st.cache_resource(show_spinner=False, max_entries=8)
def _declared_facts(fp: str, _model):
    from surgery.graph import GraphFacts

    ahead = _prepared(model=_model)
    if ahead is not None and not ahead.facts.inferred:
        return ahead.facts
    return GraphFacts.of(_model, infer=False)


@st.cache_resource(show_spinner=False, max_entries=8)
def _background(fp: str, _declared, _path):
    """A big model's work after its first drawing, in order on the executor's one thread: the search index
    (~0.15 s at 100k nodes), the facts with shapes (inferred in the worker process), then what the first
    selected node's fixes need (the rules; the rule context's foldable set, ~0.4 s). Returns the Futures of the
    shapes and of the fixes' preparation."""
    from surgery.graph import infer_in_worker
    from surgery.view.find import search_index

    _SHAPES.submit(search_index, _declared)
    shapes = _SHAPES.submit(infer_in_worker, _declared, path=_path)
    fixes = _SHAPES.submit(
        lambda: (builtin_rules(), _rule_context(fp, _declared.model, shapes.result()).foldable)
    )
    return shapes, fixes


def _unedited_path() -> str | None:
    """The file the current model was read from, when it is that file's model unchanged (never for an upload:
    its name is not a path on this machine; nor for a file whose size changed since it was read)."""
    ws = workspace()
    original = ws.original
    if ws.current is not original.proto or original.base_dir is None:
        return None
    path = Path(original.base_dir) / Path(original.source).name
    try:
        return str(path) if path.stat().st_size == original.file_bytes else None
    except OSError:
        return None


def facts(shapes: bool = True, wait: bool = True):
    """GraphFacts of the current model, shared across reruns and sessions: with inferred shapes, waiting for
    them if they are being inferred (`wait=False`: the declared types until they are in); with `shapes=False`,
    a big model's declared types (what the collapsed drawing, search and navigation read: the collapsed drawing
    stays the same when the shapes arrive)."""
    fp, model = version(), workspace().current
    if len(model.graph.node) <= SHAPES_LATER_OVER:
        path = _unedited_path()
        return _facts(fp, model, path, workspace().original.file_bytes if path else 0)
    declared = _declared_facts(fp, model)
    if not shapes:
        return declared
    future = infer_shapes_soon()
    if not wait and not future.done():
        return declared
    with st.spinner("Inferring shapes…"):
        return future.result()


def _started():
    """A big model's background work (started now if it was not): (shapes, fixes) Futures; None for a model
    drawn with its shapes."""
    fp, model = version(), workspace().current
    if len(model.graph.node) <= SHAPES_LATER_OVER:
        return None
    return _background(fp, _declared_facts(fp, model), _unedited_path())


def infer_shapes_soon():
    """Start a big model's background work (once the page is drawn: the worker started with the first run
    slowed the first drawing of a 100k-node model from 5.5 to 7.4 s on 2 cores, bench/app_open.py); the Future
    of the facts with shapes, None for a model drawn with them already."""
    started = _started()
    return started[0] if started else None


def fixes_ready() -> bool:
    """Whether proposals can be made without waiting: the shapes are in and the rules and the rule context are
    prepared (always, for a model drawn with its shapes)."""
    started = _started()
    return started is None or started[1].done()


@st.cache_resource(show_spinner=False)
def builtin_rules():
    from surgery.rulebook import load_rules

    return load_rules()


@st.cache_resource(show_spinner=False, max_entries=8)
def _rule_context(fp: str, _model, _facts):
    """What rule conditions look at (facts, foldable tensors, ...), once per model version: not once per
    selected node (the foldable set alone is ~0.5 s at 100k nodes)."""
    from surgery.rulebook.matcher import Context

    ctx = Context(_model)
    ctx.facts = _facts  # the app's facts of this version: GraphFacts.of would size the model again (0.1 s)
    return ctx
