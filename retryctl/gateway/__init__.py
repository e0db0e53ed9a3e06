"""``retryctl serve``: an OpenAI-compatible gateway that samples adaptively and says how sure it is.

    from retryctl.gateway import GatewayConfig, create_app

    app = create_app(GatewayConfig(upstream="http://127.0.0.1:8000/v1", upstream_model="smollm2"))

Serve ``app`` with any ASGI server (``retryctl serve`` runs uvicorn). A request with ``"adaptive": true``
is sampled through the attempt engine and answered with the chosen candidate and a ``retryctl`` block
(confidence, samples used, why sampling stopped, the candidates, the verdict); any other request is
proxied with the controller's retries, breaker and error classes. See docs/gateway.md.

It needs the ``gateway`` extra (``pip install 'retryctl[gateway]'``): without it, importing this
package raises :class:`~retryctl.exceptions.MissingExtra` naming the extra.
"""

from retryctl.exceptions import MissingExtra

try:
    from retryctl.gateway._app import Gateway, app_from_env, create_app
    from retryctl.gateway._config import GatewayConfig
    from retryctl.gateway._errors import ApiError
    from retryctl.gateway._request import AdaptiveOptions
    from retryctl.gateway._upstream import EmbeddedUpstream, HttpUpstream, Upstream
except (ModuleNotFoundError, MissingExtra) as exc:  # starlette, uvicorn, aiohttp, openai: not in the core
    missing = exc.module if isinstance(exc, MissingExtra) else exc.name
    raise MissingExtra(feature="retryctl.gateway", extra="gateway", module=missing) from exc

__all__ = [
    "AdaptiveOptions",
    "ApiError",
    "EmbeddedUpstream",
    "Gateway",
    "GatewayConfig",
    "HttpUpstream",
    "Upstream",
    "app_from_env",
    "create_app",
]
