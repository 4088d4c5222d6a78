"""What one running service holds: its settings, the store it serves, the cache of what it
computed from it, and Optuna's storage for the pages' parameter importances."""

from __future__ import annotations

import threading
from typing import Any

from autotune.service.cache import Cache
from autotune.service.settings import ServiceSettings
from autotune.storage import Store, mask


class Service:
    """The state shared by every request. Opening it reaches the database (and creates
    autotune's tables in a new one): a storage that cannot be reached is one line at start."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.store = Store(settings.storage)
        self.url = self.store.url
        self.shown = mask(self.url)
        self.cache = Cache(self.store)
        self._lock = threading.Lock()
        self._optuna: Any = None

    @property
    def optuna(self) -> Any:
        """Optuna's storage on the same database, made once."""
        with self._lock:
            if self._optuna is None:
                from autotune.storage import optuna_storage

                self._optuna = optuna_storage(self.url)
            return self._optuna

    def warm(self) -> None:
        """Import what submits, exports and pages need (torch's backends, Accelerate,
        Transformers' CompileConfig, plotly), once, before the first request: two requests
        importing torch at once in two threads can break its initialisation."""
        from autotune.strategy import inductor_modes, registered_backends

        registered_backends()
        inductor_modes()
        import accelerate.utils  # noqa: F401
        import optuna.importance  # noqa: F401
        import plotly.graph_objects  # noqa: F401
        from transformers import CompileConfig  # noqa: F401
