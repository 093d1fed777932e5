"""Diagnosis and scoring: the view a diagnoser gets, the diagnoser registry, the scorer."""
