"""Reporting: results/ tables and figures, sweeps, pairs, provenance and the paper."""
