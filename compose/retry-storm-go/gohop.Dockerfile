# The fleet's Go hop (harness/fleet/gohop: grpc-go and OpenTelemetry Go from Debian's packages, GOPATH mode, offline
# once they are installed), with retry-storm-go's grpc-go service configs in /etc/retry-storm-go/, on the project's
# base image (its Python runs the stdlib gRPC health probe). Build context is the repo root:
#   docker compose -f compose/docker-compose.yml -f compose/retry-storm-go.yml build rsg-edge
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1
FROM ${PYTHON_IMAGE} AS build
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends golang-go golang-google-grpc-dev golang-opentelemetry-otel-dev \
       >/dev/null \
    && rm -rf /var/lib/apt/lists/*
COPY harness/fleet/gohop /src/gohop
WORKDIR /src/gohop
RUN GOPATH=/usr/share/gocode GO111MODULE=off GOFLAGS= CGO_ENABLED=0 go build -trimpath -o /gohop .

FROM ${PYTHON_IMAGE}
COPY --from=build /gohop /usr/local/bin/gohop
COPY harness/plans/retry-storm-go/naive.json harness/plans/retry-storm-go/throttled.json /etc/retry-storm-go/
COPY compose/grpc_health_probe.py /app/compose/grpc_health_probe.py
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
EXPOSE 50051
ENTRYPOINT ["gohop"]
