"""Training and monitoring: the model recipes, the one loop, the Monitor and its trace."""
