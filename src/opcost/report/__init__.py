"""What the user reads: the figures and the run's summary."""
