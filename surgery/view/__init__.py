"""What the app draws of a graph: `draw` (the layout, colours and the before/after of a step), `groups` (how a
big graph folds into name scopes, ranges and blocks), `labels` (the words on and beside it) and `find` (search,
neighbourhoods, the next refused node)."""
