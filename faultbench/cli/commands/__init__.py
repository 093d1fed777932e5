"""One module per ``faultbench`` sub-command."""
