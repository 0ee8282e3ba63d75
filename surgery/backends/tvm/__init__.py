"""TVM (Relax): the check (`check`: import, then compile for llvm), the build (`build`, tuned or not) and the run of a
split part (`run`)."""
