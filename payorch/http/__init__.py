"""HTTP layer: authenticates, validates and translates. It never changes payment state itself."""
