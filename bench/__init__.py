"""Load benchmarks that print their figures: `make bench` (`python -m bench`)."""
