"""surgery.sessions: a workspace saved to the state folder comes back bit for bit (every step, undone ones, the
cursor); a corrupt, stale or hostile session is one line, never a traceback; writes are atomic."""

import json
import os
import threading

import pytest

from surgery import sessions
from surgery.model import fingerprint
from surgery.sessions import SessionError
from surgery.workspace import Step, Workspace


@pytest.fixture
def root(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setenv("ONNX_SURGERY_STATE_DIR", str(d))
    return d


def edited(src) -> Workspace:
    ws = Workspace.open(src)
    ws.apply(Step("inference_mode"))
    ws.apply(Step("fold_constants"))
    ws.apply(Step("opset_upgrade", {"target": 17}))
    ws.undo()  # one undone step: redo must survive too
    return ws


def test_a_session_round_trips_bit_for_bit_with_its_undone_steps(root, tmp_path, sample_dir):
    src = tmp_path / "m.onnx"
    src.write_bytes((sample_dir / "training_mode_ops.onnx").read_bytes())
    ws = edited(src)
    sid = sessions.new_id()
    assert sessions.valid_id(sid)
    path = sessions.save(ws, sid, name="m.onnx", targets=["onnxruntime"], extra={"selected": "x"}).path
    assert path == root / sid / "state.json" and sessions.state_dir() == root
    assert not (root / sid / "original.onnx").exists()  # a path is kept by its path, not copied

    back = sessions.load(sid)
    assert back.warning is None
    assert back.workspace.fingerprint() == ws.fingerprint()
    assert fingerprint(back.workspace.current) == fingerprint(ws.current)
    assert back.workspace.cursor == 2 and back.workspace.steps == ws.steps and back.workspace.can_redo
    back.workspace.redo()
    ws.redo()
    assert back.workspace.fingerprint() == ws.fingerprint()
    assert (back.name, back.targets, back.extra) == ("m.onnx", ["onnxruntime"], {"selected": "x"})
    assert sorted(p.name for p in (root / sid).iterdir()) == [".lock", "state.json"]  # no temporary file left


def test_an_upload_is_copied_and_a_sample_kept_by_name(root, sample_dir):
    data = (sample_dir / "training_mode_ops.onnx").read_bytes()
    ws = Workspace.open(data, name="up.onnx")
    ws.apply(Step("inference_mode"))
    sid = sessions.new_id()
    sessions.save(ws, sid, name="up.onnx", upload=data)
    assert (root / sid / "original.onnx").read_bytes() == data
    assert sessions.load(sid).workspace.fingerprint() == ws.fingerprint()

    ws2 = Workspace.open(sample_dir / "ml_scaler.onnx")
    sid2 = sessions.new_id()
    sessions.save(ws2, sid2, name="ml_scaler.onnx", sample="ml_scaler")
    back = sessions.load(sid2)
    assert back.sample == "ml_scaler" and back.workspace.fingerprint() == ws2.fingerprint()


def test_a_changed_or_missing_original_is_a_stale_session(root, tmp_path, sample_dir):
    src = tmp_path / "m.onnx"
    src.write_bytes((sample_dir / "training_mode_ops.onnx").read_bytes())
    sid = sessions.new_id()
    sessions.save(edited(src), sid, name="m.onnx")
    src.write_bytes((sample_dir / "healthy_cnn.onnx").read_bytes())  # another model at the same path
    with pytest.raises(SessionError, match=r"stale: .*m\.onnx has changed") as err:
        sessions.load(sid)
    assert "\n" not in str(err.value)
    src.unlink()
    with pytest.raises(SessionError, match="original model cannot be opened") as err:
        sessions.load(sid)
    assert "\n" not in str(err.value)

    up = sessions.new_id()
    sessions.save(edited_upload(sample_dir), up, name="u.onnx")
    (root / up / "original.onnx").unlink()
    with pytest.raises(SessionError, match="copy is gone"):
        sessions.load(up)


def edited_upload(sample_dir) -> Workspace:
    ws = Workspace.open((sample_dir / "training_mode_ops.onnx").read_bytes(), name="u.onnx")
    ws.apply(Step("inference_mode"))
    return ws


@pytest.mark.parametrize(
    "text, words",
    [
        ("{not json", "not valid JSON"),
        ("\xff\xfe", "not valid JSON"),
        ('{"format": "something else"}', "not an onnx-surgery session"),
        ("[]", "not an onnx-surgery session"),
        ('{"format": "onnx-surgery-session/1", "recipe": 5, "cursor": 0}', "no recipe"),
        (None, "cursor 7 is not a step count"),
    ],
)
def test_a_corrupt_state_file_is_one_line_and_skipped_in_the_list(root, sample_dir, text, words):
    good = sessions.new_id()
    sessions.save(edited_upload(sample_dir), good, name="good.onnx")
    bad = sessions.new_id()
    sessions.save(edited_upload(sample_dir), bad, name="bad.onnx")
    state = root / bad / "state.json"
    if text is None:
        data = json.loads(state.read_text())
        data["cursor"] = 7
        state.write_text(json.dumps(data))
    else:
        state.write_bytes(text.encode("latin-1"))
    with pytest.raises(SessionError, match=words) as err:
        sessions.load(bad)
    assert "\n" not in str(err.value) and bad in str(err.value)
    found, problems = sessions.recent()
    assert [i.id for i in found] == [good]
    assert len(problems) == 1 and words in problems[0]


@pytest.mark.parametrize(
    "step, words",
    [
        ({"fix": "no_such_fix"}, "replaying its steps failed"),
        ({"fix": "inference_mode", "params": 5}, "session .*: "),
        ({"params": {}}, "step 1: a recipe step needs a 'fix' field"),
        ("inference_mode", "step 1: "),
    ],
)
def test_a_step_that_no_longer_replays_is_one_line(root, sample_dir, step, words):
    sid = sessions.new_id()
    sessions.save(edited_upload(sample_dir), sid, name="u.onnx")
    state = root / sid / "state.json"
    data = json.loads(state.read_text())
    data["recipe"]["steps"][0] = step
    state.write_text(json.dumps(data))
    with pytest.raises(SessionError, match=words) as err:
        sessions.load(sid)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "sid", ["../../x", "..", "a/b" * 10, "", "x" * 65, "short", "/etc/passwd", "abc def ghi jkl mno", 5, None]
)
def test_a_hostile_session_id_never_touches_the_file_system(root, sample_dir, sid):
    assert not sessions.valid_id(sid)
    with pytest.raises(SessionError, match="not a session id"):
        sessions.load(sid)
    with pytest.raises(SessionError, match="not a session id"):
        sessions.save(Workspace.open(sample_dir / "ml_scaler.onnx"), sid, name="x")
    with pytest.raises(SessionError, match="not a session id"):
        sessions.remove(sid)
    assert not root.exists()


def test_recent_is_newest_first_and_prune_keeps_the_newest(root, sample_dir):
    ws = edited_upload(sample_dir)
    ids = []
    for n in range(5):
        sid = sessions.new_id()
        sessions.save(ws, sid, name=f"m{n}.onnx")
        os.utime(root / sid / "state.json", (1000 + n, 1000 + n))
        ids.append(sid)
    (root / "not-a-session").mkdir()  # not ours: never listed, never removed
    found, problems = sessions.recent(limit=3)
    assert [i.name for i in found] == ["m4.onnx", "m3.onnx", "m2.onnx"] and not problems
    assert found[0].steps == 1 and found[0].total == 1 and "m4.onnx · 1 step(s)" in found[0].describe()
    gone = sessions.prune(keep=2, spare=(ids[0],))
    assert set(gone) == set(ids[1:3])
    assert {i.id for i in sessions.recent(limit=None)[0]} == {ids[0], ids[3], ids[4]}
    assert (root / "not-a-session").is_dir()


def test_concurrent_saves_never_show_a_partial_file(root, sample_dir):
    ws = Workspace.open(sample_dir / "training_mode_ops.onnx")
    ws.apply(Step("inference_mode"))
    sid = sessions.new_id()
    sessions.save(ws, sid, name="m.onnx")
    state = root / sid / "state.json"
    stop, seen, bad = threading.Event(), [0], []

    def read():
        while not stop.is_set():
            try:
                json.loads(state.read_bytes())
                seen[0] += 1
            except Exception as exc:  # a partial file would not parse
                bad.append(repr(exc))

    def write(n):
        for i in range(40):
            sessions.save(ws, sid, name=f"w{n}-{i}.onnx", extra={"pad": "x" * 50_000})

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(n,)) for n in range(3)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert not bad and seen[0] > 0
    assert sessions.load(sid).name.startswith("w")
    assert sessions.load(sid).revision == 1 + 3 * 40  # writers without `expect` still serialize: none lost
    assert sorted(p.name for p in (root / sid).iterdir()) == [".lock", "state.json"]


# -- a session file someone else wrote (issue 25): one line for it, never a broken list, nothing read outside -----


def _tampered(root, sample_dir, change):
    sid = sessions.new_id()
    sessions.save(edited_upload(sample_dir), sid, name="u.onnx")
    state = root / sid / "state.json"
    data = json.loads(state.read_text())
    text = change(data, root / sid)
    if text is not None:
        state.write_text(text)
    return sid


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d, f: json.dumps({**d, "saved_at": float("nan")}), "is not a time"),
        (lambda d, f: json.dumps({**d, "saved_at": 1e300}), "is not a time"),
        (lambda d, f: json.dumps({**d, "saved_at": -1e20}), "is not a time"),
        (lambda d, f: json.dumps(d).replace('"name": "u.onnx"', '"name": "\\ud800"'), "lone surrogate"),
        (lambda d, f: '{"format": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deep"),
        (
            lambda d, f: json.dumps(
                {**d, "recipe": {**d["recipe"], "steps": [{"fix": "inference_mode"}] * 10_001}}
            ),
            "at most 10,000",
        ),
    ],
    ids=["nan", "huge", "negative", "surrogate", "deep", "many-steps"],
)
def test_a_tampered_state_is_one_line_and_the_list_of_sessions_still_stands(root, sample_dir, change, words):
    good = sessions.new_id()
    sessions.save(edited_upload(sample_dir), good, name="good.onnx")
    bad = _tampered(root, sample_dir, change)
    with pytest.raises(SessionError, match=words) as err:
        sessions.load(bad)
    assert "\n" not in str(err.value)
    found, problems = sessions.recent()
    assert [i.id for i in found] == [good] and len(problems) == 1 and words.split()[0] in problems[0]


def test_a_symlinked_state_or_session_folder_is_not_followed(root, sample_dir, tmp_path):
    outside = tmp_path / "outside.json"
    sid = _tampered(root, sample_dir, lambda d, f: None)
    outside.write_text((root / sid / "state.json").read_text())
    (root / sid / "state.json").unlink()
    (root / sid / "state.json").symlink_to(outside)
    with pytest.raises(SessionError, match="cannot read"):
        sessions.load(sid)
    other = sessions.new_id()
    (root / other).symlink_to(root / sid)
    with pytest.raises(SessionError, match="symbolic link"):
        sessions.load(other)


def test_a_state_naming_a_model_outside_the_allowed_paths_is_refused_unopened(root, sample_dir, tmp_path):
    src = tmp_path / "m.onnx"
    src.write_bytes((sample_dir / "training_mode_ops.onnx").read_bytes())
    ws = Workspace.open(src)
    sid = sessions.new_id()
    sessions.save(ws, sid, name="m.onnx")
    state = root / sid / "state.json"
    data = json.loads(state.read_text())
    data["recipe"]["original"]["path"] = "/etc/passwd"
    state.write_text(json.dumps(data))
    opened = []
    with pytest.raises(SessionError, match="not a file this app may open"):
        sessions.load(sid, allowed=lambda p: opened.append(p) or p == src)
    assert opened == [__import__("pathlib").Path("/etc/passwd")]


def test_a_writer_that_read_an_older_revision_is_told_and_writes_nothing(root, tmp_path, sample_dir):
    src = tmp_path / "m.onnx"
    src.write_bytes((sample_dir / "training_mode_ops.onnx").read_bytes())
    sid = sessions.new_id()
    first = sessions.save(Workspace.open(src), sid, name="m.onnx")
    assert first.revision == 1 and sessions.load(sid).revision == 1
    a, b = sessions.load(sid), sessions.load(sid)  # two tabs on one session
    a.workspace.apply(Step("inference_mode"))
    assert sessions.save(a.workspace, sid, name="m.onnx", expect=a.revision).revision == 2
    b.workspace.apply(Step("fold_constants"))
    before = (root / sid / "state.json").read_bytes()
    with pytest.raises(
        sessions.SessionConflict, match=r"saved elsewhere since \(revision 2, this writer last saw 1\)"
    ):
        sessions.save(b.workspace, sid, name="m.onnx", expect=b.revision)
    assert (root / sid / "state.json").read_bytes() == before  # a's step is still there
    assert [s.fix for s in sessions.load(sid).workspace.recipe] == ["inference_mode"]


def test_concurrent_writers_each_get_their_own_revision(root, tmp_path, sample_dir):
    """Eight threads save one session at once, each naming the revision it read: exactly one wins each round and
    the revisions on disk never repeat or go back."""
    src = tmp_path / "m.onnx"
    src.write_bytes((sample_dir / "training_mode_ops.onnx").read_bytes())
    sid = sessions.new_id()
    ws = Workspace.open(src)
    sessions.save(ws, sid, name="m.onnx")
    won, lost = [], []
    gate = threading.Barrier(8)

    def write():
        rev = sessions.load(sid).revision
        gate.wait()
        try:
            won.append(sessions.save(ws, sid, name="m.onnx", expect=rev).revision)
        except sessions.SessionConflict:
            lost.append(rev)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert won == [2] and len(lost) == 7
    assert sessions.load(sid).revision == 2
