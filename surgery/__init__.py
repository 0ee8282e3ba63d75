"""ONNX Surgery: see what TensorRT, onnxruntime, OpenVINO and TVM reject in an ONNX model, fix it with
replayable rules, and check every fix numerically. The library never imports Streamlit."""

__version__ = "0.1.0"
