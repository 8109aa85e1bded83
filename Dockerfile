# The project's one image: the operator, the gateway, agentctl and the demo agent (pods choose with `command`).
#
#   docker build -t agentsession:dev .                       # wheels are built inside, from PyPI
#   hack/image/build.sh                                      # no network inside: wheels come from the host
#
# BASE_IMAGE must provide python3 of the same minor version the wheels are built for (3.11).
ARG BASE_IMAGE=python:3.11-slim

# Stage 1: a wheel for the project and for every dependency. hack/image/build.sh pre-fills
# hack/image/wheelhouse on the host (so nothing is fetched here); otherwise pip builds them from PyPI, after
# the web console's xterm.js is vendored from npm (`make console-assets` on the host spares that).
FROM ${BASE_IMAGE} AS wheels
COPY . /src
RUN set -eu; \
    if ls /src/hack/image/wheelhouse/agentsession-*.whl >/dev/null 2>&1; then \
        cp -r /src/hack/image/wheelhouse /wheels; \
    else \
        if [ ! -f /src/operator/agentsession/gateway/console/vendor/VERSIONS ]; then \
            apt-get update -qq && apt-get install -y -qq --no-install-recommends npm openssl >/dev/null; \
            /src/hack/image/vendor-console.sh; \
        fi; \
        python3 -m pip wheel --no-cache-dir --wheel-dir /wheels /src pip; \
    fi

# Stage 2: a virtual environment installed offline from those wheels only.
FROM ${BASE_IMAGE} AS install
COPY --from=wheels /wheels /wheels
# Debian's python3 ships neither pip nor ensurepip, so pip runs straight from its wheel, and the environment
# gets no pip of its own: nothing in the image installs packages at run time.
RUN set -eu; \
    python3 -m venv --without-pip /opt/agentsession; \
    /opt/agentsession/bin/python "$(ls /wheels/pip-*.whl | head -n1)/pip" install --no-index --find-links /wheels \
        --disable-pip-version-check --no-warn-script-location agentsession

# Final stage: the base plus the environment, running as an unprivileged user.
FROM ${BASE_IMAGE}
COPY --from=install /opt/agentsession /opt/agentsession
# Named users for uid 65532 (the programs, and the agent in session pods) and 65533 (agentctl and its terminal in
# session pods, in the first one's group): tools that ask for the user name (kopf's identity, shells) need one.
RUN echo 'agentsession:x:65532:65532:agentsession:/tmp:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'agentctl:x:65533:65532:agentctl:/var/lib/agentctl/home:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'agentsession:x:65532:' >> /etc/group
ENV PATH=/opt/agentsession/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
USER 65532:65532
WORKDIR /tmp
# No ENTRYPOINT: each pod picks its program (agentsession-operator, agentsession-gateway, agentctl,
# agentsession-demo-agent) with `command`.
CMD ["agentsession-operator"]
