"""What the supervisors use of the running service. The runtime (the composition root) builds one
object that has it all, `http.context.Background`, and hands it to the HTTP app and to every
supervisor; the supervisors know only this much of it, and nothing of the HTTP layer."""

from __future__ import annotations

from typing import Protocol

from payorch.config import Settings
from payorch.engine.actors import ActorRegistry
from payorch.engine.context import PaymentsContext
from payorch.metrics import Metrics
from payorch.restarts import SupervisorBoard
from payorch.storage.database import Database
from payorch.storage.nodes import NodeIdentity
from payorch.values.clock import Clock
from payorch.values.secretbox import SecretBox


class Background(Protocol):
    @property
    def settings(self) -> Settings: ...

    @property
    def db(self) -> Database: ...

    @property
    def secrets(self) -> SecretBox: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def node(self) -> NodeIdentity: ...  # what this process's claims are named by

    @property
    def actors(self) -> ActorRegistry[PaymentsContext]: ...

    @property
    def supervisors(self) -> SupervisorBoard: ...

    @property
    def clock(self) -> Clock: ...  # wall time for everything stored or compared
