"""Where practitioners train: adapters for training frameworks (PyTorch Lightning)."""
