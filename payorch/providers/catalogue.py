"""The providers this deployment offers: those enabled in `config.toml`."""

from __future__ import annotations

from collections.abc import Iterator

from payorch.providers.base import Provider


class ProviderCatalogue:
    def __init__(self, providers: list[Provider]) -> None:
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
