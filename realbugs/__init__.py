"""Real bugs, reported in public, re-enacted with their fixed twins (installed as
``faultbench.realbugs``).

Each case is one module of :mod:`faultbench.realbugs.cases`: the report's address,
what was seen, the accepted diagnosis, the label it deserves, and one script that
trains in two forms, faulty and fixed. ``faultbench run --task realbugs`` scores a
diagnoser on them (:mod:`faultbench.tools.realbugs`).
"""

from faultbench.realbugs.case import OWN, Case, CaseRun, Reference, Symptom
from faultbench.realbugs.suite import (
    DROPPED,
    FORMS,
    SUITE,
    Dropped,
    all_cases,
    case_names,
    counts_by_label,
    get_case,
)

__all__ = [
    "DROPPED",
    "FORMS",
    "OWN",
    "SUITE",
    "Case",
    "CaseRun",
    "Dropped",
    "Reference",
    "Symptom",
    "all_cases",
    "case_names",
    "counts_by_label",
    "get_case",
]
