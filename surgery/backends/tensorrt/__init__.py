"""TensorRT: the live parser (`live`, full TensorRT or TensorRT-RTX in a child process run by `worker`), the static
predictor of each version (`predictor`, from the facts in `data/`) and the engine build (`build`)."""
