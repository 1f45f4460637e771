# The fleet's Node hop (harness/fleet/nodehop: grpc-js auto-instrumented by OpenTelemetry, its locked packages from
# the npm registry), on the project's base image with Debian's nodejs and npm. Build context is the repo root:
#   docker compose -f compose/docker-compose.yml -f compose/retry-storm-go.yml build rsg-node
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1
FROM ${PYTHON_IMAGE}
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app/nodehop
COPY harness/fleet/nodehop/package.json harness/fleet/nodehop/package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --loglevel=error
COPY harness/fleet/nodehop/hop.js ./
COPY compose/grpc_health_probe.py /app/compose/grpc_health_probe.py
USER 10001:10001
EXPOSE 50051
ENTRYPOINT ["node", "/app/nodehop/hop.js"]
