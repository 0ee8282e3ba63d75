"""OpenVINO: the check (`check`: read_model, then compile on CPU), the build (`build`) and the run of a split part
(`run`)."""
