"""Which pages may open `/ws`, and which Host names a gateway without authentication answers.

A browser lets any page open a WebSocket to anywhere, and sends the page's `Origin` with the handshake. Without a
check, a page on any site could drive a gateway that relies on what the browser brings along (a cookie-based auth
proxy in front adds the token) or needs nothing at all (dev mode). So `/ws` takes a handshake with an `Origin` only
when it is the gateway's own (the `Host` the request names) or one of `--allowed-origins`; clients that are not
browsers send no `Origin` and are not affected. A page that rebinds its own name to the gateway's address is same
origin by that test, which is why dev mode also answers loopback Host names only.
"""

from __future__ import annotations

import ipaddress

from yarl import URL

DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}
LOOPBACK_NAMES = ("localhost", "localhost.")


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 in brackets or not) is this machine's loopback."""
    name = host.strip().lower().removeprefix("[").removesuffix("]")
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_and_port(host_header: str) -> tuple[str, int | None] | None:
    try:
        url = URL(f"//{host_header.strip()}")
    except ValueError:
        return None
    if not url.host or url.path not in ("", "/") or url.user is not None:
        return None
    return url.host.lower(), url.explicit_port


def host_name(host_header: str | None) -> str | None:
    """The name or address a Host header names, without its port; None for one that is not a host."""
    parsed = _host_and_port(host_header or "")
    return parsed[0] if parsed else None


def normalize_origin(origin: str) -> str | None:
    """`scheme://host[:port]` in lower case without the scheme's default port; None for anything else (`null`)."""
    try:
        url = URL(origin.strip())
    except ValueError:
        return None
    scheme = url.scheme.lower()
    if scheme not in DEFAULT_PORTS or not url.host or url.path not in ("", "/") or url.query_string:
        return None
    port = url.explicit_port
    suffix = "" if port is None or port == DEFAULT_PORTS[scheme] else f":{port}"
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{scheme}://{host.lower()}{suffix}"


def origin_allowed(origin: str | None, host_header: str | None, allowed: frozenset[str]) -> bool:
    """Whether a handshake with this Origin may proceed: none at all (not a browser), the gateway's own (same host
    and port as the Host header; a Host without a port is the default port of the page's scheme), or a listed one."""
    if origin is None:
        return True
    normalized = normalize_origin(origin)
    if normalized is None:
        return False
    if normalized in allowed:
        return True
    url = URL(normalized)
    target = _host_and_port(host_header or "")
    if target is None or url.host is None:
        return False
    host, port = target
    scheme_port = DEFAULT_PORTS[url.scheme]
    return url.host.lower() == host and (port or scheme_port) == (url.explicit_port or scheme_port)


def loopback_host(host_header: str | None) -> bool:
    name = host_name(host_header)
    return name is not None and is_loopback(name)
