"""The cases: one module per real bug (see :mod:`faultbench.realbugs.case`)."""
