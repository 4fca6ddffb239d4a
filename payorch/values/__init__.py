"""Values of payorch's interface that every layer speaks: money, the domain's errors, pages of a
list, times as the interface writes them, secrets and their sealing, and the frame of an HTML page.
Nothing here imports a layer above it (see docs/architecture.md)."""
