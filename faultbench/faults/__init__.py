"""Faults: bugs injected into a healthy run, each under the label a diagnoser must answer."""
