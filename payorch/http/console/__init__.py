"""The merchant console: server-rendered pages for a merchant's admin (`routes.py`)."""
