"""Tula's experiments as code: the tables of runs a study keeps under results/ (one row per run,
rows.py), their statistics (stats.py), and the reports generated from them (ags_report.py).
Standard library only, plus Debian's python3-scipy for the t quantiles."""
