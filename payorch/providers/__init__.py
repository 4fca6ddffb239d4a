"""Adapters from payorch's one provider interface to external payment providers."""
