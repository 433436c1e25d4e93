"""fs-serve: an OpenAI-compatible HTTP server on fs-generate's continuous-batching engine.

from fs_serve import ServeConfig, create_app
app = create_app(lambda: fs_generate.load(None), ServeConfig(model_id="fs-demo"))  # any ASGI server runs it
"""

from .app import ServeConfig, create_app
from .errors import APIError, ServeError

__version__ = "0.1.0"

__all__ = ["APIError", "ServeConfig", "ServeError", "__version__", "create_app"]
