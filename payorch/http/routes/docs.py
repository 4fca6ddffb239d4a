"""/docs: the API reference, Swagger UI rendering /api/v1/openapi.json, with nothing from outside.

Swagger UI's files come from the `swagger-ui-py` package (Apache-2.0, Swagger UI 5, which reads
OpenAPI 3.1) and are served from here, under /docs/assets/: the page loads no script, style, font
or image from another host, and Swagger UI's online validator badge is switched off.
"""

from __future__ import annotations

import html
import importlib.util
from pathlib import Path

import trio
from quart import Blueprint, Response, url_for
from quart_schema import hide

from payorch.values.errors import NotFound
from payorch.values.html import see_other

blueprint = Blueprint("docs", __name__)

SWAGGER_UI_PACKAGE = "swagger_ui"
# The files the page uses, and nothing else of the package's directory.
ASSET_TYPES = {
    "swagger-ui.css": "text/css; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "favicon-32x32.png": "image/png",
    "favicon-16x16.png": "image/png",
}
INIT_SCRIPT = "payorch-docs.js"
CACHE_CONTROL = "public, max-age=86400"

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>payorch API reference</title>
  <link rel="stylesheet" href="{assets}/swagger-ui.css">
  <link rel="icon" type="image/png" href="{assets}/favicon-32x32.png" sizes="32x32">
  <link rel="icon" type="image/png" href="{assets}/favicon-16x16.png" sizes="16x16">
</head>
<body data-openapi-url="{openapi}">
  <div id="swagger-ui"></div>
  <noscript>This page needs JavaScript. The OpenAPI document itself is at
    <a href="{openapi}">{openapi}</a>.</noscript>
  <script src="{assets}/swagger-ui-bundle.js"></script>
  <script src="{assets}/{init}"></script>
</body>
</html>
"""

# Kept out of the page so that it needs no inline script.
INIT = """window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: document.body.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    deepLinking: true,
    layout: "BaseLayout",
    presets: [SwaggerUIBundle.presets.apis],
    validatorUrl: null,
    docExpansion: "list",
    defaultModelsExpandDepth: 0,
    displayOperationId: false,
    persistAuthorization: false,
  });
  // Swagger UI names a parameter's field by a placeholder alone: give each one a label.
  new MutationObserver(function () {
    document.querySelectorAll("tr[data-param-name] :is(input, select, textarea):not([aria-label])")
      .forEach(function (field) {
        var row = field.closest("tr[data-param-name]");
        field.setAttribute("aria-label", row.dataset.paramName + " (" + row.dataset.paramIn + ")");
      });
  }).observe(document.getElementById("swagger-ui"), { childList: true, subtree: true });
});
"""
# What the page may load: its own scripts, styles and images (Swagger UI's icons are data: URLs),
# and the OpenAPI document (or an operation tried out) from this host; nothing else, never framed.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

_cache: dict[str, bytes] = {}


def _asset_directory() -> Path:
    spec = importlib.util.find_spec(SWAGGER_UI_PACKAGE)  # found without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise NotFound("the API reference assets are not installed (package swagger-ui-py)")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


async def _asset(name: str) -> bytes:
    if name not in _cache:
        _cache[name] = await trio.Path(_asset_directory() / name).read_bytes()
    return _cache[name]


@blueprint.get("/")
@hide
async def root() -> Response:
    """The service's address in a browser: on to the merchant console (its sign-in page when
    signed out). The API's routes are under /api/v1; its reference is at /docs."""
    return see_other(url_for("console.home"))


@blueprint.get("/docs")
@hide
async def docs_page() -> Response:
    """The API reference page."""
    assets = url_for("docs.docs_asset", name="_").rsplit("/", 1)[0]
    page = PAGE.format(assets=html.escape(assets), openapi=html.escape(url_for("openapi")), init=INIT_SCRIPT)
    response = Response(page, content_type="text/html; charset=utf-8")
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


@blueprint.get("/docs/assets/<name>")
@hide
async def docs_asset(name: str) -> Response:
    """A file of Swagger UI, or the page's own start-up script."""
    if name == INIT_SCRIPT:
        body = INIT.encode()
        content_type = "text/javascript; charset=utf-8"
    elif name in ASSET_TYPES:
        body = await _asset(name)
        content_type = ASSET_TYPES[name]
    else:
        raise NotFound("no such asset")
    response = Response(body, content_type=content_type)
    response.headers["Cache-Control"] = CACHE_CONTROL
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
