"""The domain: rules and values with no HTTP and no SQL."""
