"""The command line: ``faultbench.cli.main`` parses, one module per verb in ``commands``."""
