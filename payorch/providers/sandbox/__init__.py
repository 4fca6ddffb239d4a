"""The sandbox: a complete simulated payment provider, in-process, that behaves like an external one.

- `adapter.SandboxProvider`: payorch's adapter for it (the `Provider` interface);
- `simulator`: the provider's own behaviour: outcomes from test data, the events they queue;
- `signing`: its webhook signature scheme (`Sandbox-Signature`);
- `pages.blueprint`: its hosted checkout page under `/sandbox/checkout/<id>`;
- `sender.run_event_sender`: the task delivering its events to the registered endpoints.

Its tables (`sandbox_*`) and all their SQL live in `payorch.storage.sandbox`.
"""

from payorch.providers.sandbox.adapter import SandboxProvider
from payorch.providers.sandbox.sender import run_event_sender

__all__ = ["SandboxProvider", "run_event_sender"]
