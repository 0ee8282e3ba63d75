"""onnxruntime: the check (`check`: a session per node signature, then the whole model) and the build (`build`)."""
