"""Records and the store: a run's key, its stored attempt files, training what is missing."""
