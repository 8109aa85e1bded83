"""The egress proxy: the only way out of a session pod. Model calls get the session's real key in place of the
phantom its agent holds, and are metered and held to the session's budget; other traffic goes through CONNECT or
plain HTTP to the hosts the session's allowlist names; git gets the session's token."""
