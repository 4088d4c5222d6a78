"""The search service (``autotune serve``): an HTTP API and live pages over one storage.

- :mod:`.settings`: what the operator decides (token, model root, body limit) and the rule
  that only loopback is served without a token;
- :mod:`.app`: the ASGI application, FastAPI behind :mod:`.guard` (the token, compared in
  constant time; the body limit) with every error as one line of JSON (:mod:`.errors`);
- :mod:`.api`: the JSON API (:mod:`.schemas` its shapes); :mod:`.pages`: the index, live, and
  each study's dashboard;
- :mod:`.views` (summaries and one study), :mod:`.lookup` (the best known config),
  :mod:`.exports` (an export and its cache artefact over HTTP), read through :mod:`.cache`;
- :mod:`.intake`: a submitted spec, which may name no code.

A request never makes the server or a worker import or run code it names.
"""

from __future__ import annotations

from autotune.service.settings import ServiceSettings, check_bind, loopback

__all__ = ["ServiceSettings", "check_bind", "create_app", "loopback"]


def create_app(settings: ServiceSettings) -> object:
    """The ASGI application over ``settings.storage`` (see :mod:`.app`)."""
    from autotune.service.app import create_app

    return create_app(settings)
