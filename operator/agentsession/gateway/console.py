"""The web console's static files: `/` and `/console/...`, from the package's `console/` folder.

The console is a client of `/ws` like any other: it holds no state on the server and gets no other powers. Its
files are plain HTML, CSS and JavaScript modules; xterm.js is vendored into `console/vendor/` at image build
(`hack/image/vendor-console.sh`), and the page works without it, saying the terminal is unavailable.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

CONSOLE_DIR = Path(__file__).parent / "console"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}

# Scripts only from this origin, never inline; the WebSocket back to this origin only. Styles allow inline
# rules because xterm.js writes its theme into <style> elements and 24-bit colours into style attributes.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "connect-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Each gateway version brings its own files: revalidate instead of running yesterday's script.
    "Cache-Control": "no-cache",
}


def resolve(root: Path, relative: str) -> Path | None:
    """The file `relative` names inside `root`, or None for anything outside it, hidden, or of an unknown type."""
    parts = Path(relative).parts
    if not parts or any(p in ("..", "") or p.startswith(".") for p in parts):
        return None
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()) or path.suffix not in CONTENT_TYPES or not path.is_file():
        return None
    return path


def _file(path: Path) -> web.FileResponse:
    headers = {**SECURITY_HEADERS, "Content-Type": CONTENT_TYPES[path.suffix]}
    return web.FileResponse(path, headers=headers)


async def index(request: web.Request) -> web.StreamResponse:
    return _file(CONSOLE_DIR / "index.html")


async def asset(request: web.Request) -> web.StreamResponse:
    path = resolve(CONSOLE_DIR, request.match_info["path"])
    if path is None:
        raise web.HTTPNotFound(text="no such console file", headers=SECURITY_HEADERS)
    return _file(path)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_get("/console/{path:.+}", asset)
