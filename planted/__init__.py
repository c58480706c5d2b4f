"""Hand-written high-level causal models (IOI-style, CAUSAL-BENCH toy circuits).

Empty for now: no planted model is implemented yet, and the CLI says so (`zoo show planted ...`
exits 2 with "no planted models are available yet").
"""

__all__: list[str] = []
