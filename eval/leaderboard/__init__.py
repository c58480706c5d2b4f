"""Methods x entries -> cached cells (cells.py) -> the leaderboard table (table.py) and its plots (plots.py): `zoo bench`."""
