"""The providers this deployment offers: those enabled in `config.toml`, replaced as a whole when the
configuration is reloaded (`replace`)."""

from __future__ import annotations

from collections.abc import Iterator

from payorch.providers.base import Provider


class ProviderCatalogue:
    def __init__(self, providers: list[Provider]) -> None:
        self._providers = {provider.name: provider for provider in providers}

    def replace(self, providers: list[Provider]) -> None:
        """Offer `providers` from now on, instead of those offered until now. A call already made
        to an adapter that goes finishes on it: whoever holds one keeps it for the call."""
        self._providers = {provider.name: provider for provider in providers}

    def get(self, name: str) -> Provider | None:
        return self._providers.get(name)

    def __iter__(self) -> Iterator[Provider]:
        return iter(sorted(self._providers.values(), key=lambda provider: provider.name))

    def __len__(self) -> int:
        return len(self._providers)

    def all_payment_methods(self) -> frozenset[str]:
        return frozenset(
            method for provider in self._providers.values() for method in provider.payment_methods
        )
