"""A survey's pieces, run by the use case surgery.usecases.survey: the request and its jobs (request.py), one
cell in its child (cells.py), the cell cache (cache.py), where cells run (engines.py), the report (report.py)."""
