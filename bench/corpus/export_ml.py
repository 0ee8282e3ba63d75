"""Classical ML models converted to ONNX by their own converters (skl2onnx, onnxmltools), on small synthetic
data with fixed seeds. Runs inside the corpus's `ml` venv (see build.py):

    python export_ml.py OUT_DIR CANDIDATES_JSON [--only FAMILY ...]

Writes OUT_DIR/<family>/<name>.onnx (skipping files already there) and a JSON list of
{id, path (relative to OUT_DIR's parent's parent), family, source} or {id, source, error} records.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from importlib.metadata import version
from pathlib import Path

import numpy as np

SEED = 0


def _data(kind: str, n_features: int = 6):
    from sklearn.datasets import make_classification, make_regression

    if kind == "binary":
        return make_classification(n_samples=200, n_features=n_features, n_informative=4, random_state=SEED)
    if kind == "multi":
        return make_classification(
            n_samples=300, n_features=n_features, n_informative=4, n_classes=3, random_state=SEED
        )
    x, y = make_regression(n_samples=200, n_features=n_features, noise=0.1, random_state=SEED)
    return x, y


def _skl(model, x, **kw):
    from skl2onnx import to_onnx

    return to_onnx(model, x[:1].astype(np.float32), target_opset=kw.pop("target_opset", 17), **kw)


def _fit(model, kind: str, n_features: int = 6):
    x, y = _data(kind, n_features)
    return model.fit(x, y), x


# --- scikit-learn ---------------------------------------------------------------------------------------


def logreg_zipmap():
    from sklearn.linear_model import LogisticRegression

    m, x = _fit(LogisticRegression(max_iter=500), "multi")
    return _skl(m, x)


def logreg_no_zipmap():
    from sklearn.linear_model import LogisticRegression

    m, x = _fit(LogisticRegression(max_iter=500), "binary")
    return _skl(m, x, options={id(m): {"zipmap": False}})


def linear_regression():
    from sklearn.linear_model import LinearRegression

    m, x = _fit(LinearRegression(), "reg")
    return _skl(m, x)


def svc_linear():
    from sklearn.svm import SVC

    m, x = _fit(SVC(kernel="linear", probability=True, random_state=SEED), "binary")
    return _skl(m, x)


def svc_rbf():
    from sklearn.svm import SVC

    m, x = _fit(SVC(kernel="rbf", random_state=SEED), "multi")
    return _skl(m, x, options={id(m): {"zipmap": False}})


def svr_linear():
    from sklearn.svm import SVR

    m, x = _fit(SVR(kernel="linear"), "reg")
    return _skl(m, x)


def svr_rbf():
    from sklearn.svm import SVR

    m, x = _fit(SVR(kernel="rbf"), "reg")
    return _skl(m, x)


def linear_svc():
    from sklearn.svm import LinearSVC

    m, x = _fit(LinearSVC(random_state=SEED), "multi")
    return _skl(m, x)


def decision_tree_classifier():
    from sklearn.tree import DecisionTreeClassifier

    m, x = _fit(DecisionTreeClassifier(max_depth=5, random_state=SEED), "multi")
    return _skl(m, x)


def decision_tree_regressor():
    from sklearn.tree import DecisionTreeRegressor

    m, x = _fit(DecisionTreeRegressor(max_depth=5, random_state=SEED), "reg")
    return _skl(m, x)


def random_forest_classifier():
    from sklearn.ensemble import RandomForestClassifier

    m, x = _fit(RandomForestClassifier(n_estimators=20, max_depth=6, random_state=SEED), "multi")
    return _skl(m, x)


def random_forest_regressor():
    from sklearn.ensemble import RandomForestRegressor

    m, x = _fit(RandomForestRegressor(n_estimators=20, max_depth=6, random_state=SEED), "reg")
    return _skl(m, x)


def gradient_boosting_classifier():
    from sklearn.ensemble import GradientBoostingClassifier

    m, x = _fit(GradientBoostingClassifier(n_estimators=20, random_state=SEED), "binary")
    return _skl(m, x)


def gradient_boosting_regressor():
    from sklearn.ensemble import GradientBoostingRegressor

    m, x = _fit(GradientBoostingRegressor(n_estimators=20, random_state=SEED), "reg")
    return _skl(m, x)


def hist_gradient_boosting_classifier():
    from sklearn.ensemble import HistGradientBoostingClassifier

    m, x = _fit(HistGradientBoostingClassifier(max_iter=20, random_state=SEED), "multi")
    return _skl(m, x, target_opset={"": 17, "ai.onnx.ml": 3})


def mlp_classifier():
    from sklearn.neural_network import MLPClassifier

    m, x = _fit(MLPClassifier(hidden_layer_sizes=(16,), max_iter=300, random_state=SEED), "multi")
    return _skl(m, x)


def knn_classifier():
    from sklearn.neighbors import KNeighborsClassifier

    m, x = _fit(KNeighborsClassifier(n_neighbors=3), "multi")
    return _skl(m, x)


def gaussian_nb():
    from sklearn.naive_bayes import GaussianNB

    m, x = _fit(GaussianNB(), "multi")
    return _skl(m, x)


def kmeans():
    from sklearn.cluster import KMeans

    x, _ = _data("multi")
    m = KMeans(n_clusters=4, n_init=3, random_state=SEED).fit(x)
    return _skl(m, x)


def pca():
    from sklearn.decomposition import PCA

    x, _ = _data("multi")
    return _skl(PCA(n_components=3, random_state=SEED).fit(x), x)


def pipeline_scalers():
    """StandardScaler -> Normalizer -> MinMaxScaler -> Binarizer-fed LogisticRegression, plus an imputer."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, Normalizer, StandardScaler

    x, y = _data("binary")
    x = x.copy()
    x[::7, 2] = np.nan
    m = make_pipeline(
        SimpleImputer(strategy="mean"),
        StandardScaler(),
        Normalizer(),
        MinMaxScaler(),
        LogisticRegression(max_iter=500),
    ).fit(x, y)
    return _skl(m, x)


def pipeline_binarizer():
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Binarizer, PolynomialFeatures

    x, y = _data("reg")
    m = make_pipeline(Binarizer(threshold=0.0), PolynomialFeatures(degree=2), Ridge()).fit(x, y)
    return _skl(m, x)


def pipeline_column_transformer():
    """Numeric columns imputed and scaled, categorical strings one-hot encoded, into a random forest: two
    graph inputs, one float and one string."""
    import pandas as pd
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(SEED)
    n = 200
    num = rng.standard_normal((n, 3)).astype(np.float32)
    num[::9, 0] = np.nan
    cat = rng.choice(["red", "green", "blue", "other"], size=(n, 2)).astype(object)
    y = (np.nan_to_num(num[:, 1]) + (cat[:, 0] == "red")) > 0.5
    df = pd.DataFrame({"a": num[:, 0], "b": num[:, 1], "c": num[:, 2], "s": cat[:, 0], "t": cat[:, 1]})
    pre = ColumnTransformer(
        [
            ("num", Pipeline([("imp", SimpleImputer()), ("sc", StandardScaler())]), ["a", "b", "c"]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), ["s", "t"]),
        ]
    )
    m = Pipeline([("pre", pre), ("rf", RandomForestClassifier(n_estimators=10, random_state=SEED))]).fit(
        df, y
    )
    inputs = [
        ("a", FloatTensorType([None, 1])),
        ("b", FloatTensorType([None, 1])),
        ("c", FloatTensorType([None, 1])),
        ("s", StringTensorType([None, 1])),
        ("t", StringTensorType([None, 1])),
    ]
    return to_onnx(m, initial_types=inputs, target_opset=17)


def tfidf_logreg():
    """Text pipeline: TfidfVectorizer (string input, StringNormalizer + TfIdfVectorizer ops) + LogisticRegression."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    words = [
        "onnx",
        "graph",
        "model",
        "node",
        "tensor",
        "shape",
        "rule",
        "fix",
        "export",
        "runtime",
        "opset",
        "weight",
    ]
    rng = np.random.default_rng(SEED)
    docs = [" ".join(rng.choice(words, size=6)) for _ in range(120)]
    y = [("graph" in d) + ("tensor" in d) for d in docs]
    m = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), min_df=2), LogisticRegression(max_iter=500))
    m.fit(docs, y)
    return to_onnx(m, initial_types=[("text", StringTensorType([None]))], target_opset=17)


def label_encoded_strings():
    """String labels: LabelEncoder on string classes as a standalone model (LabelEncoder op with string keys)
    and a classifier trained on string class names (string labels on the output)."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.preprocessing import LabelEncoder

    m = LabelEncoder().fit(["cat", "dog", "bird", "fish"])
    return to_onnx(m, initial_types=[("label", StringTensorType([None]))], target_opset=17)


def string_class_labels():
    from sklearn.tree import DecisionTreeClassifier

    x, y = _data("multi")
    names = np.array(["low", "mid", "high"])[y]
    m = DecisionTreeClassifier(max_depth=4, random_state=SEED).fit(x, names)
    return _skl(m, x)


def dict_vectorizer():
    """A list of dicts in, via DictVectorizer (map input) into a linear regression."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(SEED)
    rows = [{k: float(rng.standard_normal()) for k in rng.choice(list("abcdef"), size=3)} for _ in range(100)]
    y = [sum(r.values()) for r in rows]
    m = make_pipeline(DictVectorizer(sparse=False), LinearRegression()).fit(rows, y)
    return to_onnx(m, initial_types=[("row", DictionaryType(StringTensorType([]), FloatTensorType([])))])


# --- lightgbm / xgboost (onnxmltools) ---------------------------------------------------------------------


def _mltools(model, n_features: int, zipmap: bool = True):
    from onnxmltools.convert import convert_lightgbm, convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    types = [("input", FloatTensorType([None, n_features]))]
    name = type(model).__name__  # else the graph is named by a random uuid
    if type(model).__module__.startswith("lightgbm"):
        return convert_lightgbm(model, name=name, initial_types=types, target_opset=15, zipmap=zipmap)
    return convert_xgboost(model, name=name, initial_types=types, target_opset=15)


def lgbm_classifier():
    import lightgbm as lgb

    m, _ = _fit(lgb.LGBMClassifier(n_estimators=20, num_leaves=15, random_state=SEED, verbose=-1), "multi")
    return _mltools(m, 6)


def lgbm_binary_no_zipmap():
    import lightgbm as lgb

    m, _ = _fit(lgb.LGBMClassifier(n_estimators=20, num_leaves=15, random_state=SEED, verbose=-1), "binary")
    return _mltools(m, 6, zipmap=False)


def lgbm_regressor():
    import lightgbm as lgb

    m, _ = _fit(lgb.LGBMRegressor(n_estimators=20, num_leaves=15, random_state=SEED, verbose=-1), "reg")
    return _mltools(m, 6)


def xgb_classifier():
    import xgboost as xgb

    m, _ = _fit(xgb.XGBClassifier(n_estimators=20, max_depth=4, random_state=SEED), "multi")
    return _mltools(m, 6)


def xgb_binary():
    import xgboost as xgb

    m, _ = _fit(xgb.XGBClassifier(n_estimators=20, max_depth=3, random_state=SEED), "binary")
    return _mltools(m, 6)


def xgb_regressor():
    import xgboost as xgb

    m, _ = _fit(xgb.XGBRegressor(n_estimators=20, max_depth=4, random_state=SEED), "reg")
    return _mltools(m, 6)


def lgbm_in_sklearn_pipeline():
    """A scaler + LGBMClassifier pipeline through skl2onnx with onnxmltools' LightGBM converter registered."""
    import lightgbm as lgb
    from onnxmltools.convert.lightgbm.operator_converters.LightGbm import convert_lightgbm
    from skl2onnx import to_onnx, update_registered_converter
    from skl2onnx.common.shape_calculator import calculate_linear_classifier_output_shapes
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    update_registered_converter(
        lgb.LGBMClassifier,
        "LightGbmLGBMClassifier",
        calculate_linear_classifier_output_shapes,
        convert_lightgbm,
        options={"nocl": [True, False], "zipmap": [True, False, "columns"]},
    )
    x, y = _data("binary")
    m = make_pipeline(StandardScaler(), lgb.LGBMClassifier(n_estimators=10, random_state=SEED, verbose=-1))
    m.fit(x, y)
    return to_onnx(m, x[:1].astype(np.float32), target_opset={"": 17, "ai.onnx.ml": 3})


# (name, family, converter package, function)
MODELS = [
    ("logreg_zipmap", "sklearn", "skl2onnx", logreg_zipmap),
    ("logreg_no_zipmap", "sklearn", "skl2onnx", logreg_no_zipmap),
    ("linear_regression", "sklearn", "skl2onnx", linear_regression),
    ("svc_linear", "sklearn", "skl2onnx", svc_linear),
    ("svc_rbf", "sklearn", "skl2onnx", svc_rbf),
    ("svr_linear", "sklearn", "skl2onnx", svr_linear),
    ("svr_rbf", "sklearn", "skl2onnx", svr_rbf),
    ("linear_svc", "sklearn", "skl2onnx", linear_svc),
    ("decision_tree_classifier", "sklearn", "skl2onnx", decision_tree_classifier),
    ("decision_tree_regressor", "sklearn", "skl2onnx", decision_tree_regressor),
    ("random_forest_classifier", "sklearn", "skl2onnx", random_forest_classifier),
    ("random_forest_regressor", "sklearn", "skl2onnx", random_forest_regressor),
    ("gradient_boosting_classifier", "sklearn", "skl2onnx", gradient_boosting_classifier),
    ("gradient_boosting_regressor", "sklearn", "skl2onnx", gradient_boosting_regressor),
    ("hist_gradient_boosting_classifier", "sklearn", "skl2onnx", hist_gradient_boosting_classifier),
    ("mlp_classifier", "sklearn", "skl2onnx", mlp_classifier),
    ("knn_classifier", "sklearn", "skl2onnx", knn_classifier),
    ("gaussian_nb", "sklearn", "skl2onnx", gaussian_nb),
    ("kmeans", "sklearn", "skl2onnx", kmeans),
    ("pca", "sklearn", "skl2onnx", pca),
    ("pipeline_scalers", "sklearn", "skl2onnx", pipeline_scalers),
    ("pipeline_binarizer", "sklearn", "skl2onnx", pipeline_binarizer),
    ("pipeline_column_transformer", "sklearn", "skl2onnx", pipeline_column_transformer),
    ("tfidf_logreg", "sklearn", "skl2onnx", tfidf_logreg),
    ("label_encoder_strings", "sklearn", "skl2onnx", label_encoded_strings),
    ("string_class_labels", "sklearn", "skl2onnx", string_class_labels),
    ("dict_vectorizer", "sklearn", "skl2onnx", dict_vectorizer),
    ("lgbm_classifier", "lightgbm", "onnxmltools", lgbm_classifier),
    ("lgbm_binary_no_zipmap", "lightgbm", "onnxmltools", lgbm_binary_no_zipmap),
    ("lgbm_regressor", "lightgbm", "onnxmltools", lgbm_regressor),
    ("lgbm_in_sklearn_pipeline", "lightgbm", "skl2onnx", lgbm_in_sklearn_pipeline),
    ("xgb_classifier", "xgboost", "onnxmltools", xgb_classifier),
    ("xgb_binary", "xgboost", "onnxmltools", xgb_binary),
    ("xgb_regressor", "xgboost", "onnxmltools", xgb_regressor),
]

TRAINERS = {"sklearn": "scikit-learn", "lightgbm": "lightgbm", "xgboost": "xgboost-cpu"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("candidates", type=Path)
    ap.add_argument("--only", nargs="+", default=None)
    args = ap.parse_args()
    cache = args.out_dir.parent.parent
    records = []
    todo = [m for m in MODELS if args.only is None or m[1] in args.only]
    for i, (name, family, converter, fn) in enumerate(todo, 1):
        trainer = TRAINERS[family]
        source = f"export:{converter}=={version(converter)} {name} ({trainer}=={version(trainer)})"
        path = args.out_dir / family / f"{name}.onnx"
        rec = {"id": f"{family}/{name}", "family": family, "source": source}
        t = time.time()
        if not path.exists():
            try:
                model = fn()
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(model.SerializeToString())
            except Exception as e:  # noqa: BLE001 - one failed conversion is recorded, not fatal
                traceback.print_exc(limit=2)
                records.append({**rec, "error": f"conversion failed: {type(e).__name__}: {e}"[:500]})
                print(f"[ml {i}/{len(todo)}] {name}: FAILED {type(e).__name__}: {e}", flush=True)
                continue
            print(
                f"[ml {i}/{len(todo)}] {name}: {path.stat().st_size} bytes in {time.time() - t:.1f} s",
                flush=True,
            )
        records.append({**rec, "path": str(path.relative_to(cache))})
    args.candidates.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
